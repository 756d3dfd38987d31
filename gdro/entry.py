"""Console entry points that are safe to interrupt from their first instruction.

A Ctrl-C that lands while Python imports torch, Hydra or transformers cuts the import in half; any later import of
the same module (an error handler that imports gdro.build, say) may then segfault or abort in C++. So the entry
points install :func:`interrupt_at_once` before they import anything heavy: until the run installs its own handler
(gdro.run.lifecycle.StopRequest: finish the step, save, exit), a SIGINT prints one line and ends the process with status
130 without running any more Python (``os._exit``: no half-imported module is touched again, nothing is written).
What has been written before that moment stays as it was (a lock the process held is dropped by the kernel; the
next start takes the dir over and notes it in its log).

Only the interpreter's own start-up (a few tens of milliseconds before the first line of gdro runs) is outside it.
This module imports nothing but the standard library's ``contextlib``, ``os``, ``signal`` and ``sys``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

EXIT_INTERRUPTED = 128 + signal.SIGINT


def interrupt_at_once(prog: str, what: str = "before the run began; run the same command again to start or "
                                            "resume it") -> object:
    """From now on (until another handler replaces it), SIGINT prints ``<prog>: stopped by Ctrl-C <what>`` on
    stderr and exits 130 at once. Returns the handler it replaced (to restore: ``signal.signal(SIGINT, old)``).
    Main thread only (elsewhere a no-op, as ``signal.signal`` allows no other)."""
    line = f"{prog}: stopped by Ctrl-C {what}\n".encode()

    def handler(signum: int, frame: object) -> None:
        for stream in (sys.stdout, sys.stderr):  # what was printed before stays printed (best effort: the stream
            with contextlib.suppress(Exception):  # may be mid-write in the interrupted frame)
                stream.flush()
        try:
            os.write(2, line)
        finally:
            os._exit(EXIT_INTERRUPTED)

    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        return signal.getsignal(signal.SIGINT)


def train() -> None:
    """Console script ``gdro-train``: the handler first, then gdro.cli (Hydra, and later torch) is imported."""
    interrupt_at_once("gdro-train")
    from gdro.cli import train as run

    run()
