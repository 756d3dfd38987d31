"""Mixed precision: fp32 master weights under autocast in the compute dtype (``model.dtype``/``model.master_dtype``).

Run on the CPU with the shipped tiny model in bfloat16 (CPU autocast supports it): the same code path as bf16 on a GPU.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from safetensors.torch import load_file

from gdro.common.rollouts import SamplingParams
from gdro.compose.build import build_training
from gdro.models.loading import ModelSpec, autocast_context, compute_dtype, load_model
from gdro.policy import completion_logprobs
from gdro.policy.layouts import make_token_batch
from tests.conftest import FAST, compose_cfg

BF16 = ["model.dtype=bfloat16", "optim.lr=1e-6", "optim.warmup_steps=0", "steps=1"]


def _one_step(tmp_path: Path, overrides: list[str]):
    cfg = compose_cfg(FAST + BF16 + overrides)
    training = build_training(cfg, tmp_path, choices={"sampler": "uniform", "allocator": "fixed"})
    trainer = training.trainer
    before = {k: v.detach().clone() for k, v in trainer.policy.model.named_parameters()}
    try:
        training.fit()
    finally:
        training.logger.close()
    return trainer, before


def _changed_fraction(model, before) -> float:
    changed = total = 0
    for k, v in model.named_parameters():
        changed += int((v.detach() != before[k]).sum())
        total += v.numel()
    return changed / total


def test_master_weights_are_fp32_and_the_rest_computes_in_bf16(tmp_path: Path):
    trainer, before = _one_step(tmp_path, ["model.master_dtype=float32", "save_final=true"])
    policy, ref = trainer.policy.model, trainer.policy.reference
    assert {p.dtype for p in policy.parameters()} == {torch.float32}
    assert compute_dtype(policy) == torch.bfloat16
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
    # forwards run under bf16 autocast: the matmuls are bf16 (the residual stream stays fp32), the log-probs fp32
    seen = []
    hook = policy.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    roll = trainer.policy.engine.generate(["Copy: 1 2 3."], [2], seed=0, sampling=SamplingParams(1.0, 1.0, 0, 8))
    tb = make_token_batch(roll, list(range(len(roll))), trainer.policy.engine.pad_id)
    lp = completion_logprobs(policy, tb, 1.0)
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}, seen  # generation and the training forward both
    assert lp.dtype == torch.float32
    # an lr-1e-6 AdamW step moves (almost) every master weight ...
    assert _changed_fraction(policy, before) > 0.9
    # ... and the saved checkpoint is in the compute dtype, as the base model was stored
    saved = load_file(str(tmp_path / "checkpoint" / "model.safetensors"))
    assert {t.dtype for t in saved.values() if t.is_floating_point()} == {torch.bfloat16}


def test_bf16_weights_without_masters_round_small_updates_away(tmp_path: Path):
    """Why master weights: the same step on bf16 weights leaves most of them exactly as they were."""
    trainer, before = _one_step(tmp_path, ["model.master_dtype=null"])
    assert {p.dtype for p in trainer.policy.model.parameters()} == {torch.bfloat16}
    assert _changed_fraction(trainer.policy.model, before) < 0.5


def test_float32_default_is_untouched():
    spec = ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16)
    model, _ = load_model(spec, train=True)
    assert spec.master_dtype == "float32" and compute_dtype(model) == torch.float32
    assert isinstance(autocast_context(model), contextlib.nullcontext)
