"""The run dir after the lock's edge cases (issue #28 B8, B9, B11), with real ``gdro-train`` processes: a rerun
right after ``kill -9`` (the killed run is still a zombie), a full disk's end kept in the lock when the next start
sets the old run aside, and ``gdro.lock`` removed by hand under a live run.

All slow (each case starts 2-3 training processes). The bar, as in tests/test_run_safety.py: the run that ends up
owning the dir gives exactly the non-timing metrics of a run alone; a refused start is one line and touches nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from gdro.tracking import read_metrics
from tests.test_resume import REPO, _comparable, _env, _wait_for_checkpoint
from tests.test_run_safety import _cmd, _run, _status
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
