"""The lock file ``gdro.lock`` at the level of its system calls (gdro.run.lock): the kernel record lock, taken or
refused by the filesystem, the holder's record rewritten in place padded to :data:`RECORD_BYTES`, and the file's
identity (device, inode)."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import Any

from gdro.common.ioerrors import named

RECORD_BYTES = 4096  # one page: rewritten in place, never grown (needs no new block on a full disk)
RECORD_GRACE_S = 2.0  # a holder that has just taken the lock writes its record a moment later
_UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}


class LockUnsupported(OSError):
    """The run dir's filesystem refuses file locks."""

    label = "run dir lock"


def try_lock(fd: int, path: Path) -> bool:
    """Take the kernel lock on ``fd`` (the file ``path``) without waiting: False while another process holds it;
    raises :class:`LockUnsupported` where the filesystem refuses file locks."""
    import fcntl

    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EAGAIN, errno.EACCES):
            return False
        if err.errno in _UNSUPPORTED:
            raise LockUnsupported(err.errno, f"the filesystem refuses file locks ({os.strerror(err.errno)}); "
                                             "put the run dir on one that supports them (README: Checkpoints "
                                             "and resume)", str(path)) from err
        raise named(err, path) from err
    return True


def fcntl_unlock(fd: int) -> None:
    import fcntl

    fcntl.lockf(fd, fcntl.LOCK_UN)


def holder_record(fd: int) -> dict[str, Any] | None:
    """The holder's record, read again for up to RECORD_GRACE_S while it is not yet written: two starts at the same
    moment would otherwise refuse without naming the holder (seen once in 6 under load in CI)."""
    deadline = time.monotonic() + RECORD_GRACE_S
    while True:
        found = read_record(fd)
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def read_record(fd: int) -> dict[str, Any] | None:
    """The record in the lock file (None: empty, or unreadable -- e.g. read while its holder rewrote it)."""
    try:
        raw = os.pread(fd, RECORD_BYTES, 0).rstrip(b"\0 \n")
        data = json.loads(raw) if raw else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(fd: int, record: dict[str, Any]) -> None:
    """Rewrite the record in place, padded to :data:`RECORD_BYTES` (its free-text fields are cut to fit)."""
    data = json.dumps(record, default=str).encode()
    if len(data) > RECORD_BYTES - 1:
        short = {**record, "argv": str(record.get("argv"))[:300]}
        if isinstance(record.get("deferred"), dict):
            short["deferred"] = {**record["deferred"], "error": str(record["deferred"].get("error"))[:1500]}
        data = json.dumps(short, default=str).encode()
    os.pwrite(fd, data + b" " * max(0, RECORD_BYTES - 1 - len(data)) + b"\n", 0)


def ident(st: os.stat_result) -> tuple[int, int]:
    """The file a stat describes: (device, inode)."""
    return st.st_dev, st.st_ino
