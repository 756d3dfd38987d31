"""One owner per run dir: ``<run_dir>/gdro.lock``.

Two processes writing one run dir corrupt it (steps duplicated, rows lost or cut, a checkpoint deleted under its
writer), and it happens all the time: a sweep resubmitted while its jobs still run, a Slurm requeue racing the old
job, a second terminal. So ``gdro-train`` takes this lock before it touches the dir and holds it for the run's life;
a second process refuses in one line naming the holder.

How it works, and why:

* **The lock is a POSIX record lock** (``fcntl.lockf``) on ``gdro.lock``, held on an open descriptor. The kernel (on
  NFS, the lock server) drops it when the holder dies, however it dies (SIGKILL, OOM, a crash), so a dead holder
  never blocks a rerun and there is no stale lock to break by guesswork (nor does a holder that died but is not yet
  reaped: a zombie is not alive). The lock is not inherited by forked children, and an ``O_EXCL`` lockfile would
  outlive its writer after a SIGKILL.
* **The file holds the holder's record** (pid, host, boot id, start time, a heartbeat, the command), JSON padded to
  :data:`~gdro.run.lock_file.RECORD_BYTES`. It is rewritten in place, so updating it needs no new disk block: the
  heartbeat, and the run.json fields a full disk refused, are written even then (the next start records them:
  :meth:`RunDirLock.defer`).
* **Heartbeat, for filesystems whose locks are node-local** (below): a holder rewrites ``beat`` every
  ``heartbeat_s``. A process that gets the kernel lock but finds a record that was never released, from another
  host, with a beat younger than ``stale_s``, treats the dir as held: either that holder is alive on a filesystem
  that did not tell us, or it died less than ``stale_s`` ago (it is then taken over once the beat is older). Hosts'
  clocks must agree to well within ``stale_s`` (NTP).
* **A bounded wait** (``lock.wait_s``; ``lock.requeue_wait_s`` for a requeued Slurm job, ``SLURM_RESTART_COUNT`` > 0):
  a job requeued while its predecessor is still dying (finishing its SIGTERM checkpoint) waits for the lock, then
  refuses.

Where it holds: any local filesystem; NFSv4, and NFSv3 with lockd (the default; not a mount with ``nolock`` or
``local_lock=posix|all``); Lustre mounted with ``flock``; GPFS / Spectrum Scale; CephFS. Where the kernel lock is
node-local -- Lustre mounted ``localflock``, BeeGFS without ``tuneUseGlobalFileLocks``, NFS with ``nolock`` -- the
record and its heartbeat still refuse a second process on another node while the first is alive (only two processes
started on two such nodes in the same instant can both win). Where locks fail outright (Lustre ``noflock``:
ENOSYS/EINVAL, NFS without lockd: ENOLCK) the start is refused in one line that says so. On NFSv3, a node that
crashes holds its locks until it reboots: the refusal names the host, and removing ``gdro.lock`` by hand, once you
have checked, frees the dir.

**``gdro.lock`` removed under a live holder** (by hand, by a cleanup script; #28 B9). The kernel lock is on the
file, not the name: a second start would create a new ``gdro.lock``, lock it, and cut the live run's rows. So the
live run's own checks notice that its lock is gone, and a start gives them time to:

* the holder checks that ``gdro.lock`` still names the file it locked (``os.stat`` of the path against ``os.fstat``
  of its descriptor: device and inode) every ``check_s`` (1 s) in its heartbeat thread, and before every write of
  the run (:meth:`RunDirLock.check`: each metrics row, checkpoint, run.json update and the final save; two stats).
  Removed, or replaced by an empty file nobody holds: it re-creates and locks it again with its record, with a
  warning, and the run goes on;
* a start that finds ``gdro.lock`` missing in a dir that holds a run (run.json, metrics.jsonl, config.yaml or a
  checkpoint) waits ``claim_grace_s`` (5 s) for a live holder to re-create it before it creates one itself; then
  it is refused as usual, naming the holder;
* if another process holds the new file anyway (the holder was frozen past that wait -- SIGSTOP, swapping, a hung
  filesystem), the holder has lost the dir: :meth:`RunDirLock.check` raises :class:`RunDirLost` and the run stops
  before its next write, in one line (exit 75), writing nothing more, not even run.json. The new holder resumes
  from the last checkpoint. (Only a write already past its check when the dir is lost can land; the new holder
  takes seconds to start before it truncates ``metrics.jsonl``.)

On NFS a client may see the removal only when its attribute cache expires (``acdirmax``, 60 s by default): there the
holder may notice late, so remove ``gdro.lock`` only once its holder is known to be dead.

A process holds each dir once: POSIX locks belong to the process and are dropped when *any* descriptor of the file
is closed, so the file must never be opened twice in one process; :func:`hold` keeps a registry of the locks this
process holds and re-enters them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gdro.common.ioerrors import check_creatable, named_io
from gdro.run.lock_file import fcntl_unlock, holder_record, ident, read_record, try_lock, write_record
from gdro.run.lock_holder import describe, live_elsewhere, new_record

log = logging.getLogger(__name__)

LOCK_NAME = "gdro.lock"
HEARTBEAT_S = 15.0  # the holder rewrites its beat this often
STALE_S = 90.0  # an unreleased record from another host whose beat is older than this belongs to a dead holder
POLL_S = 0.5  # how often a waiting start retries
CHECK_S = 1.0  # the holder checks this often that gdro.lock still names its locked file (re-created if removed)
CLAIM_GRACE_S = 5.0  # a start finding gdro.lock missing in a dir that holds a run waits this long for its holder
RUN_FILES = ("run.json", "metrics.jsonl", "config.yaml", "checkpoints", "checkpoint")  # a dir that holds a run


@dataclass(frozen=True)
class LockConfig:
    """The run-dir lock (the ``lock:`` node of conf/train.yaml)."""

    wait_s: float = 0.0  # a start that finds the run dir held waits up to this long for the holder to end, then refuses
    requeue_wait_s: float = 300.0  # the same for a requeued Slurm job (SLURM_RESTART_COUNT > 0): its predecessor may
    #                                still be saving its last checkpoint

    def __post_init__(self) -> None:
        if not self.wait_s >= 0:
            raise ValueError(f"wait_s must be >= 0 seconds, got {self.wait_s}")
        if not self.requeue_wait_s >= 0:
            raise ValueError(f"requeue_wait_s must be >= 0 seconds, got {self.requeue_wait_s}")

    def wait(self, environ: dict[str, str] | os._Environ = os.environ) -> float:
        """Seconds to wait for a held run dir: ``requeue_wait_s`` in a requeued Slurm job, else ``wait_s``."""
        try:
            requeued = int(environ.get("SLURM_RESTART_COUNT", "0")) > 0
        except ValueError:
            requeued = False
        return max(self.wait_s, self.requeue_wait_s) if requeued else self.wait_s


class RunDirLocked(RuntimeError):
    """Another process holds the run dir (the message names it: pid, host, start time, last heartbeat)."""

    label = "run dir in use"

    def __init__(self, run_dir: Path, holder: dict[str, Any] | None, waited_s: float):
        self.run_dir, self.holder = run_dir, holder
        waited = f" (waited {waited_s:.0f} s)" if waited_s >= 1 else ""
        super().__init__(f"{run_dir} is held by {describe(holder)}{waited}; nothing in it was touched. Wait for "
                         "that run to end or stop it, or pass lock.wait_s=SECONDS to wait for it")


class RunDirLost(RunDirLocked):
    """This process held the run dir, but ``gdro.lock`` was removed and another process holds the new one: the run
    must stop writing at once (the message names the new holder)."""

    label = "run dir taken over"

    def __init__(self, path: Path, holder: str):
        self.run_dir, self.holder = path.parent, None
        RuntimeError.__init__(self, f"{path} was removed while this run held it and is now held by {holder}; this "
                                    "run stopped before writing anything more to the run dir")


class RunDirLock:
    """The lock on one run dir, held by this process from :meth:`acquire` to :meth:`release`.

    ``previous`` is the record the last holder left (read before this one replaced it); ``deferred`` holds the
    run.json fields an attempt could not write (its disk was full), kept here until a start records them.
    """

    def __init__(self, run_dir: str | Path, *, wait_s: float = 0.0, heartbeat_s: float = HEARTBEAT_S,
                 stale_s: float = STALE_S, poll_s: float = POLL_S, check_s: float = CHECK_S,
                 claim_grace_s: float = CLAIM_GRACE_S):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.wait_s, self.heartbeat_s, self.stale_s, self.poll_s = wait_s, heartbeat_s, stale_s, poll_s
        self.check_s, self.claim_grace_s = check_s, claim_grace_s
        self.previous: dict[str, Any] | None = None
        self.record: dict[str, Any] = {}
        self.found, self.keep_found = b"", False  # the file as acquire found it; keep_found: put it back on release
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None  # (device, inode) of the file locked through _fd
        self._lost: str | None = None  # who holds the dir since gdro.lock was removed and taken (RunDirLost)
        self._unclaimable = False  # a removed gdro.lock could not be re-created (said once)
        self._verifiable = True  # whether stat and fstat agree on this filesystem (else the name is not watched)
        self._spare: list[int] = []  # a second descriptor of the locked file: never closed before release
        self._stop = threading.Event()
        self._beats: threading.Thread | None = None
        self._io = threading.Lock()  # the heartbeat thread and the main thread rewrite the same record

    @property
    def held(self) -> bool:
        return self._fd is not None

    def takeover(self) -> str | None:
        """What this lock took over from a holder that died without releasing it (None: a clean hand-over)."""
        if self.previous is None or self.previous.get("state") != "held":
            return None
        return f"{self.path}: taken over from {describe(self.previous)}, which ended without releasing it"

    def acquire(self) -> RunDirLock:
        """Take the lock, waiting up to ``wait_s`` for a holder to end; raises :class:`RunDirLocked` after that.

        Creates the run dir (and nothing else in it but ``gdro.lock``) if it does not exist.
        """
        check_creatable(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._grace_for_a_removed_lock()
        with named_io(self.path):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self.previous = self._wait_for_lock(fd)
            self._fd, self._ident = fd, ident(os.fstat(fd))
            self._verifiable = ident(os.stat(self.path)) == self._ident
            if not self._verifiable:
                log.info("%s: stat and fstat disagree on this filesystem; a removal of it will go unnoticed", self.path)
            self.record, self.found = new_record(), os.pread(fd, 1 << 16, 0)
            if self.previous is not None and self.previous.get("deferred"):
                self.record["deferred"] = self.previous["deferred"]  # until a start records it in run.json
            self._update()
        except BaseException:
            self._fd = None
            os.close(fd)  # drops the kernel lock if we had it
            raise
        self._beats = threading.Thread(target=self._beat, name="gdro-lock-heartbeat", daemon=True)
        self._beats.start()
        return self

    def _grace_for_a_removed_lock(self) -> None:
        """``gdro.lock`` missing in a dir that holds a run: it may have been removed under a live holder, which
        re-creates it within ``check_s``; wait up to ``claim_grace_s`` for that before creating one."""
        if self.path.exists() or not any((self.run_dir / name).exists() for name in RUN_FILES):
            return
        log.info("%s is missing in a run dir that holds a run: waiting up to %.0f s for a live holder to re-create "
                 "it", self.path, self.claim_grace_s)
        deadline = time.monotonic() + self.claim_grace_s
        while not self.path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _wait_for_lock(self, fd: int) -> dict[str, Any] | None:
        """Poll for the kernel lock (and a heartbeat-free record) until ``wait_s`` runs out; the record found."""
        t0 = time.monotonic()
        while True:
            holder = None
            if try_lock(fd, self.path):
                found = read_record(fd)
                if not live_elsewhere(found, self.stale_s):
                    return found
                holder = found
                fcntl_unlock(fd)
            waited = time.monotonic() - t0
            if waited >= self.wait_s:
                raise RunDirLocked(self.run_dir, holder or holder_record(fd), waited)
            time.sleep(min(self.poll_s, self.wait_s - waited))

    def _update(self, **fields: Any) -> None:
        """Set ``fields`` in the record and rewrite it (the heartbeat thread does the same: one at a time)."""
        with self._io:
            self.record.update(fields)
            if self._fd is not None:
                with named_io(self.path):
                    write_record(self._fd, self.record)

    def _beat(self) -> None:
        """The heartbeat thread: every ``check_s``, that gdro.lock is still ours; every ``heartbeat_s``, the beat."""
        next_beat = time.monotonic() + self.heartbeat_s
        while not self._stop.wait(min(self.check_s, self.heartbeat_s)):
            with self._io:
                self._verify()
            if self._lost is not None:
                return  # the main thread stops at its next check
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + self.heartbeat_s
            try:
                self._update(beat=time.time())
            except OSError as err:  # a vanished or unreachable dir: the kernel lock still holds; say it once
                log.warning("%s: heartbeat not written (%s)", self.path, err)
                return

    @property
    def lost(self) -> bool:
        """Whether another process took the run dir over after ``gdro.lock`` was removed (nothing more may be
        written to the run dir; :meth:`check` raises :class:`RunDirLost`)."""
        return self._lost is not None

    def check(self) -> None:
        """Called before every write of the run: that ``gdro.lock`` still names the file this process locked (two
        stats). Removed, or replaced by an empty file nobody holds: re-created and locked again, with a warning.
        Held by another process: raises :class:`RunDirLost` (now and at every later call)."""
        with self._io:
            self._verify()
        if self._lost is not None:
            raise RunDirLost(self.path, self._lost)

    def _ours(self, found: dict[str, Any]) -> bool:
        """Whether a record is this lock's own (e.g. ``gdro.lock`` moved away and back)."""
        return all(found.get(k) == self.record.get(k) for k in ("pid", "host", "boot_id", "started"))

    def _verify(self) -> None:
        """(with ``_io`` held) Compare the path with the locked file; re-claim it or note the dir lost."""
        if self._fd is None or self._lost is not None or not self._verifiable:
            return
        try:
            if ident(os.stat(self.path)) == self._ident:
                return
        except FileNotFoundError:
            pass
        except OSError:
            return  # unreachable for now (the heartbeat says so): the kernel lock still holds
        try:
            with named_io(self.path):
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:  # e.g. the run dir itself removed, or a full disk: nothing to lock; say it once
            if not self._unclaimable:
                log.warning("%s was removed and cannot be re-created (%s): the run goes on, but a second start "
                            "would not see it", self.path, err)
            self._unclaimable = True
            return
        if ident(os.fstat(fd)) == self._ident:  # moved away and back in between: our own file, opened twice
            self._spare.append(fd)  # closing it would drop our lock (a POSIX lock goes with any descriptor's close)
            return
        try:
            got = try_lock(fd, self.path)
            found = read_record(fd) if got else holder_record(fd)
        except OSError as err:
            os.close(fd)
            log.warning("%s was removed and cannot be locked again (%s)", self.path, err)
            return
        if not got or (found is not None and not self._ours(found)):  # held by another, or it held it in between
            os.close(fd)  # (drops our lock on the new file, if we got it)
            self._lost = describe(found)
            log.error("%s was removed while this run held it and is now held by %s: stopping before the next write",
                      self.path, self._lost)
            return
        try:
            write_record(fd, self.record)
        except OSError as err:
            os.close(fd)
            log.warning("%s was removed and its record cannot be written again (%s)", self.path, err)
            return
        old, self._fd, self._ident = self._fd, fd, ident(os.fstat(fd))
        os.close(old)  # the removed file: its lock goes with it
        log.warning("%s was removed while this run held it: re-created and locked again (remove it only once its "
                    "holder is dead)", self.path)

    @property
    def deferred(self) -> dict[str, Any] | None:
        """run.json fields an earlier attempt could not write (a full disk), carried until a start records them."""
        return self.record.get("deferred")

    def defer(self, fields: dict[str, Any]) -> None:
        """Keep run.json ``fields`` that the disk refused (rewritten in place: needs no new block) for the next
        start, which records them (gdro.compose.build)."""
        try:
            self._update(deferred={**fields, "at": datetime.now().astimezone().isoformat(timespec="seconds")})
        except OSError as err:
            log.warning("%s: could not keep the run's end for the next start either (%s)", self.path, err)

    def settle(self) -> None:
        """The deferred fields are in run.json now."""
        if self.deferred is not None:
            self._update(deferred=None)

    def release(self) -> None:
        """Mark the record released and drop the lock (the file stays: it holds how the last run ended)."""
        if self._fd is None:
            return
        self._stop.set()
        if self._beats is not None:
            self._beats.join(timeout=5)
        try:
            if self.keep_found and self.found and self._lost is None:  # a refused start (gdro.cli.train): as found
                os.pwrite(self._fd, self.found, 0)
                os.ftruncate(self._fd, len(self.found))
            else:
                self._update(state="released")
        except OSError as err:
            log.warning("%s: release not recorded (%s)", self.path, err)
        with self._io:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing drops the kernel lock
            for spare in self._spare:
                os.close(spare)
            self._spare = []


# A process may hold a dir only once (see the module docstring): the locks it holds, by resolved path, with a count.
_HELD: dict[Path, tuple[RunDirLock, int]] = {}


def held(run_dir: str | Path) -> RunDirLock | None:
    """The lock this process holds on ``run_dir``, if any."""
    entry = _HELD.get(Path(run_dir).resolve())
    return entry[0] if entry else None


def check_held(run_dir: str | Path) -> None:
    """Before a write to ``run_dir``: :meth:`RunDirLock.check` of the lock this process holds on it (none: a process
    of a multi-process run other than the first, or a test building a trainer by hand)."""
    lock = held(run_dir)
    if lock is not None:
        lock.check()


@contextlib.contextmanager
def hold(run_dir: str | Path, cfg: LockConfig | None = None) -> Iterator[RunDirLock]:
    """Hold ``run_dir``'s lock for the body (re-entered if this process holds it already)."""
    key = Path(run_dir).resolve()
    if key in _HELD:
        lock, n = _HELD[key]
        _HELD[key] = (lock, n + 1)
    else:
        lock = RunDirLock(key, wait_s=(cfg or LockConfig()).wait()).acquire()
        _HELD[key] = (lock, 1)
    try:
        yield lock
    finally:
        lock, n = _HELD[key]
        if n > 1:
            _HELD[key] = (lock, n - 1)
        else:
            del _HELD[key]
            lock.release()
