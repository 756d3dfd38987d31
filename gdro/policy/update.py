"""The policy update (paper Eq. 4–7 for GRPO): clipped-surrogate steps on a ragged rollout batch.

How each forward runs (layouts, micro-batches, processes) is :class:`gdro.policy.forward.Forward`'s; the loss
is the run's :class:`gdro.loss.Loss` (``loss=grpo|gspo|dr-grpo``). This module holds the schedule: epochs,
mini-batches, gradient accumulation with mini-batch-wide denominators (:class:`gdro.loss.BatchCounts`),
clipping, and the per-response losses the controllers read.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch

from gdro.loss import BatchCounts, Loss, LossInputs, per_response_mean
from gdro.models.lora import reference_model
from gdro.policy.config import OptimConfig
from gdro.policy.forward import Forward
from gdro.policy.kernels import recording_entropy
from gdro.rollout.base import RolloutBatch


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

    Across processes (``fwd.dist``, gdro.distributed): every process holds the whole batch but forwards and
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
    skip = optim_cfg.skip_zero_adv and loss.beta_kl == 0
    step = _Update(model, optimizer, roll, adv, loss, fwd, mine, old, ref)
    model.train()
    for epoch in range(optim_cfg.ppo_epochs):
        order = np.arange(n) if single_step else rng.permutation(n)
        for mb in np.array_split(order, optim_cfg.mini_batches):
            if len(mb) == 0:
                continue
            rows = mb[adv[mb].abs().numpy() > 0] if skip else mb
            step.mini_batch(mb, rows, first_epoch=epoch == 0, grad_clip=optim_cfg.grad_clip)
    scheduler.step()
    sig_pg, sig_kl, totals = fwd.dist.reduce_update(step.sig_pg, step.sig_kl, step.totals)
    n_steps = optim_cfg.ppo_epochs * optim_cfg.mini_batches
    ent_sum, ent_tokens = totals.pop(_ENT_SUM, 0.0), totals.pop(_ENT_TOKENS, 0.0)
    out: dict[str, float | None] = {f"train/{k}": v / n_steps for k, v in totals.items()}
    out["train/entropy"] = ent_sum / ent_tokens if ent_tokens else None  # None: no token was forwarded
    if ref is None:
        out["train/kl"] = None  # no reference model (beta_kl = 0): KL to π_ref is not measured
    out["train/grad_norm"] = float(np.mean(step.grad_norms)) if step.grad_norms else 0.0
    out["train/lr"] = float(scheduler.get_last_lr()[0])
    out["train/rows_in_update"] = float(n if not skip else int((adv.abs() > 0).sum()))
    out["time/ref_s"] = t_ref  # the reference model's forward (0 without one)
    return out, ResponseLosses(pg=sig_pg, kl=sig_kl)


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
        counts = BatchCounts.of(self.roll.lengths[mb])
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
        with recording_entropy() if first_epoch else nullcontext() as ent:
            logp, mask = self.fwd.logprobs(self.model, self.roll, part)
        if ent:  # the first epoch's forwards: each row once
            self.totals[_ENT_SUM] = self.totals.get(_ENT_SUM, 0.0) + float((ent[-1] * mask).sum())
            self.totals[_ENT_TOKENS] = self.totals.get(_ENT_TOKENS, 0.0) + float(mask.sum())
        width = logp.shape[1]
        old_lp = logp.detach() if self.old is None else _stack([self.old[i] for i in part], width)
        ref_lp = None if self.ref is None else _stack([self.ref[i] for i in part], width)
        adv = self.adv[part].to(logp.device, logp.dtype)
        loss, stats, terms = self.loss.compute(LossInputs(logp, old_lp, mask, adv, ref_lp), counts)
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
