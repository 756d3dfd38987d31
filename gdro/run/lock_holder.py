"""Who holds a run dir's lock (gdro.run.lock): the record a holder writes about itself, its one-line description,
and whether a holder that left its record unreleased may still run (a live pid on this host, a fresh heartbeat from
another)."""

from __future__ import annotations

import os
import socket
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any


def new_record() -> dict[str, Any]:
    """This process's record as the holder (``beat``: its heartbeat, rewritten while it holds the lock)."""
    pid = os.getpid()
    return {"state": "held", "pid": pid, "host": socket.gethostname(), "boot_id": _boot_id(),
            "pid_start": _pid_start(pid), "started": datetime.now().astimezone().isoformat(timespec="seconds"),
            "beat": time.time(), "argv": " ".join(sys.argv)}


def describe(holder: dict[str, Any] | None, now: float | None = None) -> str:
    """``pid 123 on host node7 since 2026-12-02 16:30:01, last heartbeat 4 s ago`` (or what is known of it)."""
    if not holder:
        return "another process (its record is unreadable or not yet written)"
    now = time.time() if now is None else now
    beat = holder.get("beat")
    ago = f", last heartbeat {max(0.0, now - beat):.0f} s ago" if isinstance(beat, (int, float)) else ""
    return f"pid {holder.get('pid')} on host {holder.get('host')} since {holder.get('started')}{ago}"


def live_elsewhere(found: dict[str, Any] | None, stale_s: float) -> bool:
    """A record that was never released and whose holder may still run although the kernel lock was free:
    on this host a live pid (a filesystem ignoring locks), on another a beat younger than ``stale_s``."""
    if not found or found.get("state") != "held":
        return False
    if found.get("host") == socket.gethostname():
        return _alive_here(found)
    beat = found.get("beat")
    return isinstance(beat, (int, float)) and time.time() - beat < stale_s


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (Linux): state, ppid, ...; None if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > 19 else None


def _pid_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux): tells a live holder from a reused pid."""
    fields = _proc_stat(pid)
    return fields[19] if fields else None


def _alive_here(holder: dict[str, Any]) -> bool:
    """Whether a record written on this host (and this boot) belongs to a process that still runs.

    A zombie does not: it has exited (its kernel lock is gone) and waits only for its parent to reap it -- right
    after a ``kill -9`` for a moment, and for ever in a container whose PID 1 never reaps (#28 B11).
    """
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid == os.getpid() or holder.get("boot_id") != _boot_id():
        return False
    try:
        os.kill(pid, 0)  # (succeeds for a zombie)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _proc_stat(pid)
    if fields is not None and _exited(pid, fields[0]):
        return False
    return holder.get("pid_start") in (None, fields[19] if fields else None)


def _exited(pid: int, state: str) -> bool:
    """Whether a process whose main thread is in ``state`` has exited: its main thread a zombie (Z) or being reaped
    (X), and no other thread left (a main thread that ended alone leaves the process running; and the kernel drops
    the process's locks only with its last thread)."""
    if state not in ("Z", "X"):
        return False
    try:
        return os.listdir(f"/proc/{pid}/task") in ([], [str(pid)])
    except OSError:
        return True
