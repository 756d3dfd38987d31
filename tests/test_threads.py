"""threads=auto (gdro.common.threads, issue #52): the free cores at the start, chosen again when steps slow down, and
OMP_NUM_THREADS honoured; the thread count does not change the toy's numbers."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gdro.common.threads import SlowdownWatch, auto_threads, busy_cores, usable_cpus
from tests.test_resume import REPO, _env


def test_a_busy_process_is_counted_as_a_busy_core():
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = busy_cores(usable_cpus(), interval=0.5)
    finally:
        hog.kill()
        hog.wait()
    assert busy is not None and busy >= 0.7, busy  # the hog alone keeps one core busy (others may add to it)


def test_omp_num_threads_is_honoured_and_auto_stays_within_torchs_default(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert auto_threads(default=2) == 3  # a scheduler's pinned count, as given
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert 1 <= auto_threads(default=2, interval=0.05) <= 2
    assert auto_threads(default=1, interval=0.05) == 1


def _rows(seconds: list[float]) -> list[dict]:
    return [{"step": i + 1, "time/step_s": s, "time/eval_s": 0.0} for i, s in enumerate(seconds)]


def test_a_slowdown_warns_once_when_the_threads_are_pinned():
    watch = SlowdownWatch(auto=False)
    lines = [watch.observe(r) for r in _rows([5.0, 1.0, 1.1, 0.9, 1.5, 3.0, 4.0])]
    assert lines[:6] == [None] * 5 + [lines[5]] and lines[5] is not None and lines[6] is None
    assert "3.0x slower than the first ones" in lines[5] and "threads=auto" in lines[5]
    # an evaluation step is not a slowdown: its time is taken out
    assert SlowdownWatch(auto=False).observe({"time/step_s": 9.0, "time/eval_s": 8.0}) is None


def test_under_auto_a_slowdown_chooses_the_threads_again(monkeypatch):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # what auto_threads will find
        watch = SlowdownWatch(auto=True)
        lines = [watch.observe(r) for r in _rows([5.0, 1.0, 1.0, 1.0, 2.5])]
        assert lines[-1] is not None and "threads 1 -> 2 (threads=auto)" in lines[-1]
        assert torch.get_num_threads() == 2 and watch.reference is None  # measured again at the new count
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_the_main_jobs_numbers_do_not_depend_on_the_thread_count(tmp_path):
    """What threads=auto relies on: experiment=smoke with 1 and 2 threads gives identical metrics (the main job's
    first 20 steps were compared the same way: scripts/compare_metrics.py, docs/performance.md)."""
    dirs = []
    for threads in (1, 2):
        run_dir = tmp_path / f"t{threads}"
        env = {k: v for k, v in _env().items() if k != "OMP_NUM_THREADS"}
        out = subprocess.run([sys.executable, "-m", "gdro.cli.train", "experiment=smoke", "progress=false",
                              "steps=3", f"threads={threads}", f"hydra.run.dir={run_dir}"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=600, check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        dirs.append(run_dir)
    out = subprocess.run([sys.executable, "scripts/compare_metrics.py", *map(str, dirs)], cwd=REPO,
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0 and "identical" in out.stdout, out.stdout + out.stderr
