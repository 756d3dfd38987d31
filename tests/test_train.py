"""Integration: short real runs of the whole loop on the shipped tiny Qwen3 model (CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gdro.algorithm.tracking import read_metrics
from gdro.compose.build import build_training
from gdro.models.source import TINY_DIR
from tests.conftest import FAST, REPO, compose_cfg

REQUIRED = [
    "step", "reward/mean", "train/loss", "train/kl", "train/clip_frac", "rollout/len_mean", "rollout/n_total",
    "rollout/n_per_prompt_mean", "time/step_s",
]


def _run(tmp_path: Path, overrides: list[str]):
    cfg = compose_cfg(FAST + overrides)
    training = build_training(cfg, tmp_path, choices={"sampler": "uniform", "allocator": "fixed"})
    trainer = training.trainer
    before = {k: v.detach().clone() for k, v in trainer.policy.model.named_parameters()}
    try:
        rows = training.fit()
    finally:
        training.logger.close()
    return trainer, before, rows


def _comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def test_short_run_updates_parameters_and_logs_metrics(tmp_path: Path):
    # all three evaluation triggers: before step 1 (logged as step 0), every 2 steps, after the last step
    trainer, before, rows = _run(tmp_path / "a", ["steps=3", "eval.at_start=true", "eval.every=2", "eval.at_end=true"])
    changed = [k for k, v in trainer.policy.model.named_parameters() if not torch.equal(v, before[k])]
    assert changed, "no parameter changed after 3 GRPO steps"
    assert any(r["train/grad_norm"] > 0 and r["train/adv_abs_mean"] > 0 for r in rows if "train/loss" in r)
    logged = read_metrics(tmp_path / "a")
    assert logged == json.loads(json.dumps(rows))
    train_rows = [r for r in logged if "train/loss" in r]
    assert [r["step"] for r in train_rows] == [1, 2, 3]
    for r in train_rows:
        missing = [k for k in REQUIRED if k not in r]
        assert not missing, f"metrics row lacks {missing}"
        assert r["rollout/n_total"] == 8 * 4 and r["rollout/n_per_prompt_mean"] == 4
        assert r["train/kl"] is not None and r["train/kl"] >= 0  # beta_kl = 0.001: a reference is loaded
    eval_rows = [r for r in logged if "eval/mean@4" in r]
    assert [r["step"] for r in eval_rows] == [0, 2, 3]
    assert any(k.startswith("eval/mean@4/level_") for k in eval_rows[0])
    meta = json.loads((tmp_path / "a" / "run.json").read_text())
    head = _git("rev-parse", "HEAD")  # None outside a git checkout (e.g. an sdist): the run records "unknown"
    assert meta["git"]["commit"] == (head or "unknown")
    if head is not None:
        assert meta["git"]["dirty"] == bool(_git("status", "--porcelain", "--untracked-files=no"))
    assert meta["config"]["steps"] == 3 and (tmp_path / "a" / "config.yaml").is_file()
    # the environment the numbers depend on: library versions and the CPU's dispatch (issue #36's rerun on another CPU)
    import torch as _torch
    import transformers as _transformers

    assert meta["versions"]["torch"] == _torch.__version__
    assert meta["versions"]["transformers"] == _transformers.__version__
    assert meta["machine"]["cpu_capability"] == _torch.backends.cpu.get_cpu_capability() and meta["machine"]["cpu"]
    assert meta["model"] == {"name_or_path": "tiny", "path": str(TINY_DIR), "fallback_used": False}


def test_same_seed_gives_identical_metrics(tmp_path: Path):
    _, _, rows_a = _run(tmp_path / "a", ["seed=3"])
    _, _, rows_b = _run(tmp_path / "b", ["seed=3"])
    _, _, rows_c = _run(tmp_path / "c", ["seed=4"])
    assert _comparable(rows_a) == _comparable(rows_b)
    assert _comparable(rows_a) != _comparable(rows_c)


def test_no_reference_model_when_beta_zero(tmp_path: Path):
    trainer, _, rows = _run(tmp_path, ["loss.beta_kl=0", "optim.ppo_epochs=2", "optim.mini_batches=2",
                                       "optim.micro_batch_size=5", "loss.agg=seq-mean-token-mean"])
    assert trainer.policy.reference is None
    assert [r["step"] for r in rows] == [1, 2] and all(r["train/kl"] is None for r in rows)


def test_wandb_offline_run_is_written(tmp_path: Path):
    _run(tmp_path, ["logger=wandb", "logger.wandb_mode=offline", "steps=1"])
    assert list((tmp_path / "wandb").glob("offline-run-*")), "no offline W&B run dir"


@pytest.mark.slow
def test_multirun_writes_one_run_dir_per_job(tmp_path: Path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "gdro.cli.train", "-m", "seed=0,1", *[o for o in FAST if not o.startswith("steps=")],
         "steps=1", f"hydra.sweep.dir={sweep}"],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(p.parent for p in sweep.glob("*/metrics.jsonl"))
    assert len(runs) == 2
    metas = [json.loads((r / "run.json").read_text()) for r in runs]
    assert sorted(m["config"]["seed"] for m in metas) == [0, 1]
    assert all(m["status"] == "completed" for m in metas)
    assert all([r["step"] for r in read_metrics(run)] == [1] for run in runs)


def test_any_causal_lm_trains(tmp_path: Path):
    """Not only Qwen3: a GPT-2 (learned absolute positions) built locally goes through the same path."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from gdro.models.tiny import build_tokenizer

    tok = build_tokenizer()
    cfg = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1, n_head=2,
                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    trainer, _, rows = _run(tmp_path / "run", [f"model.name_or_path={tmp_path / 'gpt2'}", "steps=1"])
    assert type(trainer.policy.model).__name__ == "GPT2LMHeadModel"
    assert rows[-1]["rollout/n_total"] == 32 and rows[-1]["train/loss"] is not None


def test_prompt_gdro_run_logs_diagnostics(tmp_path: Path):
    """sampler=prompt-gdro end to end: per-bin weights (summing to 1), shares, scores, pass rates, lead-lag."""
    _, _, rows = _run(tmp_path, ["sampler=prompt-gdro", "sampler.signal=failure_rate", "steps=4",
                                 "data.train_size=16", "classifier.unseen=hardest"])
    train = [r for r in rows if "train/loss" in r]
    for r in train:
        w = {k: v for k, v in r.items() if k.startswith("gdro/weight/")}
        assert w and abs(sum(w.values()) - 1) < 1e-9
        assert any(k.startswith("gdro/share/") for k in r) and "gdro/weight_entropy" in r
        assert any(k.startswith("gdro/score/") for k in r) and any(k.startswith("gdro/passrate/") for k in r)
    # a 16-prompt pool is fully revisited by step 3, so pass-rate bins are populated and lead-lag is defined
    assert any(r.get("gdro/lead_lag") is not None for r in train[2:])
    assert train[-1]["difficulty/seen_frac"] == 1.0


def test_prompt_gdro_with_pg_loss_signal_equals_grpo_at_ratio_one(tmp_path: Path):
    """With one optimiser step per batch the official pg_loss signal is exactly 0 per prompt (ratio 1 and
    zero-mean group advantages), so Prompt-GDRO's multipliers stay 1 and the run is identical to GRPO."""
    grpo, _, a = _run(tmp_path / "grpo", ["sampler=uniform", "data.train_size=16"])
    pgdro, _, b = _run(tmp_path / "pgdro", ["sampler=prompt-gdro", "sampler.signal=pg_loss", "data.train_size=16"])
    keys = ["reward/mean", "train/loss", "train/kl", "train/grad_norm"]
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]
    # and the final policies are the same weights (what an evaluation after the last step would compare)
    for (name, p), q in zip(grpo.policy.model.named_parameters(), pgdro.policy.model.parameters()):
        assert torch.equal(p, q), name
    # float32 rounding only: |score| ~ 1e-9
    assert all(abs(v) < 1e-6 for r in b for k, v in r.items() if k.startswith("gdro/score/") and v is not None)


def test_rollout_gdro_and_joint_runs_are_compute_neutral(tmp_path: Path):
    """allocator=rollout-gdro (alone and with Prompt-GDRO): ragged groups, exactly n̄ per prompt every step."""
    for i, extra in enumerate([["sampler=uniform"], ["sampler=prompt-gdro"]]):
        _, _, rows = _run(tmp_path / str(i), [*extra, "allocator=rollout-gdro", "steps=4", "data.train_size=16",
                                              "allocator.alpha_mu=0.5"])
        train = [r for r in rows if "train/loss" in r]
        assert all(r["rollout/n_per_prompt_mean"] == 4 and r["rollout/n_total"] == 32 for r in train)
        assert all("gdro/mu" in r and any(k.startswith("gdro/rollouts/") for k in r) for r in train)
        assert abs(sum(v for k, v in train[-1].items() if k.startswith("gdro/budget_share/")) - 1) < 1e-9


def test_sqrt_allocator_run(tmp_path: Path):
    _, _, rows = _run(tmp_path, ["allocator=sqrt", "steps=3", "data.train_size=16"])
    train = [r for r in rows if "train/loss" in r]
    assert all(r["rollout/n_total"] == 32 for r in train) and "gdro/wse" in train[-1]


def test_oracle_level_control_samples_levels_uniformly(tmp_path: Path):
    _, _, rows = _run(tmp_path, ["sampler=oracle-levels", "steps=3", "prompts_per_step=64", "rollouts_per_prompt=2"])
    shares = {k: v for k, v in rows[-1].items() if k.startswith("oracle/level_share/")}
    assert len(shares) == 8 and abs(sum(shares.values()) - 1) < 1e-9
    assert max(shares.values()) < 0.25  # uniform over 8 levels (192 draws), not the Zipf pool (37% level 1)
