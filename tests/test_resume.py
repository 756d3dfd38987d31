"""Checkpoints and exact resume: real runs of ``gdro-train`` killed (SIGKILL, SIGTERM, mid-checkpoint) and re-run.

The acceptance bar (issue #8): a run killed after step 3 and re-run with the same command produces, for steps 1–6,
exactly the non-timing values of a run that was never interrupted, each step once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gdro.algorithm.tracking import read_metrics
from gdro.common.validate import ConfigError
from gdro.compose.build import build_training
from gdro.run.checkpoint import list_checkpoints
from tests.conftest import FAST, REPO, compose_cfg

# 6 steps, an evaluation at steps 3 and 6, a checkpoint after every step; one thread so runs are bit-identical
CLI = [
    "logger=jsonl", "steps=6", "prompts_per_step=8", "rollouts_per_prompt=4", "save_final=false", "progress=false",
    "threads=1", "eval.at_start=false", "eval.every=3", "eval.k=2", "eval.max_problems=8", "data.train_size=400",
    "data.test_per_level=3", "checkpoint.every=1", "checkpoint.keep=2",
]
# Injected into a child process: SIGKILL itself while step 4's checkpoint is half written (after policy.pt and
# optimizer.pt, before trainer.pt and the rename) -- a real kill at the worst moment.
KILL_MID_WRITE = """
import os, signal, sys
import gdro.run.checkpoint as ck
_write = ck._write
def _write_then_die(path, obj):
    if path.parent.name.startswith(".tmp-step_000004") and path.name == "trainer.pt":
        os.kill(os.getpid(), signal.SIGKILL)
    _write(path, obj)
ck._write = _write_then_die
from gdro.cli.train import train
sys.argv = ["gdro-train", *sys.argv[1:]]
train()
"""


def _cmd(run_dir: Path, extra: list[str] = ()) -> list[str]:
    return [sys.executable, "-m", "gdro.cli.train", *CLI, f"hydra.run.dir={run_dir}", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}


def _run(run_dir: Path) -> subprocess.CompletedProcess:
    out = subprocess.run(_cmd(run_dir), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _wait_for_checkpoint(proc: subprocess.Popen, run_dir: Path, step: int) -> None:
    deadline = time.monotonic() + 240
    while not any(s == step for s, _ in list_checkpoints(run_dir)):
        assert proc.poll() is None, f"the run ended before checkpoint {step}: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, f"no checkpoint {step} after 240 s"
        time.sleep(0.02)


def _signal_after_checkpoint(run_dir: Path, step: int, signum: int) -> subprocess.Popen:
    """Start the 6-step run and send ``signum`` once checkpoint ``step`` exists."""
    proc = subprocess.Popen(_cmd(run_dir), cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_checkpoint(proc, run_dir, step)
    proc.send_signal(signum)
    return proc


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> list[dict]:
    """The reference: 6 steps in one process, never interrupted (a subprocess: used by the slow tests only)."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    _run(run_dir)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    return rows


def _check_resumed(run_dir: Path, straight: list[dict]) -> None:
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6], "each step must appear exactly once"
    assert _comparable(rows) == _comparable(straight)
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "completed" and meta["last_step"] == 6
    assert len(meta["resumes"]) == 1
    assert [s for s, _ in list_checkpoints(run_dir)] == [5, 6]  # keep=2
    assert not list((run_dir / "checkpoints").glob(".tmp-*")), "a stale temporary checkpoint dir was left"


@pytest.mark.slow
def test_sigkill_after_step_3_then_rerun_matches_straight_run(tmp_path: Path, straight):
    run_dir = tmp_path / "run"
    proc = _signal_after_checkpoint(run_dir, 3, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    killed = read_metrics(run_dir)
    assert 3 <= max(r["step"] for r in killed) < 6
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"  # nobody could mark it
    _run(run_dir)
    _check_resumed(run_dir, straight)
    assert json.loads((run_dir / "run.json").read_text())["resumes"][0]["from_step"] >= 3


@pytest.mark.slow
def test_sigterm_saves_exits_cleanly_and_resumes(tmp_path: Path, straight):
    run_dir = tmp_path / "run"
    proc = _signal_after_checkpoint(run_dir, 3, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err
    assert "interrupted by SIGTERM" in err.strip().splitlines()[-1]
    meta = json.loads((run_dir / "run.json").read_text())
    stopped_at = meta["last_step"]
    assert meta["status"] == "interrupted" and 3 <= stopped_at < 6
    assert list_checkpoints(run_dir)[-1][0] == stopped_at  # a checkpoint at the step it stopped after
    assert max(r["step"] for r in read_metrics(run_dir)) == stopped_at
    _run(run_dir)
    _check_resumed(run_dir, straight)


@pytest.mark.slow
def test_kill_while_writing_a_checkpoint_resumes_from_the_previous_one(tmp_path: Path, straight):
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-c", KILL_MID_WRITE, *CLI, f"hydra.run.dir={run_dir}"], cwd=REPO,
                         env=_env(), capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    assert [s for s, _ in list_checkpoints(run_dir)] == [2, 3]  # step 4's never became a checkpoint
    assert list((run_dir / "checkpoints").glob(".tmp-step_000004-*")), "the kill did not land mid-write"
    assert max(r["step"] for r in read_metrics(run_dir)) == 4  # step 4 was logged before its checkpoint
    _run(run_dir)
    _check_resumed(run_dir, straight)
    assert json.loads((run_dir / "run.json").read_text())["resumes"][0]["from_step"] == 3


# ---------------------------------------------------------------------------------------------------------------
# In-process: every controller's state survives a resume; refusals happen before any model loads
# ---------------------------------------------------------------------------------------------------------------
def _fit(run_dir: Path, overrides: list[str]):
    training = build_training(compose_cfg(FAST + overrides), run_dir)
    trainer = training.trainer
    try:
        rows = training.fit()
    finally:
        training.logger.close()
    return trainer, rows


# a finished run of FAST alone (steps=2; no evaluation: FAST has all three switches off), made once for the module:
# the tests that only need such a run dir each get their own copy of it
NO_EVAL = ["eval.at_start=false", "eval.at_end=false", "eval.every=0"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, list[dict]]:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    _, rows = _fit(run_dir, NO_EVAL)
    return run_dir, rows


def _copy_of(finished_run, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run[0], run_dir)
    return run_dir


@pytest.mark.parametrize("controllers", [
    # with evaluations at steps 2 and 4: the resumed run logs the same eval rows (step 2's before the checkpoint)
    ["sampler=prompt-gdro", "eval.every=2", "eval.k=2", "eval.max_problems=8"],
    ["sampler=prompt-gdro", "sampler.mode=resample", "allocator=sqrt"],
    ["sampler=uniform", "allocator=rollout-gdro"],
    ["sampler=prompt-gdro", "allocator=rollout-gdro", "optim.mini_batches=2", "optim.ppo_epochs=2"],
])
def test_extending_a_finished_run_equals_one_longer_run(tmp_path: Path, controllers):
    common = [*controllers, "checkpoint.every=2"]
    long, _ = _fit(tmp_path / "long", [*common, "steps=4"])
    _fit(tmp_path / "ext", [*common, "steps=2"])
    ext, rows_ext = _fit(tmp_path / "ext", [*common, "steps=4"])  # only steps differs: resumes from step 2
    assert [r["step"] for r in rows_ext] == [3, 4]
    if "eval.every=2" in controllers:
        assert [r["step"] for r in read_metrics(tmp_path / "ext") if "eval/mean@2" in r] == [2, 4]
    assert _comparable(read_metrics(tmp_path / "ext")) == _comparable(read_metrics(tmp_path / "long"))
    for (name, a), b in zip(long.policy.model.named_parameters(), ext.policy.model.parameters()):
        assert torch.equal(a, b), name
    np.testing.assert_equal(ext.controllers.sampler.state_dict(), long.controllers.sampler.state_dict())
    np.testing.assert_equal(ext.controllers.allocator.state_dict(), long.controllers.allocator.state_dict())
    assert json.dumps(ext.controllers.classifier.state_dict()) == json.dumps(long.controllers.classifier.state_dict())


def test_rerunning_a_completed_run_changes_nothing(tmp_path: Path):
    _fit(tmp_path, ["checkpoint.every=0"])
    before = (tmp_path / "metrics.jsonl").read_bytes()
    _, rows = _fit(tmp_path, ["checkpoint.every=0"])  # at_end saved step 2: nothing left to do
    assert rows == [] and (tmp_path / "metrics.jsonl").read_bytes() == before


def test_resume_false_refuses_a_dir_with_a_checkpoint(tmp_path: Path, finished_run):
    run_dir = _copy_of(finished_run, tmp_path)  # a run of FAST alone, as _fit(run_dir, []) leaves it
    with pytest.raises(ConfigError, match=r"resume=false: .* holds a checkpoint \(step 2\)"):
        build_training(compose_cfg(FAST + ["resume=false"]), run_dir)


def test_resume_with_a_different_config_is_refused_listing_the_differences(tmp_path: Path, finished_run):
    run_dir = _copy_of(finished_run, tmp_path)  # a run of FAST alone, as _fit(run_dir, []) leaves it
    with pytest.raises(ConfigError) as err:
        build_training(compose_cfg(FAST + ["optim.lr=3e-4", "seed=5", "steps=9"]), run_dir)
    msg = str(err.value)
    assert "2 key(s)" in msg and "optim.lr: 0.0001 -> 0.0003" in msg and "seed: 0 -> 5" in msg
    assert "steps" not in msg.split("key(s)")[1].replace("only steps, device, threads, lock.* and samples.* may change", "")


def test_checkpoint_beyond_the_requested_steps_is_refused(tmp_path: Path):
    _fit(tmp_path, ["steps=3", "checkpoint.every=3"])
    with pytest.raises(ConfigError, match="steps=1: the checkpoint .* is already at step 3"):
        build_training(compose_cfg(FAST + ["steps=1", "checkpoint.every=3"]), tmp_path)


def test_an_earlier_run_without_checkpoint_is_kept_aside(tmp_path: Path):
    _fit(tmp_path, ["checkpoint.every=0", "checkpoint.at_end=false"])
    first = (tmp_path / "metrics.jsonl").read_text()
    _fit(tmp_path, ["checkpoint.every=0", "checkpoint.at_end=false"])
    assert (tmp_path / "metrics.jsonl.prev-1").read_text() == first
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]  # the new run's rows only, never appended
    assert (tmp_path / "run.json.prev-1").is_file()


def test_no_evaluation_when_all_three_switches_are_off(finished_run):
    _, rows = finished_run  # _fit(run_dir, NO_EVAL)
    assert [r["step"] for r in rows] == [1, 2]
    assert not any(k.startswith("eval/") for r in rows for k in r)


def test_wandb_offline_run_resumes_the_same_run_id(tmp_path: Path):
    wb = ["logger=wandb", "logger.wandb_mode=offline"]
    _fit(tmp_path, [*wb, "steps=1"])
    run_id = json.loads((tmp_path / "run.json").read_text())["wandb_id"]
    _fit(tmp_path, [*wb, "steps=2"])
    assert json.loads((tmp_path / "run.json").read_text())["wandb_id"] == run_id
    offline = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(p.name.endswith(run_id) for p in offline)


def test_prompts_longer_than_max_prompt_len_are_dropped_at_load_and_counted(tmp_path: Path):
    # copy prompts take 10 + 2·level tokens: max_prompt_len=22 keeps levels 1–6 and drops levels 7 and 8
    trainer, rows = _fit(tmp_path, ["model.max_prompt_len=22", "steps=1", "eval.at_start=false"])
    assert max(p.level for p in trainer.problems.train) == 6 and max(p.level for p in trainer.problems.test) == 6
    dropped = json.loads((tmp_path / "run.json").read_text())["data"]["dropped_long_prompts"]
    assert dropped == {"train": 18 + 21, "test": 3 + 3}
    assert rows[-1]["step"] == 1


def test_a_key_added_since_the_checkpoint_is_no_difference_at_its_default(tmp_path: Path):
    # a checkpoint written before optim.micro_batch_tokens and model.gradient_checkpointing existed
    _fit(tmp_path, ["steps=1", "checkpoint.every=1"])
    meta_path = tmp_path / "checkpoints" / "step_000001" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["config"]["optim"]["micro_batch_tokens"], meta["config"]["model"]["gradient_checkpointing"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"1 key\(s\).*optim.micro_batch_tokens: <absent> -> 64"):
        build_training(compose_cfg(FAST + ["steps=2", "checkpoint.every=1", "optim.micro_batch_tokens=64"]),
                      tmp_path)  # a new key away from its default changes the run: refused
    _, rows = _fit(tmp_path, ["steps=2", "checkpoint.every=1"])  # the new keys at their defaults: resumes
    assert [r["step"] for r in rows] == [2]
