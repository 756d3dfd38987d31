"""Sweeps through Hydra's submitit launcher: each run its own job (``submitit_local`` here, ``slurm`` on a cluster).

The local sweep runs the real ``gdro-train`` console entry point with ``hydra/launcher=submitit_local``: submitit
pickles the task, starts each job in its own process and collects its result. Re-submitting the same sweep (same
``hydra.sweep.dir``) resumes every job from its checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, compose_cfg

PAPER = ["paper", "paper-prompt-gdro", "paper-rollout-gdro"]
MODELS = ["qwen3-1.7b", "qwen3-4b", "qwen3-8b"]


def _sweep(tmp_path: Path, sweep: Path, steps: int) -> subprocess.CompletedProcess:
    fast = [o for o in FAST if not o.startswith("steps=")]
    cmd = [sys.executable, "-m", "gdro.cli.train", "-m", "hydra/launcher=submitit_local", "seed=0,1", f"steps={steps}",
           "threads=1", *fast, f"hydra.sweep.dir={sweep}"]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=tmp_path, timeout=600)


def _runs(sweep: Path) -> dict[int, dict]:
    out = {}
    for d in sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()):
        meta = json.loads((d / "run.json").read_text())
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
        out[int(d.name)] = {"meta": meta, "steps": [r["step"] for r in rows]}
    return out


@pytest.mark.slow
def test_submitit_local_sweep_writes_complete_runs_and_resumes_when_resubmitted(tmp_path: Path):
    sweep = tmp_path / "sweep"
    proc = _sweep(tmp_path, sweep, steps=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(sweep)
    assert sorted(runs) == [0, 1]
    for job, run in runs.items():
        meta = run["meta"]
        assert meta["status"] == "completed" and meta["last_step"] == 2
        assert meta["config"]["seed"] == job and run["steps"] == [1, 2]
        assert (sweep / str(job) / "checkpoints").is_dir()
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2  # each run was its own submitit job
    # the same sweep re-submitted with more steps: every job resumes at its checkpoint (step 2), not from scratch
    proc = _sweep(tmp_path, sweep, steps=3)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for run in _runs(sweep).values():
        assert run["meta"]["status"] == "completed" and run["meta"]["last_step"] == 3
        assert run["steps"] == [1, 2, 3]
        assert [r["from_step"] for r in run["meta"]["resumes"]] == [2]


@pytest.mark.parametrize("experiment", PAPER)
@pytest.mark.parametrize("model", MODELS)
def test_every_paper_preset_composes_with_the_slurm_launcher(experiment, model):
    cfg = compose_cfg([f"experiment={experiment}", f"model={model}", "hydra/launcher=slurm",
                       "hydra.launcher.partition=gpu"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 1 and launcher.tasks_per_node == 1
    assert launcher.timeout_min > 0 and launcher.max_num_timeout >= 1
    assert cfg.model.name_or_path == f"Qwen/{model.replace('qwen3', 'Qwen3').replace('b', 'B')}-Base"
    assert cfg.dist.backend == "auto" and cfg.dist.shards is None  # the distributed settings, as --cfg job shows


@pytest.mark.slow
def test_a_submitit_job_of_two_tasks_trains_over_two_processes(tmp_path: Path):
    """tasks_per_node=2 (on Slurm: one task per GPU): each task one process of the same FSDP run, no torchrun."""
    sweep = tmp_path / "sweep"
    fast = [o for o in FAST if not o.startswith("steps=")]
    cmd = [sys.executable, "-m", "gdro.cli.train", "-m", "hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2",
           "seed=0", "steps=2", "threads=1", *fast, f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = _runs(sweep)[0]
    assert run["meta"]["world_size"] == 2 and run["meta"]["status"] == "completed" and run["steps"] == [1, 2]
