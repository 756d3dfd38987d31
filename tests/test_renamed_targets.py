"""A checkpoint written before gdro renamed a component class (#29: ``gdro.loss.LossConfig`` became
``gdro.loss.GRPOLoss``) still resumes; any other ``_target_`` change is still a difference that refuses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gdro.run.checkpoint import list_checkpoints
from gdro.run.lifecycle import RENAMED_TARGETS, config_differences
from gdro.run.tracking import read_metrics
from tests.test_resume import REPO, _env


def _cfg(target: str) -> dict:
    return {"steps": 3, "loss": {"_target_": target, "clip_low": 0.2}}


def test_a_renamed_target_is_no_difference_another_target_is():
    for old, new in RENAMED_TARGETS.items():
        assert config_differences(_cfg(old), _cfg(new)) == []
    assert config_differences(_cfg("gdro.loss.gspo.GSPOLoss"), _cfg("gdro.loss.grpo.GRPOLoss")) == [
        'loss._target_: "gdro.loss.gspo.GSPOLoss" -> "gdro.loss.grpo.GRPOLoss"']
    assert config_differences(_cfg("gdro.loss.LossConfig"), _cfg("gdro.loss.gspo.GSPOLoss")) != []


@pytest.mark.slow
def test_a_checkpoint_from_before_the_loss_seam_resumes(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "gdro.cli", "experiment=smoke", "progress=false", "checkpoint.every=1",
           f"hydra.run.dir={run_dir}"]
    out = subprocess.run([*cmd, "steps=1"], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    (_, ckpt), = list_checkpoints(run_dir)
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["config"]["loss"]["_target_"] == "gdro.loss.grpo.GRPOLoss"
    meta["config"]["loss"]["_target_"] = "gdro.loss.LossConfig"  # as a checkpoint of gdro before #29 says
    (ckpt / "meta.json").write_text(json.dumps(meta))
    out = subprocess.run([*cmd, "steps=2"], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [r["step"] for r in read_metrics(run_dir) if r.get("step")] == [1, 2]
