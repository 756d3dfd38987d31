"""The optimiser and the update schedule of a run (conf/optim/*.yaml): AdamW, warm-up, clipping, PPO epochs and
mini-batches, and the forward switches that :class:`gdro.policy.forward.Forward` binds (micro-batching, shared prefix,
packing)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# how the engine-trainer importance weight is bounded (TRL vllm_importance_sampling_mode); none: not applied
ENGINE_IS_MODES = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass(frozen=True)
class OptimConfig:
    """Optimiser and update schedule (conf/optim/*.yaml)."""

    lr: float = 1e-4
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    warmup_steps: int = 10
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping
    ppo_epochs: int = 1
    mini_batches: int = 1  # optimiser steps per epoch; rollouts are split into this many mini-batches
    micro_batch_size: int = 128  # rollouts per forward/backward (gradient accumulation)
    micro_batch_tokens: int | None = None  # if set: micro-batches by padded tokens (rows × width) instead of rows
    skip_zero_adv: bool = True  # exact speed-up when beta_kl = 0: rows with A = 0 add no gradient
    shared_prefix: bool = True  # encode each prompt once per micro-batch and reuse its KV cache for its group's rows
    pack: bool = True  # with shared_prefix: a group's completions packed after its prompt in one sequence where it fits
    # TRL mask_truncated_completions (DAPO's overlong filtering): completions that hit the length limit (no end token)
    # leave the loss: their tokens count in no numerator and no denominator (their rewards still shape the advantages)
    mask_truncated_completions: bool = False
    # Truncated importance sampling for the engine-trainer mismatch (TRL vllm_importance_sampling_*): each token's PG
    # term times w = exp(trainer's old log-prob - engine's log-prob) (a sequence's: exp of the sum), bounded:
    # *_truncate clamps w to [engine_is_min, engine_is_max], *_mask zeroes it outside; none: off (the engine then
    # returns no log-probs)
    engine_is_mode: str = "none"
    engine_is_max: float | None = 3.0
    engine_is_min: float | None = None

    def __post_init__(self) -> None:
        checks = [
            ("lr", self.lr > 0, "must be > 0"),
            ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("beta1", 0 <= self.beta1 < 1, "must be in [0, 1)"),
            ("beta2", 0 <= self.beta2 < 1, "must be in [0, 1)"),
            ("eps", self.eps > 0, "must be > 0"),
            ("warmup_steps", self.warmup_steps >= 0, "must be >= 0"),
            ("grad_clip", self.grad_clip >= 0, "must be >= 0 (0 disables clipping)"),
            ("ppo_epochs", self.ppo_epochs >= 1, "must be >= 1"),
            ("mini_batches", self.mini_batches >= 1, "must be >= 1"),
            ("micro_batch_size", self.micro_batch_size >= 1, "must be >= 1"),
            ("micro_batch_tokens", self.micro_batch_tokens is None or self.micro_batch_tokens >= 1,
             "must be null or >= 1"),
        ]
        for key, ok, why in checks:
            if not ok:
                raise ValueError(f"{key} {why}, got {getattr(self, key)}")
        if self.engine_is_mode not in ENGINE_IS_MODES:
            raise ValueError(f"engine_is_mode must be one of {ENGINE_IS_MODES}, got {self.engine_is_mode!r}")
        for key in ("engine_is_max", "engine_is_min"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not (value > 0 and math.isfinite(value))):
                raise ValueError(f"{key} must be a finite number > 0 or null, got {value!r}")
        lo, hi = self.engine_is_min, self.engine_is_max
        if lo is not None and hi is not None and not lo < hi:
            raise ValueError(f"engine_is_min must be < engine_is_max, got {lo} and {hi}")
        if self.engine_is_mode != "none" and hi is None and lo is None:  # a mask or a clamp without a bound: a no-op
            raise ValueError(f"engine_is_mode={self.engine_is_mode} needs engine_is_max or engine_is_min (a bound)")
        for key in ("shared_prefix", "pack", "mask_truncated_completions"):
            if not isinstance(getattr(self, key), bool):
                raise TypeError(f"{key} must be true or false, got {getattr(self, key)!r}")

    def make(self, params) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        """AdamW over the trainable ``params`` (a LoRA run's adapters; every weight otherwise), and its schedule."""
        opt = torch.optim.AdamW(
            [p for p in params if p.requires_grad], lr=self.lr, betas=(self.beta1, self.beta2), eps=self.eps, weight_decay=self.weight_decay
        )
        warm = self.warmup_steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        return opt, sched
