"""The policy update (paper Eq. 4–7 for GRPO): clipped-surrogate steps on a ragged rollout batch.

How each forward runs (layouts, micro-batches, processes) is :class:`gdro.policy.forward.Forward`'s; the loss
is the run's :class:`gdro.loss.Loss` (``loss=grpo|gspo|dr-grpo``). This module holds the schedule: epochs,
mini-batches, gradient accumulation with mini-batch-wide denominators (:class:`gdro.loss.BatchCounts`),
clipping, and the per-response losses the controllers read.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch

from gdro.common.rollouts import RolloutBatch
from gdro.loss import BatchCounts, Loss, LossInputs, per_response_mean
from gdro.models.lora import reference_model
from gdro.policy.config import OptimConfig
from gdro.policy.forward import Forward
from gdro.policy.kernels import recording_entropy


@dataclass(frozen=True)
class ResponseLosses:
    """Per-response token means ``(N,)`` from the first epoch: the loss's PG term (the clipped PG loss, with
    the advantages the update used) and KL to π_ref (zeros without a reference)."""

    pg: np.ndarray
    kl: np.ndarray


def ppo_update(model, optimizer: torch.optim.Optimizer, scheduler, roll: RolloutBatch, adv: torch.Tensor,
               loss: Loss, optim_cfg: OptimConfig, fwd: Forward, *, rng: np.random.Generator,
               ref_model=None, local_rows: np.ndarray | None = None) -> tuple[dict[str, float | None], ResponseLosses]:
    """One policy update with ``loss`` on a ragged rollout batch; returns aggregated statistics and
    per-response losses.

    With one epoch and one mini-batch there is a single optimiser step, so π_old = π_θ and the old log-probs are
    the current ones (detached): no extra forward pass.

    ``train/entropy``: the token mean, over the valid tokens of the rows the first epoch forwards, of the policy's
    full-softmax entropy at the sampling temperature, from the log-softmax those forwards compute anyway
    (:func:`gdro.policy.kernels.recording_entropy`; detached: the loss and its gradients are untouched).
    ``train/clip_frac_low`` / ``train/clip_frac_high``: the valid tokens whose ratio is clipped at the lower edge
    (``rho < 1 - clip_low`` with ``A < 0``) / the upper one (``rho > 1 + clip_high`` with ``A > 0``), TRL's
    ``clip_ratio/low_mean`` and ``high_mean`` (token ratios; a loss that reports its own takes precedence).

    The per-response losses (from the first epoch) are reductions of the per-token terms the loss itself computed
    (``loss.compute``'s ``TokenTerms``), not a second evaluation: ``pg`` — the token mean of the PG loss with
    the advantages ``adv`` as given — and ``kl`` — the token mean of the KL to π_ref (0 without a reference). Rows
    skipped as zero-advantage have ``pg`` exactly 0.

    Across processes (``fwd.dist``, gdro.parallel.distributed): every process holds the whole batch but forwards and
    backwards only ``local_rows``; the loss's denominators are the whole mini-batch's, the sharded model sums the
    gradients, and the per-response losses and statistics are summed over processes (each row is computed by one
    process).
    """
    n = len(roll)
    mine = np.arange(n) if local_rows is None else np.asarray(local_rows, dtype=np.int64)
    single_step = optim_cfg.ppo_epochs == 1 and optim_cfg.mini_batches == 1
    old = None if single_step else _by_row(n, mine, fwd.logprobs_no_grad(model, roll, mine))
    t_ref = time.perf_counter()
    if loss.beta_kl > 0 and ref_model is None:
        raise ValueError("loss.beta_kl > 0 needs a reference model")
    with reference_model(ref_model) as pi_ref:  # a LoRA run's reference: the policy with its adapters off
        ref = _by_row(n, mine, fwd.logprobs_no_grad(pi_ref, roll, mine)) if loss.beta_kl > 0 else None
    t_ref = time.perf_counter() - t_ref
    # a loss that reads the tokens' entropies (top_entropy_quantile < 1) takes its quantile over all rows, as TRL's
    skip = optim_cfg.skip_zero_adv and loss.beta_kl == 0 and not getattr(loss, "needs_entropy", False)
    # the rows in the loss: all, or (mask_truncated_completions) those that emitted the end token; a masked row's
    # tokens count nowhere, as TRL zeroes its completion mask (its length here is 0)
    in_loss = roll.finished if optim_cfg.mask_truncated_completions else np.ones(n, dtype=bool)
    lengths = np.where(in_loss, roll.lengths, 0)
    engine_is = EngineIS.of(optim_cfg, roll)
    step = _Update(model, optimizer, roll, adv, loss, fwd, mine, old, ref, lengths, engine_is)
    model.train()
    for epoch in range(optim_cfg.ppo_epochs):
        order = np.arange(n) if single_step else rng.permutation(n)
        for mb in np.array_split(order, optim_cfg.mini_batches):
            if len(mb) == 0:
                continue
            rows = mb[in_loss[mb]]
            rows = rows[adv[rows].abs().numpy() > 0] if skip else rows
            step.mini_batch(mb, rows, first_epoch=epoch == 0, grad_clip=optim_cfg.grad_clip)
    scheduler.step()
    sig_pg, sig_kl, totals = fwd.dist.reduce_update(step.sig_pg, step.sig_kl, step.totals)
    out = _statistics(totals, step.grad_norms, optim_cfg, measured_kl=ref is not None)
    out["train/lr"] = float(scheduler.get_last_lr()[0])
    out["train/rows_in_update"] = float(int((in_loss & (adv.abs().numpy() > 0)).sum()) if skip else int(in_loss.sum()))
    out["time/ref_s"] = t_ref  # the reference model's forward (0 without one)
    return out, ResponseLosses(pg=sig_pg, kl=sig_kl)


def _statistics(totals: dict[str, float], grad_norms: list[float], optim_cfg: OptimConfig, *,
                measured_kl: bool) -> dict[str, float | None]:
    """The update's ``train/*`` means over its optimiser steps, the token-mean entropy and the mean grad norm."""
    n_steps = optim_cfg.ppo_epochs * optim_cfg.mini_batches
    ent_sum, ent_tokens = totals.pop(_ENT_SUM, 0.0), totals.pop(_ENT_TOKENS, 0.0)
    out: dict[str, float | None] = {f"train/{k}": v / n_steps for k, v in totals.items()}
    out["train/entropy"] = ent_sum / ent_tokens if ent_tokens else None  # None: no token was forwarded
    if not measured_kl:
        out["train/kl"] = None  # no reference model (beta_kl = 0): KL to π_ref is not measured
    out["train/grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
    return out


@dataclass
class _Update:
    """One update's inputs, and the sums its mini-batches add to (per-response losses, statistics, grad norms)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    roll: RolloutBatch
    adv: torch.Tensor
    loss: Loss
    fwd: Forward
    mine: np.ndarray  # the rows this process trains on (all of them in one process)
    old: list[torch.Tensor | None] | None  # π_old log-probs per row (None: one optimiser step, π_old = π_θ)
    ref: list[torch.Tensor | None] | None  # π_ref log-probs per row (None: no KL)
    lengths: np.ndarray  # (N,) each row's tokens in the loss (0 for a row the loss masks out)
    engine_is: EngineIS | None  # the engine-trainer importance weight (None: off)
    sig_pg: np.ndarray = field(init=False)
    sig_kl: np.ndarray = field(init=False)
    totals: dict[str, float] = field(default_factory=dict)
    grad_norms: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sig_pg = np.zeros(len(self.roll), dtype=np.float64)
        self.sig_kl = np.zeros(len(self.roll), dtype=np.float64)
        self.is_mine = np.zeros(len(self.roll), dtype=bool)
        self.is_mine[self.mine] = True

    def mini_batch(self, mb: np.ndarray, rows: np.ndarray, *, first_epoch: bool, grad_clip: float) -> None:
        """One optimiser step over mini-batch ``mb``, forwarding this process's ``rows`` of it."""
        # mini-batch-wide denominators: micro-batch losses then sum to the mini-batch loss exactly
        # and the step's whole batch, TRL's generation batch, the dapo/cispo normaliser's (BatchCounts.step_token_share)
        counts = BatchCounts.of(self.lengths[mb], step_lengths=self.lengths)
        rows = rows[self.is_mine[rows]]
        self.optimizer.zero_grad(set_to_none=True)
        plan = self.fwd.plan(self.model, self.roll, rows, self.mine)
        for part in plan.filler:  # as many forward/backward passes as the busiest process (a sharded model)
            logp, _ = self.fwd.logprobs(self.model, self.roll, part)
            (logp.sum() * 0.0).backward()
        for part in plan.parts:
            self.micro_batch(part, counts, first_epoch)
        # clip_grad_norm_ with max_norm=inf only measures the norm (0 when no row had gradient)
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), grad_clip or float("inf"))
        self.grad_norms.append(float(gn))
        self.optimizer.step()

    def micro_batch(self, part: np.ndarray, counts: BatchCounts, first_epoch: bool) -> None:
        """Forward and backward of one micro-batch; its statistics and (first epoch) per-response losses and
        entropy."""
        needs_entropy = getattr(self.loss, "needs_entropy", False)  # loss.top_entropy_quantile < 1
        with recording_entropy() if first_epoch or needs_entropy else nullcontext() as ent:
            logp, mask = self.fwd.logprobs(self.model, self.roll, part)
        if ent and first_epoch:  # the first epoch's forwards: each row once
            self.totals[_ENT_SUM] = self.totals.get(_ENT_SUM, 0.0) + float((ent[-1] * mask).sum())
            self.totals[_ENT_TOKENS] = self.totals.get(_ENT_TOKENS, 0.0) + float(mask.sum())
        width = logp.shape[1]
        old_lp = logp.detach() if self.old is None else _stack([self.old[i] for i in part], width)
        ref_lp = None if self.ref is None else _stack([self.ref[i] for i in part], width)
        adv = self.adv[part].to(logp.device, logp.dtype)
        weight = None
        if self.engine_is is not None:
            weight, is_stats = self.engine_is.weights(old_lp, _stack([self.engine_is.engine[i] for i in part], width)
                                                      .to(old_lp.device, old_lp.dtype), mask, counts)
            for k, v in is_stats.items():
                self.totals[k] = self.totals.get(k, 0.0) + float(v)
        loss, stats, terms = self.loss.compute(LossInputs(logp, old_lp, mask, adv, ref_lp, weight,
                                                          ent[-1] if needs_entropy else None), counts)
        sides = clip_sides(self.loss, logp, old_lp, mask, adv, counts)
        stats = stats | {k: v for k, v in sides.items() if k not in stats}
        # a sharded model averages the gradients over processes; the loss is already normalised by the whole batch
        (loss * self.fwd.dist.grad_scale).backward()
        if first_epoch:  # the controllers' per-response losses: reductions of the loss's own terms
            self.sig_pg[part] = per_response_mean(terms.pg, mask).double().cpu().numpy()
            if terms.kl is not None:
                self.sig_kl[part] = per_response_mean(terms.kl, mask).double().cpu().numpy()
        for k, v in stats.items():
            self.totals[k] = self.totals.get(k, 0.0) + float(v)
        self.totals["loss"] = self.totals.get("loss", 0.0) + float(loss.detach())


_ENT_SUM, _ENT_TOKENS = "_entropy_sum", "_entropy_tokens"  # summed over micro-batches and processes, then divided


@dataclass(frozen=True)
class EngineIS:
    """Truncated importance sampling for the engine-trainer mismatch (``optim.engine_is_mode``; TRL's
    ``vllm_importance_sampling_correction``): the rollouts were sampled by the engine, whose log-probs differ from the
    trainer's (another kernel, precision, or weights a sync behind), so each token's PG term is weighted by
    ``w = exp(old_logp - engine_logp)`` (a ``sequence_*`` mode: one weight per row, ``exp`` of the row's summed
    difference), then bounded: ``*_truncate`` clamps ``w`` to ``[min, max]``, ``*_mask`` sets it to 0 outside.
    ``old_logp`` is the trainer's behaviour log-prob (its current one, detached, for a one-step update), as TRL's."""

    mode: str
    lo: float | None
    hi: float | None
    engine: list[torch.Tensor]  # (N,) the engine's sampled-token log-probs per row

    @classmethod
    def of(cls, cfg: OptimConfig, roll: RolloutBatch) -> EngineIS | None:
        """The correction ``cfg`` asks for (None when off); the rollouts must carry the engine's log-probs."""
        if cfg.engine_is_mode == "none":
            return None
        if roll.logprobs is None:
            raise ValueError(f"optim.engine_is_mode={cfg.engine_is_mode} needs the engine's log-probs, and the "
                             "rollouts carry none (the trainer asks the engine for them when the mode is set)")
        return cls(cfg.engine_is_mode, cfg.engine_is_min, cfg.engine_is_max,
                   [torch.as_tensor(lp, dtype=torch.float32) for lp in roll.logprobs])

    def weights(self, old_lp: torch.Tensor, engine_lp: torch.Tensor, mask: torch.Tensor,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(w, stats)`` of one micro-batch: ``w`` ``(B, T)`` or ``(B, 1)`` (detached); ``stats``: sums over the
        mini-batch's valid tokens of ``engine_is_mean`` (the bounded weight) and ``engine_is_bounded_frac`` (tokens
        whose weight the bound changed)."""
        with torch.no_grad():
            diff = torch.nan_to_num((old_lp - engine_lp) * mask, nan=0.0)  # an unknown engine log-prob: weight 1
            if self.mode.startswith("sequence"):
                diff = diff.sum(dim=-1, keepdim=True)
            w = torch.exp(diff.clamp(max=20.0))
            lo = -math.inf if self.lo is None else self.lo
            hi = math.inf if self.hi is None else self.hi
            out = (w < lo) | (w > hi)
            w = w.clamp(min=self.lo, max=self.hi) if self.mode.endswith("truncate") else w.masked_fill(out, 0.0)
            valid, tokens = mask != 0, float(counts.tokens)
            stats = {"engine_is_mean": (w.expand_as(old_lp) * valid).sum() / tokens,
                     "engine_is_bounded_frac": (out.expand_as(old_lp) & valid).sum() / tokens}
        return w, stats


def clip_sides(loss: Loss, logp: torch.Tensor, old_lp: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor,
               counts: BatchCounts) -> dict[str, torch.Tensor]:
    """``clip_frac_low`` / ``clip_frac_high`` of one micro-batch over the mini-batch's valid tokens (TRL's
    ``clip_ratio/low_mean`` / ``high_mean``): token ratio ``rho = exp(logp - old_logp)`` below ``1 - clip_low``
    with ``A < 0`` / above ``1 + clip_high`` with ``A > 0``, the two ways a token's clipped branch is active (with
    no dual clip they split the loss's ``clip_frac``). Empty for a loss without ``clip_low`` and ``clip_high``."""
    low, high = getattr(loss, "clip_low", None), getattr(loss, "clip_high", None)
    if low is None or high is None:
        return {}
    with torch.no_grad():
        ratio = torch.exp((logp.detach() - old_lp).clamp(-20.0, 20.0))  # as the loss clamps it
        a, valid = adv.unsqueeze(-1), mask != 0
        denom = float(counts.tokens)
        return {"clip_frac_low": ((ratio < 1.0 - low) & (a < 0) & valid).sum().to(logp.dtype) / denom,
                "clip_frac_high": ((ratio > 1.0 + high) & (a > 0) & valid).sum().to(logp.dtype) / denom}


def _by_row(n: int, mine: np.ndarray, lps: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """Per-row log-probs of ``mine`` placed at their row indices (None for rows of other processes)."""
    out: list[torch.Tensor | None] = [None] * n
    for k, i in enumerate(mine):
        out[int(i)] = lps[k]
    return out


def _stack(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    buf = torch.zeros(len(rows), width, device=rows[0].device if rows else None)  # where the rows are
    for j, r in enumerate(rows):
        buf[j, : len(r)] = r
    return buf
