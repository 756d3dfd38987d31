"""The run-dir lock (gdro.run.lock) against real processes: a holder in another process, killed or alive, waited for;
and a start of gdro-train or gdro-eval on a held or uncreatable dir refused in one line before anything is touched.

The holders are small Python processes that import only gdro.run.lock (no torch): the lock is a kernel lock between
processes, so a second holder in the test's own process would prove nothing (POSIX locks do not conflict within one
process, which is why gdro.run.lock.hold re-enters)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gdro.cli import app
from gdro.cli import evaluate as evaluator
from gdro.cli import train as cli
from gdro.common import ioerrors
from gdro.run import lock as rundir
from gdro.run.lock import LOCK_NAME, LockConfig, RunDirLock, RunDirLocked, hold
from gdro.run.lock_file import RECORD_BYTES
from tests.conftest import FAST, REPO

HOLDER = """
import sys, time
from gdro.run.lock import RunDirLock
lock = RunDirLock(sys.argv[1], heartbeat_s=0.2).acquire()
if len(sys.argv) > 3:
    lock.defer({"status": "failed", "error": sys.argv[3]})
print("held", flush=True)
time.sleep(float(sys.argv[2]))
lock.release()
"""


# A holder as a run is one: the lock's defaults (gdro.lock checked every second by the heartbeat thread), and, unless
# `busy` (a long step: no write for a while), a check before each of its writes (every 50 ms); stops as gdro-train.
RUN_LIKE = """
import sys, time
from gdro.run.lock import RunDirLock, RunDirLost
lock = RunDirLock(sys.argv[1]).acquire()
print("held", flush=True)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    time.sleep(0.05)
    if sys.argv[3] != "busy":
        try:
            lock.check()
        except RunDirLost as err:
            print(f"{err.label}: {err}", file=sys.stderr)
            sys.exit(75)
lock.release()
"""


def _holder(run_dir: Path, seconds: float, *extra: str, script: str = HOLDER) -> subprocess.Popen:
    """A process that holds ``run_dir`` for ``seconds`` (returns once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(run_dir), str(seconds), *extra], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if script is RUN_LIKE else None, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _refused(run_dir: Path) -> bool:
    """Whether another process (a fresh one) is refused the lock now."""
    code = f"from gdro.run.lock import RunDirLock\nRunDirLock({str(run_dir)!r}).acquire()"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=60, check=False)
    return "RunDirLocked" in out.stderr


def test_a_held_dir_is_refused_naming_the_holder_and_taken_after_it_ends(tmp_path):
    proc = _holder(tmp_path, 0.5)
    with pytest.raises(RunDirLocked) as err:
        RunDirLock(tmp_path).acquire()
    msg = str(err.value)
    assert f"pid {proc.pid} on host {socket.gethostname()} since " in msg and "last heartbeat" in msg
    assert "\n" not in msg
    lock = RunDirLock(tmp_path, wait_s=60).acquire()  # waits for the holder to release (bounded)
    assert proc.wait(timeout=60) == 0
    assert lock.previous["state"] == "released" and lock.previous["pid"] == proc.pid
    lock.release()


def test_a_bounded_wait_refuses_when_the_holder_outlives_it(tmp_path):
    proc = _holder(tmp_path, 60)
    try:
        with pytest.raises(RunDirLocked, match=f"held by pid {proc.pid} "):
            RunDirLock(tmp_path, wait_s=0.3, poll_s=0.1).acquire()
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_is_taken_over_with_what_it_deferred(tmp_path):
    proc = _holder(tmp_path, 60, "OSError: [Errno 28] No space left on device: 'metrics.jsonl'")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lock = RunDirLock(tmp_path).acquire()  # the kernel dropped the dead holder's lock: no waiting, no guessing
    assert lock.previous["state"] == "held" and lock.previous["pid"] == proc.pid  # it never released
    assert f"taken over from pid {proc.pid} on host " in lock.takeover()
    assert "No space left" in lock.deferred["error"]  # carried until a start records it in run.json
    lock.settle()
    assert lock.deferred is None
    lock.release()


def _zombie(pid: int, timeout: float = 30.0) -> None:
    """Wait until ``pid`` is a zombie: dead (its main thread in state Z, its other threads gone: its locks dropped
    with the last one), not yet reaped."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" or \
            os.listdir(f"/proc/{pid}/task") != [str(pid)]:
        assert time.monotonic() < deadline, f"pid {pid} did not become a zombie"
        time.sleep(0.01)


def test_a_killed_holder_not_yet_reaped_is_taken_over_at_once(tmp_path):
    """kill -9, then a rerun at once (#28 B11): the dead holder stays a zombie until its parent reaps it -- here the
    test process, which reaps it only after the rerun; in a container whose PID 1 never reaps, for ever. Its kernel
    lock is already free, and a zombie is not a live holder."""
    proc = _holder(tmp_path, 60)
    try:
        os.kill(proc.pid, signal.SIGKILL)  # (not proc.send_signal / poll: nothing here may reap it)
        _zombie(proc.pid)
        lock = RunDirLock(tmp_path).acquire()
        assert lock.previous["state"] == "held" and lock.previous["pid"] == proc.pid
        assert f"taken over from pid {proc.pid} on host " in lock.takeover()
        _zombie(proc.pid, timeout=0)  # and still unreaped
        lock.release()
    finally:
        proc.wait()


def test_a_live_heartbeat_from_another_host_holds_the_dir_and_a_stale_one_does_not(tmp_path):
    """A filesystem whose locks are node-local gives the kernel lock to a second node: the record's heartbeat
    still says the first holder is alive."""
    def record(beat_age: float) -> None:
        rec = {"state": "held", "pid": 1, "host": "another-node", "started": "then", "beat": time.time() - beat_age}
        (tmp_path / LOCK_NAME).write_text(json.dumps(rec).ljust(RECORD_BYTES - 1) + "\n")

    record(beat_age=5)
    with pytest.raises(RunDirLocked, match="pid 1 on host another-node since then, last heartbeat 5 s ago"):
        RunDirLock(tmp_path, stale_s=90).acquire()
    record(beat_age=200)
    lock = RunDirLock(tmp_path, stale_s=90).acquire()
    assert lock.previous["host"] == "another-node"
    lock.release()


def test_a_lock_removed_under_its_live_holder_is_re_created_and_a_second_start_still_refused(tmp_path):
    """#28 B9: ``rm gdro.lock`` under a live run, then a start at once. The holder (in a long step: only its
    heartbeat thread checks) re-creates and locks it again within a second; the start, finding it missing in a dir
    that holds a run, waits for that, and is refused naming the holder."""
    proc = _holder(tmp_path, 60, "busy", script=RUN_LIKE)
    (tmp_path / "run.json").write_text('{"status": "running"}')  # as a run writes it: once it holds the lock
    try:
        (tmp_path / LOCK_NAME).unlink()
        with pytest.raises(RunDirLocked, match=f"held by pid {proc.pid} on host "):
            RunDirLock(tmp_path).acquire()
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == proc.pid
        assert _refused(tmp_path)
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert f"{tmp_path / LOCK_NAME} was removed while this run held it: re-created and locked again" in err


def test_a_holder_whose_removed_lock_another_took_stops_before_its_next_write(tmp_path):
    """#28 B9, when the holder cannot re-create it in time (frozen: SIGSTOP, swapping, a hung filesystem): the start
    takes the dir after its wait; the holder, resumed, finds the new gdro.lock held by another process and stops
    before its next write in one line, writing nothing, not even into the new gdro.lock."""
    proc = _holder(tmp_path, 60, "checks", script=RUN_LIKE)
    (tmp_path / "run.json").write_text('{"status": "running"}')  # as a run writes it: once it holds the lock
    try:
        proc.send_signal(signal.SIGSTOP)
        (tmp_path / LOCK_NAME).unlink()
        lock = RunDirLock(tmp_path, claim_grace_s=0.5).acquire()
        taken = (tmp_path / LOCK_NAME).read_text()
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 75
    said = _lines(err)[-1]
    assert said.startswith(f"run dir taken over: {tmp_path / LOCK_NAME} was removed while this run held it and is "
                           f"now held by pid {os.getpid()} on host {socket.gethostname()} since "), err
    assert said.endswith("; this run stopped before writing anything more to the run dir"), err
    assert (tmp_path / LOCK_NAME).read_text() == taken and lock.record["pid"] == os.getpid()
    lock.check()  # the start's lock: its own file
    lock.release()


def test_hold_re_enters_in_one_process_without_dropping_the_lock(tmp_path):
    with hold(tmp_path) as outer:
        with hold(tmp_path / ".") as inner:
            assert inner is outer and rundir.held(tmp_path) is outer
        assert _refused(tmp_path), "leaving the inner hold must not drop the process's lock"
    assert rundir.held(tmp_path) is None and not _refused(tmp_path)


def test_a_requeued_slurm_job_waits_longer():
    cfg = LockConfig(wait_s=0, requeue_wait_s=300)
    assert cfg.wait({}) == 0 and cfg.wait({"SLURM_RESTART_COUNT": "0"}) == 0
    assert cfg.wait({"SLURM_RESTART_COUNT": "1"}) == 300
    assert LockConfig(wait_s=600, requeue_wait_s=300).wait({"SLURM_RESTART_COUNT": "2"}) == 600


def test_an_uncreatable_run_dir_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError) as err:
        ioerrors.check_creatable(tmp_path / "file" / "run")
    assert err.value.filename == str(tmp_path / "file")
    assert ioerrors.one_line(err.value) == f"Not a directory (ENOTDIR): {tmp_path / 'file'}"


# ------------------------------------------------------------------------------- the entry points on held dirs
QUIET = ["logger=jsonl", "progress=false"]


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_gdro_train_on_a_held_dir_refuses_in_one_line_and_touches_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    run_dir = tmp_path / "run"
    proc = _holder(run_dir, 60)
    (run_dir / "run.json").write_text('{"status": "running"}')
    before = sorted(p.name for p in run_dir.iterdir())
    try:
        monkeypatch.setattr(sys, "argv", ["gdro-train", *QUIET, f"hydra.run.dir={run_dir}"])
        with pytest.raises(SystemExit) as exit_:
            cli.train()
    finally:
        proc.kill()
        proc.wait()
    assert exit_.value.code == app.EXIT_IN_USE
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith(f"run dir in use: {run_dir} is held by pid {proc.pid} on host ")
    assert sorted(p.name for p in run_dir.iterdir()) == before  # not even Hydra's .hydra/ or its log
    assert (run_dir / "run.json").read_text() == '{"status": "running"}'


def test_gdro_train_and_eval_name_an_uncreatable_run_dir_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    (tmp_path / "file").write_text("x")
    for main, argv in ((cli.train, ["gdro-train", *QUIET]), (evaluator.main, ["gdro-eval"])):
        for run_dir in (tmp_path / "file", tmp_path / "file" / "run"):
            monkeypatch.setattr(sys, "argv", [*argv, f"hydra.run.dir={run_dir}"])
            with pytest.raises(SystemExit) as exit_:
                main()
            assert exit_.value.code == ioerrors.EXIT_IO_ERROR
            assert _lines(capsys.readouterr().err) == [f"error: Not a directory (ENOTDIR): {tmp_path / 'file'}"]


@pytest.mark.parametrize("deferred", [True, False], ids=["disk-full", "killed"])
def test_a_run_set_aside_says_how_it_ended(tmp_path, monkeypatch, deferred):
    """#28 B8: an earlier attempt without a checkpoint whose run.json still says ``running`` -- its disk was full, so
    its end waits in gdro.lock (``disk-full``), or it was killed without a word (``killed``). The next start sets its
    files aside as ``*.prev-1``; run.json.prev-1 says how that run ended, as a resume's ``previous`` entry would."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    run_dir = tmp_path / "run"
    error = "OSError: No space left on device (ENOSPC): metrics.jsonl"
    proc = _holder(run_dir, 60, *([error] if deferred else []))
    (run_dir / "run.json").write_text(json.dumps({"status": "running", "last_step": 1, "wandb_id": "w"}))
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    monkeypatch.setattr(sys, "argv", ["gdro-train", *FAST, f"hydra.run.dir={run_dir}"])
    cli.train()
    prev = json.loads((run_dir / "run.json.prev-1").read_text())
    if deferred:
        assert prev["status"] == "failed" and prev["error"] == error
        assert prev["recorded"].startswith("at the next start")
    else:
        assert prev["status"] == "unrecorded" and "ended without recording it" in prev["error"]
    assert prev["last_step"] == 1 and prev["wandb_id"] == "w"
    assert (run_dir / "metrics.jsonl.prev-1").read_text() == '{"step": 1}\n'
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed" and "resumes" not in record and record["wandb_id"] != "w"
    assert json.loads((run_dir / LOCK_NAME).read_text()).get("deferred") is None  # recorded once, not again


@pytest.mark.slow
@pytest.mark.parametrize("deferred", [True, False], ids=["end-kept-in-the-lock", "end-in-run-json"])
def test_a_failed_run_records_its_last_logged_step_and_so_does_its_prev_1(tmp_path, monkeypatch, deferred):
    """#39 item 5: a run without checkpoints fails after step 3 of 4 (its 4th step raises). Its end is recorded with
    ``last_step`` 3, the last step in metrics.jsonl -- in run.json, or, when run.json cannot take it (``deferred``:
    a full disk), in gdro.lock -- and the next start, which sets the run aside, keeps ``last_step`` 3 in
    run.json.prev-1. It used to say 0: run.json's last_step was current only at a checkpoint."""
    import errno

    from gdro.algorithm import tracking, trainer

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    run_dir = tmp_path / "run"
    argv = ["gdro-train", *FAST, "steps=4", "checkpoint.every=0", "checkpoint.at_end=false", f"hydra.run.dir={run_dir}"]
    step, update = trainer.Trainer._step, tracking.RunRecord.update

    def failing_step(self, n, st):
        if n == 4:
            raise RuntimeError("injected failure at step 4")
        return step(self, n, st)

    def full_disk_at_the_end(self, **fields):
        if deferred and fields.get("status") == "failed":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return update(self, **fields)

    with monkeypatch.context() as patch:
        patch.setattr(trainer.Trainer, "_step", failing_step)
        patch.setattr(tracking.RunRecord, "update", full_disk_at_the_end)
        patch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit):  # Hydra reports the error, status 1
            cli.train()
    logged = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3]
    end = json.loads((run_dir / LOCK_NAME).read_text())["deferred"] if deferred else \
        json.loads((run_dir / "run.json").read_text())
    assert end["status"] == "failed" and end["last_step"] == 3 and "injected failure" in end["error"]
    monkeypatch.setattr(sys, "argv", [*argv[:-4], "steps=1", f"hydra.run.dir={run_dir}"])
    cli.train()  # no checkpoint: the failed run is set aside, a fresh one runs
    prev = json.loads((run_dir / "run.json.prev-1").read_text())
    assert prev["status"] == "failed" and prev["last_step"] == 3 and "injected failure" in prev["error"]
    assert json.loads((run_dir / "metrics.jsonl.prev-1").read_text().splitlines()[-1])["step"] == 3
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


def test_a_killed_run_set_aside_records_the_last_step_in_its_metrics(tmp_path, monkeypatch):
    """#39 item 5, the killed case: a run without checkpoints killed after step 3 (run.json still says ``running``,
    ``last_step`` 0, its last row cut by the kill). Its run.json.prev-1 says ``unrecorded`` with ``last_step`` 3, the
    last whole row of its metrics.jsonl, not the 0 run.json had."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    run_dir = tmp_path / "run"
    proc = _holder(run_dir, 60)
    (run_dir / "run.json").write_text(json.dumps({"status": "running", "last_step": 0, "wandb_id": "w"}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 0.1}) + "\n" for s in (1, 2, 3))
                                           + '{"step": 4, "lo')
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    monkeypatch.setattr(sys, "argv", ["gdro-train", *FAST, "steps=1", f"hydra.run.dir={run_dir}"])
    cli.train()
    prev = json.loads((run_dir / "run.json.prev-1").read_text())
    assert prev["status"] == "unrecorded" and prev["last_step"] == 3
