"""The run dir after the lock's edge cases (issue #28 B8, B9, B11), with real ``gdro-train`` processes: a rerun
right after ``kill -9`` (the killed run is still a zombie), a full disk's end kept in the lock when the next start
sets the old run aside, and ``gdro.lock`` removed by hand under a live run.

All slow (each case starts 2-3 training processes). The bar, as in tests/test_run_safety.py: the run that ends up
owning the dir gives exactly the non-timing metrics of a run alone; a refused start is one line and touches nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gdro.algorithm.tracking import read_metrics
from gdro.cli.app import EXIT_IN_USE
from gdro.common.ioerrors import EXIT_IO_ERROR
from gdro.run.lock import LOCK_NAME
from tests.test_resume import CLI, REPO, _comparable, _env, _wait_for_checkpoint
from tests.test_run_safety import _cmd, _lines, _namespaces_work, _run, _status
from tests.test_rundir import _zombie

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def solo(tmp_path_factory) -> list[dict]:
    """The reference: the 6-step run alone."""
    run_dir = tmp_path_factory.mktemp("solo") / "run"
    _run(run_dir)
    return read_metrics(run_dir)


# --------------------------------------------------------------------------------- B11: kill -9, rerun at once
def test_a_rerun_right_after_kill_9_takes_over_from_the_unreaped_run(tmp_path, solo):
    """``kill -9`` after step 3, then the same command at once: the killed run is a zombie until its parent (here
    the test, which waits for it only after the rerun; in a container whose PID 1 never reaps, nobody) reaps it.
    The rerun must take the dir over and resume exactly, not refuse it as held by that pid."""
    run_dir = tmp_path / "run"
    first = subprocess.Popen(_cmd(run_dir), cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        _wait_for_checkpoint(first, run_dir, 3)
        os.kill(first.pid, signal.SIGKILL)  # (not first.kill(): nothing here may reap it before the rerun)
        _zombie(first.pid)
        rerun = _run(run_dir)
        _zombie(first.pid, timeout=0)  # still unreaped when the rerun took over
    finally:
        first.wait()
    logged = rerun.stdout + rerun.stderr + "".join(p.read_text() for p in run_dir.glob("*.log"))
    assert f"taken over from pid {first.pid} on host " in logged
    assert _comparable(read_metrics(run_dir)) == _comparable(solo)
    record = _status(run_dir)
    assert record["status"] == "completed" and record["resumes"][-1]["previous"]["status"] == "unrecorded"


# ------------------------------------------------------ B8: a full disk's end, kept in the lock, then set aside
# Run inside a private mount namespace (unshare -rm) on a small tmpfs: a run without checkpoints whose disk another
# writer fills before step 2, so that neither its rows nor its run.json fit (the end waits in gdro.lock); then, the
# disk freed, the same command again, which finds no checkpoint and sets the old run aside. Writes its results.
FULL_THEN_ASIDE = r"""
import json, os, subprocess, sys
from pathlib import Path
mnt, out, cmd, fill = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], check=True)
run_dir, res = mnt / "run", {}
for name, argv in (("full", [sys.executable, "-c", fill, str(mnt / "ballast"), *cmd[3:]]), ("next", cmd)):
    done = subprocess.run([*argv, f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=300)
    res[name] = {"rc": done.returncode, "stderr": done.stderr,
                 **{n: (run_dir / n).read_text() for n in ("run.json", "run.json.prev-1", "metrics.jsonl",
                                                           "gdro.lock") if (run_dir / n).is_file()}}
    if (mnt / "ballast").exists():
        os.remove(mnt / "ballast")
out.write_text(json.dumps(res))
"""
FILL_BEFORE_STEP = """
import sys
import gdro.algorithm.trainer as tr
from tests.fill_disk import fill
ballast = sys.argv.pop(1)
step_ = tr.Trainer._step
def fill_then_step(self, step, st):
    if step == 2:
        fill(ballast)
    return step_(self, step, st)
tr.Trainer._step = fill_then_step
from gdro.cli.train import train
sys.argv = ["gdro-train", *sys.argv[1:]]
train()
"""


def test_a_full_disks_end_kept_in_the_lock_is_recorded_when_the_run_is_set_aside(tmp_path, solo):
    """#28 B8: the run's end waited in gdro.lock (run.json could not take it); the next start finds no checkpoint
    and keeps the old run as ``*.prev-1``: ``run.json.prev-1`` says it failed, and why -- not ``running``."""
    reason = _namespaces_work()
    if reason:
        pytest.skip(reason)
    (tmp_path / "mnt").mkdir()
    cmd = [sys.executable, "-m", "gdro.cli.train", *CLI, "checkpoint.every=0", "checkpoint.at_end=false"]
    subprocess.run(["unshare", "-rm", sys.executable, "-c", FULL_THEN_ASIDE, str(tmp_path / "mnt"),
                    str(tmp_path / "res.json"), json.dumps(cmd), FILL_BEFORE_STEP], cwd=REPO, env=_env(), check=True,
                   timeout=900)
    full, nxt = json.loads((tmp_path / "res.json").read_text()).values()
    assert full["rc"] == EXIT_IO_ERROR and len(_lines(full["stderr"])) == 1, full["stderr"]
    assert "No space left on device (ENOSPC)" in full["stderr"] and "metrics.jsonl" in full["stderr"]
    assert json.loads(full["run.json"])["status"] == "running"  # the disk took nothing more
    assert json.loads(full["gdro.lock"])["deferred"]["status"] == "failed"  # the end waits in the lock
    assert nxt["rc"] == 0, nxt["stderr"]
    prev = json.loads(nxt["run.json.prev-1"])
    assert prev["status"] == "failed" and "No space left on device" in prev["error"]
    assert prev["recorded"].startswith("at the next start")
    assert json.loads(nxt["run.json"])["status"] == "completed" and json.loads(nxt["gdro.lock"])["deferred"] is None
    rows = [json.loads(line) for line in nxt["metrics.jsonl"].splitlines()]
    assert _comparable(rows) == _comparable(solo)  # the new run, afresh


# ------------------------------------------------------------------- B9: gdro.lock removed by hand under a live run
# Injected into the child: wait before step N until the test opens a gate (the run stays live, its computation
# untouched; the step and its row come after the gate).
PAUSE_BEFORE_STEP = """
import sys, time
from pathlib import Path
import gdro.algorithm.trainer as tr
at, gate = int(sys.argv.pop(1)), Path(sys.argv.pop(1))
step_ = tr.Trainer._step
def paused(self, step, st):
    if step == at:
        gate.with_suffix(".waiting").touch()
        while not gate.exists():
            time.sleep(0.01)
    return step_(self, step, st)
tr.Trainer._step = paused
from gdro.cli.train import train
sys.argv = ["gdro-train", *sys.argv[1:]]
train()
"""


def _paused_before_step_4(run_dir: Path, gate: Path) -> subprocess.Popen:
    """The 6-step run, live and waiting at the gate before step 4 (rows 1-3 and checkpoints 2-3 written)."""
    proc = subprocess.Popen([sys.executable, "-c", PAUSE_BEFORE_STEP, "4", str(gate), *CLI, f"hydra.run.dir={run_dir}"],
                            cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not gate.with_suffix(".waiting").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.01)
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2, 3]
    return proc


def _files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != LOCK_NAME}


def _lock_pid(run_dir: Path) -> int | None:
    try:
        return json.loads((run_dir / LOCK_NAME).read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def test_a_lock_removed_under_a_live_run_still_keeps_a_second_start_out(tmp_path, solo):
    """``rm gdro.lock`` under a live run (the README's advice after an NFSv3 node crash, applied to the wrong dir),
    then the same command at once: the live run re-creates its lock within a second, the start waits for that and
    is refused in one line naming it, and the live run ends exactly as a run alone."""
    run_dir, gate = tmp_path / "run", tmp_path / "gate"
    first = _paused_before_step_4(run_dir, gate)
    try:
        (run_dir / LOCK_NAME).unlink()
        before = _files(run_dir)
        second = _run(run_dir, code=EXIT_IN_USE)
        assert len(_lines(second.stderr)) == 1 and f"held by pid {first.pid} on host " in second.stderr
        after = _files(run_dir)  # untouched by the start (the live run's job log may have grown: its warning)
        assert after.keys() == before.keys() and all(after[n].startswith(before[n]) for n in before)
        assert {n: v for n, v in after.items() if not n.endswith(".log")} == \
            {n: v for n, v in before.items() if not n.endswith(".log")}
        gate.touch()
        out, err = first.communicate(timeout=300)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 0, err[-3000:]
    assert f"{run_dir / LOCK_NAME} was removed while this run held it: re-created and locked again" in out
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and _comparable(rows) == _comparable(solo)
    assert _status(run_dir)["status"] == "completed" and "resumes" not in _status(run_dir)
    assert not list(run_dir.glob("*.prev-*"))


def test_a_run_frozen_while_its_removed_lock_was_taken_stops_before_its_next_write(tmp_path, solo):
    """The same with the live run frozen (SIGSTOP: as swapping or a hung filesystem would) past the start's wait:
    the start takes the dir and resumes from checkpoint 3. The frozen run, resumed, finds the new gdro.lock held by
    that start and stops before its next row, in one line, exit 75, writing nothing more; the dir ends as a run
    alone's."""
    run_dir, gate = tmp_path / "run", tmp_path / "gate"
    first = _paused_before_step_4(run_dir, gate)
    second = None
    try:
        first.send_signal(signal.SIGSTOP)
        (run_dir / LOCK_NAME).unlink()
        second = subprocess.Popen(_cmd(run_dir), cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while _lock_pid(run_dir) != second.pid:  # the start waited for a holder, then took the dir
            assert second.poll() is None and time.monotonic() < deadline, second.communicate()[1][-3000:]
            time.sleep(0.01)
        first.send_signal(signal.SIGCONT)
        gate.touch()  # step 4 runs; its row must not be written
        _, err = first.communicate(timeout=300)
        assert first.returncode == EXIT_IN_USE, err[-3000:]
        lines = _lines(err)
        assert len(lines) == 1 and lines[0].startswith(
            f"run dir taken over: {run_dir / LOCK_NAME} was removed while this run held it and is now held by pid "
            f"{second.pid} on host "), err[-3000:]
        assert lines[0].endswith("this run stopped before writing anything more to the run dir")
        assert _status(run_dir)["status"] != "failed"  # not even run.json: the dir is the start's now
        _, err2 = second.communicate(timeout=300)
        assert second.returncode == 0, err2[-3000:]
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and _comparable(rows) == _comparable(solo)
    record = _status(run_dir)
    assert record["status"] == "completed" and [e["from_step"] for e in record["resumes"]] == [3]
    assert _lock_pid(run_dir) == second.pid
