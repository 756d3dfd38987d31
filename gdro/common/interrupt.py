"""The Ctrl-C handler an entry point installs before it imports anything heavy.

A Ctrl-C that lands while Python imports torch, Hydra or transformers cuts the import in half; any later import of
the same module (an error handler that imports gdro.compose.build, say) may then segfault or abort in C++. So the entry
points (gdro.cli.entry, ``python -m gdro.cli.train``) install :func:`interrupt_at_once` first: until the run installs its own
handler (gdro.run.lifecycle.StopRequest: finish the step, save, exit), a SIGINT prints one line and ends the process
with status 130 without running any more Python (``os._exit``: no half-imported module is touched again, nothing is
written). What has been written before that moment stays as it was (a lock the process held is dropped by the
kernel; the next start takes the dir over and notes it in its log).

Only the interpreter's own start-up (a few tens of milliseconds before the first line of gdro runs) is outside it.
This module imports nothing but the standard library.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from typing import NoReturn

EXIT_INTERRUPTED = 128 + signal.SIGINT
BEFORE_THE_RUN = "before the run began; run the same command again to start or resume it"

# what the handler says and the status it exits with, read when the signal lands: the command changes them as it goes
# (:func:`say`), so the line is true at every moment (before the run, after it ended, while it exits on an error)
_state: dict[str, object] = {"line": None, "code": EXIT_INTERRUPTED}


def say(prog: str, what: str | None, code: int = EXIT_INTERRUPTED) -> None:
    """From now on a Ctrl-C under :func:`interrupt_at_once`'s handler prints ``<prog>: stopped by Ctrl-C <what>``
    and exits ``code``; ``what=None``: it prints nothing (the command has said its one line already)."""
    _state["line"] = None if what is None else f"{prog}: stopped by Ctrl-C {what}\n".encode()
    _state["code"] = code


def interrupt_at_once(prog: str, what: str | None = BEFORE_THE_RUN, code: int = EXIT_INTERRUPTED) -> object:
    """From now on (until another handler replaces it), SIGINT prints ``<prog>: stopped by Ctrl-C <what>`` on
    stderr and exits ``code`` (130) at once; :func:`say` changes the line later. Returns the handler it replaced (to
    restore: ``signal.signal(SIGINT, old)``). Main thread only (elsewhere a no-op, as ``signal.signal`` allows no
    other)."""
    say(prog, what, code)
    try:
        return signal.signal(signal.SIGINT, _handler)
    except ValueError:  # not the main thread
        return signal.getsignal(signal.SIGINT)


def _flush() -> None:
    """What was printed stays printed (best effort: a stream may be mid-write in the interrupted frame)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _handler(signum: int, frame: object) -> None:
    _flush()
    try:
        if _state["line"] is not None:
            os.write(2, _state["line"])
    finally:
        os._exit(int(_state["code"]))


def exit_now(prog: str, code: object, after: str) -> NoReturn:
    """End the command with status ``code`` (a ``SystemExit`` code) without the interpreter's teardown, in which
    Python gives SIGINT back its default action (a Ctrl-C there killed the process with no word): a Ctrl-C from
    here on says ``stopped by Ctrl-C <after>`` (exit 130) when the command ended well, and nothing more (its own
    status) when it has said its line. What the interpreter would do at exit is done first: non-daemon threads
    joined, ``atexit`` callbacks run (W&B, logging's flush), the streams flushed."""
    if isinstance(code, str):  # sys.exit("message"): the message on stderr, status 1
        print(code, file=sys.stderr)
        code = 1
    status = 0 if code is None else int(code)
    interrupt_at_once(prog, after if status == 0 else None, EXIT_INTERRUPTED if status == 0 else status)
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon and t.is_alive():
            t.join()
    atexit._run_exitfuncs()
    _flush()
    os._exit(status)
