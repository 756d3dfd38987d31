"""A bound on the CPU time a body of Python code may spend in the main thread (:func:`deadline`), which the reward
puts on each parse and each verify of model text (gdro.grading.rewards), rather than math-verify's own
``parsing_timeout``/``timeout_seconds``:

* math-verify's timeouts call ``signal.alarm(t)``: ``t`` must be an ``int`` -- a float such as 1.0 raises a
  ``TypeError`` that ``parse`` swallows, so *every* answer silently becomes unparsable; each call ends with
  ``signal.alarm(0)``, which cancels any other pending SIGALRM timer (pytest-timeout's signal method, a
  caller's own alarm); in a non-main thread they raise ``ValueError``; and a timeout is only logged (with
  the whole prediction text) and returned as ``[]``/``False`` unless ``raise_on_error=True``, which also
  re-raises every bad-input error sympy can produce.
* So math-verify always runs with its timeouts off (``None``) and ``raise_on_error=False``, and each parse and each
  verify runs under this deadline, a bound on the CPU time the scoring thread spends, so that a busy machine does not
  change a verdict (``signal.setitimer``: float seconds; a pending outer ITIMER_REAL timer is re-armed afterwards
  with its remaining time; the one exception raised, :class:`Deadline`, is a ``BaseException`` so math-verify's
  ``except Exception`` cannot swallow it).
* In a **non-main thread** signals are unavailable: :func:`deadline` is a no-op there
  (:mod:`gdro.grading.magnitude` bounds what it can in every thread).

The deadline interrupts Python code only, so one long C call (a big-integer operation, a regex) overruns it until it
returns.
"""

from __future__ import annotations

import gc
import math
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["MAX_TIMEOUT_S", "Deadline", "deadline"]

MAX_TIMEOUT_S = 86_400.0  # setitimer overflows near 1e12 s; a day is far beyond any useful deadline


class Deadline(BaseException):
    """Raised by our SIGALRM handler; a BaseException, so math-verify's ``except Exception`` lets it pass."""


_RETRY_S = 0.01  # after the deadline the alarm repeats every 10 ms until disarmed


def _in_finalizer(frame: Any) -> bool:
    """Whether ``frame`` runs in a gc callback, a ``__del__`` or ``sys.unraisablehook``.

    An exception raised there is only reported ("Exception ignored in ..."), never seen by the body, and a
    slow hook (pytest's formats a traceback) would be interrupted in turn.
    """
    hooks = (*gc.callbacks, sys.unraisablehook)
    codes = {getattr(getattr(h, "__func__", getattr(h, "func", h)), "__code__", None) for h in hooks}
    while frame is not None:
        if frame.f_code in codes or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


@contextmanager
def deadline(seconds: float, *, wall_s: float | None = None) -> Iterator[None]:
    """Raise :class:`Deadline` in the body once it has used ``seconds`` of CPU time (main thread; elsewhere a no-op).

    The bound is on the CPU time of the scoring thread (``time.thread_time``), not on the wall clock: a wall-clock
    alarm fires after ``seconds``, and if the thread has used less CPU than that (the machine was busy: the wall
    ran, the parse did not), it is re-armed for the CPU time left. So a verdict does not depend on how loaded the
    machine is: measured, a long answer that timed out on a machine loaded 4x beyond its cores under a wall-clock
    bound scores the same as on an idle one. (A body that waits rather than computes is therefore not
    interrupted by the bound; parsing and verifying never wait.)

    The alarm *repeats* every ``_RETRY_S`` after the deadline until the body exits: where the signal lands in
    a gc callback, a ``__del__`` or the unraisable hook the handler does not raise (the exception would only
    be reported), and the repeat makes sure the body is still interrupted. The handler raises only while
    armed: from our ``setitimer`` on entry until the first step of the exit, so no ``Deadline`` escapes the
    context (a SIGALRM before that ``setitimer`` is an outer timer's: it goes to that timer's handler). A
    pending outer ITIMER_REAL timer is honoured: if it is due first we stop then, and it is re-armed
    afterwards with its remaining time (at least 1 µs), so its own handler still runs.

    ``wall_s`` (None: no such bound) also ends a body that *waits* (a user's reward function that sleeps or calls a
    server: gdro.grading.functions) once that much wall-clock time has passed, whatever CPU time it used.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    phase = ["setup"]  # -> "armed" -> "done"
    previous: list[Any] = [None]

    def _raise_deadline(signum: int, frame: Any) -> None:
        if phase[0] == "armed":
            if _in_finalizer(frame):
                return
            cpu_left = seconds - (time.thread_time() - cpu_start)
            outer_left = outer_delay - (time.monotonic() - start) if outer_delay > 0 else math.inf
            wall_left = wall_s - (time.monotonic() - start) if wall_s is not None else math.inf
            if cpu_left > 0 and outer_left > 0 and wall_left > 0:  # a busy machine: wall time passed, CPU time not
                signal.setitimer(signal.ITIMER_REAL, max(min(cpu_left, outer_left, wall_left), 1e-6), _RETRY_S)
                return
            raise Deadline
        elif phase[0] == "setup" and callable(previous[0]):
            previous[0](signum, frame)

    previous[0] = signal.signal(signal.SIGALRM, _raise_deadline)
    outer_delay, outer_interval, start, cpu_start = 0.0, 0.0, time.monotonic(), time.thread_time()
    try:
        outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds, _RETRY_S)
        phase[0] = "armed"
        if 0 < outer_delay < seconds:
            signal.setitimer(signal.ITIMER_REAL, outer_delay, _RETRY_S)
        yield
    finally:
        phase[0] = "done"
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous[0] if previous[0] is not None else signal.SIG_DFL)
        if outer_delay > 0:
            remaining = max(outer_delay - (time.monotonic() - start), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, remaining, outer_interval)
