"""Issue #28 B1, B4, B5, with real ``gdro-train`` processes.

- B1: a Ctrl-C at any moment of start-up (the config check, torch's import, Hydra's start, the model's load) is one
  line and status 130. Before, the error handler imported torch again over an import the Ctrl-C had cut: 13
  segfaults, 3 C++ aborts and 21 tracebacks in 38 trials. Reproduce: ``gdro-train experiment=smoke`` and Ctrl-C it
  within 3 s.
- B4: a sweep with one job's run dir held runs every other job, reports the refused one in one line and exits 75.
  Before, the basic launcher stopped after job 0 (``gdro-train -m seed=0,1,2`` with seed 1's dir held), and
  ``hydra/launcher=submitit_local`` ended in a 29-line traceback.
- B5: a refused start writes nothing into the held dir. Before, Hydra wrote ``.hydra/*.yaml`` over the holder's
  before the job was refused: a ``${now:...}`` run dir resolving to the held one, and every held sweep job.

All slow: each case starts training processes.
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
from tests.test_resume import REPO, _env
from tests.test_run_safety import PAUSE_BEFORE_CHECKPOINT
from tests.test_rundir import _holder

pytestmark = pytest.mark.slow

GDRO_TRAIN = Path(sys.executable).with_name("gdro-train")  # the console script, as a user runs it
QUICK = ["experiment=smoke", "progress=false", "logger=jsonl"]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``run_dir`` but the lock (its holder's heartbeat rewrites it): content and mtime."""
    return {str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != "gdro.lock"}


# ------------------------------------------------------------------------------------- B1: Ctrl-C at start-up
@pytest.mark.parametrize("entry", ["console", "module"])
def test_a_ctrl_c_at_ten_moments_of_the_first_3_s_is_one_line_and_status_130(tmp_path, entry):
    """SIGINT to the process group (as a terminal's Ctrl-C) at 0.3, 0.6, ..., 3.0 s after the start: each time one
    line on stderr and status 130, whether it lands in the imports, the config check, torch's import, Hydra's start,
    the model's load (the run's own handler: finish the step, save, exit 130) or training. (The interpreter's own
    start-up, and for ``-m`` the compilation of gdro/cli/train.py, come before any line of gdro: ~0.05 s, not covered.)"""
    assert GDRO_TRAIN.is_file(), f"{GDRO_TRAIN}: the console script is not installed (pip install -e .)"
    argv = [str(GDRO_TRAIN)] if entry == "console" else [sys.executable, "-m", "gdro.cli.train"]
    seen = []
    for i in range(10):
        at = 0.3 * (i + 1)
        run_dir = tmp_path / f"run{i}"
        proc = subprocess.Popen([*argv, *QUICK, "steps=50", "checkpoint.every=1", f"hydra.run.dir={run_dir}"],
                                cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        time.sleep(at)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        lines = _lines(err)
        assert proc.returncode == 128 + signal.SIGINT and len(lines) == 1, (at, proc.returncode, err[-3000:])
        assert lines[0].startswith("gdro-train: "), (at, lines)
        seen.append(lines[0].split(";")[0])
    print("\n".join(f"{0.3 * (i + 1):.1f} s: {line}" for i, line in enumerate(seen)))


# --------------------------------------------------------------------------- B4: a sweep with a held run dir
@pytest.mark.parametrize("launcher", ["basic", "submitit_local"])
def test_a_sweep_runs_every_job_it_can_and_reports_the_held_one_in_one_line(tmp_path, launcher):
    sweep = tmp_path / "sweep"
    holder = _holder(sweep / "1", 600)
    before = _snapshot(sweep / "1")
    extra = [] if launcher == "basic" else [f"hydra/launcher={launcher}"]
    try:
        out = subprocess.run([str(GDRO_TRAIN), "-m", *extra, *QUICK, "steps=2", "seed=0,1,2",
                              f"hydra.sweep.dir={sweep}"], cwd=REPO, env=_env(), capture_output=True, text=True,
                             timeout=600, check=False)
    finally:
        holder.kill()
        holder.wait()
    assert out.returncode == EXIT_IN_USE, out.stderr[-3000:]
    lines = _lines(out.stderr)
    assert len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("gdro-train: sweep job #1 (") and "seed=1" in lines[0], lines[0]
    assert f"did not run: run dir in use: {sweep / '1'} is held by pid {holder.pid} on host " in lines[0]
    for job in ("0", "2"):
        assert [r["step"] for r in read_metrics(sweep / job) if "step" in r][-1] == 2
        assert json.loads((sweep / job / "run.json").read_text())["status"] == "completed"
        assert (sweep / job / ".hydra" / "overrides.yaml").is_file()
    assert _snapshot(sweep / "1") == before == {}
    assert sorted(p.name for p in (sweep / "1").iterdir()) == ["gdro.lock"]
    assert not list(sweep.glob(".gdro-sweep-*")), "the sweep's report file is removed at its end"


# ----------------------------------------------------------------- B5: a refused start writes nothing at all
def _paused_run(run_dir: Path, gate: Path) -> subprocess.Popen:
    """A real run of the held dir, live and paused before its 2nd checkpoint (its files are then still)."""
    proc = subprocess.Popen([sys.executable, "-c", PAUSE_BEFORE_CHECKPOINT, "2", str(gate), *QUICK, "steps=4",
                             "checkpoint.every=1", f"hydra.run.dir={run_dir}"], cwd=REPO, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not gate.with_suffix(".waiting").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.01)
    return proc


@pytest.mark.parametrize("how", ["dated-run-dir", "sweep-job"])
def test_a_refused_start_leaves_every_file_of_the_held_dir_as_it_was(tmp_path, how):
    """The held dir: a live run (its .hydra/ files, log, metrics, run.json and a checkpoint). The second start
    names it through a ``${now:...}`` pattern (the same second) or as job 0 of a sweep; it is refused, and no file
    in the dir changes, not even in its mtime."""
    gate = tmp_path / "gate"
    if how == "dated-run-dir":
        run_dir = tmp_path / f"run_{time.strftime('%Y')}"
        second = [str(GDRO_TRAIN), *QUICK, "steps=4", "checkpoint.every=1",
                  f"hydra.run.dir={tmp_path}/run_${{now:%Y}}"]
    else:
        run_dir = tmp_path / "sweep" / "0"
        second = [str(GDRO_TRAIN), "-m", *QUICK, "steps=4", "checkpoint.every=1", "seed=0",
                  f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    first = _paused_run(run_dir, gate)
    try:
        before = _snapshot(run_dir)
        assert {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "run.json",
                "metrics.jsonl"} <= set(before), sorted(before)
        out = subprocess.run(second, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == EXIT_IN_USE, out.stderr[-3000:]
        assert len(_lines(out.stderr)) == 1 and f"held by pid {first.pid} " in out.stderr, out.stderr
        assert _snapshot(run_dir) == before
    finally:
        gate.touch()
        assert first.wait(timeout=300) == 0, first.communicate()[1][-3000:]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("launcher", ["basic", "submitit_local"])
def test_a_sweep_job_whose_run_dir_is_a_file_is_reported_in_one_line_and_the_others_run(tmp_path, launcher):
    """Issue #39 (3): Hydra creates a job's run dir before the job starts; a file in its place ended the sweep in a
    traceback (rc 1) and the later jobs never ran. Now: jobs 0 and 2 run, job 1 is one line at the end, status 74.
    Under ``hydra/launcher=submitit_local`` too, whose job processes re-execute the launcher's module (Hydra's plugin
    discovery), which took Hydra's unchecked ``run_job`` again: a 40-line traceback, rc 1."""
    sweep = tmp_path / "S"
    sweep.mkdir()
    (sweep / "1").touch()
    extra = [] if launcher == "basic" else [f"hydra/launcher={launcher}"]
    proc = subprocess.run([str(GDRO_TRAIN), "-m", *extra, *QUICK, "steps=2", "seed=0,1,2", f"hydra.sweep.dir={sweep}",
                           "hydra.sweep.subdir=${seed}"], cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=600, check=False)
    lines = [x for x in _lines(proc.stderr) if not x.startswith("[")]
    assert proc.returncode == 74, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("gdro-train: sweep job #1 (") and "seed=1" in lines[0], lines
    assert lines[0].endswith(f") did not run: error: Not a directory (ENOTDIR): {sweep / '1'}"), lines
    for seed in (0, 2):
        assert json.loads((sweep / str(seed) / "run.json").read_text())["status"] == "completed"
        assert [r["step"] for r in read_metrics(sweep / str(seed)) if "step" in r][-1] == 2
    assert (sweep / "1").is_file() and not list(sweep.glob(".gdro-sweep-*"))
