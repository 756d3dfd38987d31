"""CPU threads when the job shares the CPU (issue #52; the figures: docs/performance.md, scripts/bench_contention.py).

torch's default is a thread per core. Beside another busy process its OpenMP threads wait on each other while one of
them is descheduled, and the main job ran 2.4x slower beside one busy process and 8.2x beside two. ``threads: auto``
(gdro-train's default) takes the cores this process may use (``os.sched_getaffinity``, at most torch's default) less
those that other processes keep busy, measured from ``/proc/stat`` over 0.2 s when the run starts
(:func:`auto_threads`), and measures again when a step runs far slower than the first ones (:class:`SlowdownWatch`:
another job started beside this one). ``OMP_NUM_THREADS``, when set, is honoured as given (a scheduler that pinned it
knows best); so is a number (``threads=2``) or ``threads=null`` (torch's default), which only get a one-line warning
when steps slow down.

The thread count does not change the toy-scale numbers: the main job's metrics and final weights are identical with 1
and 2 threads (tests/test_threads.py); a reduction that a larger model splits over threads may sum in another order,
so for bit-exact reruns of a larger model pin ``threads`` (the portable mode, GDRO_PORTABLE=1, runs one thread).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

AUTO = "auto"
_torch_default: int | None = None  # torch's own thread count, read before gdro first sets one


def place_threads(threads: int | str | None, portable: bool = False) -> int | None:
    """Set torch's intra-op threads for the ``threads`` setting (a number, ``auto``, or None: torch's default, left
    alone); returns the count set. The portable mode runs one thread, ``auto`` included."""
    import torch

    global _torch_default
    if _torch_default is None:
        _torch_default = torch.get_num_threads()
    if threads is None:
        return None
    count = (1 if portable else auto_threads(_torch_default)) if threads == AUTO else int(threads)
    if threads == AUTO and count == torch.get_num_threads():
        return count  # torch's own setting left as it is (setting it fixes MKL's count too: slower on small matmuls)
    torch.set_num_threads(count)
    return count


def torch_default() -> int:
    """torch's own thread count (before gdro set one)."""
    import torch

    return _torch_default if _torch_default is not None else torch.get_num_threads()


def usable_cpus() -> set[int]:
    """The CPUs this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def busy_cores(cpus: set[int], interval: float = 0.2) -> float | None:
    """How many of ``cpus`` other processes keep busy (the sum of their busy fractions over ``interval`` seconds,
    while this process sleeps); None where ``/proc/stat`` cannot be read."""

    def snapshot() -> dict[int, tuple[int, int]]:
        out = {}
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                name, *values = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                    ticks = [int(v) for v in values[:8]]
                    out[int(name[3:])] = (sum(ticks), ticks[3] + (ticks[4] if len(ticks) > 4 else 0))  # idle+iowait
        return out

    try:
        before = snapshot()
        time.sleep(interval)
        after = snapshot()
    except (OSError, ValueError, IndexError):
        return None
    busy = 0.0
    for cpu, (total, idle) in after.items():
        if cpu in before and total > before[cpu][0]:
            busy += 1.0 - (idle - before[cpu][1]) / (total - before[cpu][0])
    return busy


def auto_threads(default: int, interval: float = 0.2) -> int:
    """``threads: auto``: ``OMP_NUM_THREADS`` when set; else the usable cores (at most ``default``, torch's own
    count) less the busy ones, at least 1."""
    pinned = os.environ.get("OMP_NUM_THREADS", "").strip()
    if pinned.isdigit() and int(pinned) >= 1:
        return int(pinned)
    cpus = usable_cpus()
    busy = busy_cores(cpus, interval)
    free = len(cpus) if busy is None else len(cpus) - int(busy + 0.5)
    return max(1, min(default, free))


@dataclass
class SlowdownWatch:
    """Watches the steps' times (``time/step_s`` less ``time/eval_s``): the median of steps 2-4 is the reference; a
    step more than ``factor`` times slower means the CPU is shared now. Under ``threads: auto`` the threads are
    chosen again (and the reference measured again); otherwise one warning says so, once."""

    auto: bool
    factor: float = 2.0
    times: list[float] = field(default_factory=list)
    reference: float | None = None
    warned: bool = False

    def observe(self, row: dict[str, Any]) -> str | None:
        """The step's row; returns a line to log when the threads changed or the slowdown is first seen."""
        if not isinstance(row.get("time/step_s"), (int, float)):
            return None
        seconds = float(row["time/step_s"]) - float(row.get("time/eval_s") or 0.0)
        if self.reference is None:
            self.times.append(seconds)
            if len(self.times) == 4:  # the first step warms up: steps 2-4
                self.reference = statistics.median(self.times[1:])
            return None
        if seconds <= self.factor * self.reference:
            return None
        import torch

        now = torch.get_num_threads()
        slower = f"a step ran {seconds / self.reference:.1f}x slower than the first ones (another process shares the CPU?)"
        if self.auto:
            threads = auto_threads(torch_default())
            self.times, self.reference = [], None  # measured again at the new count
            if threads != now:
                torch.set_num_threads(threads)
                return f"{slower}: threads {now} -> {threads} (threads=auto)"
            return None
        if self.warned:
            return None
        self.warned = True
        return f"{slower}; this run has threads={now}: threads=auto adapts to a shared CPU (docs/performance.md)"
