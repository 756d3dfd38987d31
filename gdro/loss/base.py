"""The loss seam: the ``Loss`` Protocol of every ``conf/loss`` option, and what the update hands a loss.

GRPO-like methods disagree on two axes, each a config group of its own (as verl's ``adv_estimator`` and
``policy_loss``), so a new one is one file and one option file:

* the advantages (``advantage=<name>``, gdro/loss/advantage_estimators.py): the step's ``(N,)`` advantages from the
  rewards and each response's group (prompt), over *ragged* groups (Eq. 3 for GRPO). The trainer multiplies them by
  Prompt-GDRO's positive multipliers (Eq. 16) and hands them to the loss as ``LossInputs.adv``;
* the loss (``loss=<name>``), ``compute(batch, counts)``: the loss of one micro-batch (``LossInputs``), divided by
  denominators taken from the whole mini-batch's ``BatchCounts``, so that the micro-batch losses, gradients and
  statistics *sum* to the mini-batch's (gradient accumulation, and processes that each forward a part of the
  mini-batch). A loss reads the advantages it is given; it computes none (before #50 each loss had an
  ``advantages`` method: gdro.compose.build refuses a loss class that still defines one, which nothing would call).

Every loss in gdro is linear in the advantages for a positive factor (``max``/``min`` commute with it), so the
trainer recovers the unweighted per-response loss by dividing by the multiplier (``StepFeedback.pg_loss``).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch

from gdro.loss.advantage_estimators import AdvantageEstimator
from gdro.loss.terms import TokenTerms

__all__ = ["BatchCounts", "Loss", "LossInputs", "Objective"]


class LossInputs(NamedTuple):
    """One micro-batch's inputs: token log-probs ``(B, T)`` of the sampled tokens, ``mask`` ``(B, T)`` of
    valid tokens, and the ``(B,)`` advantages (already multiplied by any Prompt-GDRO multipliers)."""

    logp: torch.Tensor  # current policy π_θ, with gradient
    old_logp: torch.Tensor  # behaviour policy π_old, detached (logp.detach() for a one-optimiser-step update)
    mask: torch.Tensor
    adv: torch.Tensor
    ref_logp: torch.Tensor | None = None  # reference π_ref (detached); None when no reference model is loaded
    # detached per-token factor of the PG term, (B, T) or (B, 1) (the engine-trainer importance weight, TRL's
    # importance_sampling_ratio: optim.engine_is_mode); None: 1. It multiplies the PG term only, never the KL.
    token_weight: torch.Tensor | None = None
    # detached (B, T) policy entropy of each position (at the sampling temperature), read only by a loss with
    # top_entropy_quantile < 1 (gdro/loss/options.py); None: not recorded
    entropy: torch.Tensor | None = None


class BatchCounts(NamedTuple):
    """Counts over a whole mini-batch (every row of it, on every process): the denominators a loss divides
    each micro-batch by. Each is at least 1, so an empty mini-batch aggregates to 0 rather than NaN."""

    rows: int  # responses
    responses: int  # responses with at least one valid token
    tokens: int  # valid tokens
    # The step's whole rollout batch (TRL's "generation batch"), which optim.mini_batches > 1 cuts into several
    # mini-batches: its responses and valid tokens. 0: not given, the mini-batch is the whole step's batch.
    step_rows: int = 0
    step_tokens: int = 0

    @classmethod
    def of(cls, lengths: np.ndarray, step_lengths: np.ndarray | None = None) -> BatchCounts:
        """The counts of a mini-batch whose responses have ``lengths`` valid tokens each, out of a step whose
        responses have ``step_lengths`` (None: the mini-batch is the step's whole batch)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        step = lengths if step_lengths is None else np.asarray(step_lengths, dtype=np.int64)
        return cls(max(len(lengths), 1), max(int((lengths > 0).sum()), 1), max(int(lengths.sum()), 1),
                   max(len(step), 1), max(int(step.sum()), 1))

    def step_token_share(self) -> float:
        """The step's valid tokens times this mini-batch's share of its responses, ``step_tokens · rows /
        step_rows``: TRL's ``num_items_in_batch / steps_per_generation`` (the ``dapo``/``cispo`` normaliser of one
        optimiser step; equal mini-batches). The mini-batch's own ``tokens`` when the step is one mini-batch or
        the step's counts were not given."""
        if self.step_rows <= 0:
            return float(self.tokens)
        return max(self.step_tokens * self.rows / self.step_rows, 1.0)

    def denom(self, agg: str) -> float:
        """The mini-batch's denominator of ``aggregate(., ., agg)`` (``aggregation_denom`` of its mask)."""
        by_mode = {"token-mean": self.tokens, "seq-mean-token-mean": self.responses,
                   "seq-mean-token-sum": self.rows}
        if agg not in by_mode:
            raise ValueError(f"agg must be one of {tuple(by_mode)}, got {agg!r}")
        return float(by_mode[agg])


@runtime_checkable
class Loss(Protocol):
    """A policy loss (``loss=<name>``: ``conf/loss/<name>.yaml``; docs/extending.md), over given advantages.

    ``beta_kl`` > 0 makes the run load a frozen reference model and pass its log-probs as
    ``LossInputs.ref_logp``; with 0 none is loaded and rows with zero advantage may skip the forward
    (``optim.skip_zero_adv``), so a loss's gradient must be zero at A = 0 when its ``beta_kl`` is 0.
    """

    beta_kl: float  # coefficient of the KL to π_ref in the loss (0: no reference model)

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """``(loss, stats, terms)`` of one micro-batch of a mini-batch with ``counts``.

        ``loss``: the scalar to backpropagate. ``stats``: detached scalars logged as ``train/<name>`` (summed
        over the micro-batches, averaged over the optimiser steps): ``pg_loss`` and ``kl`` at least.
        ``terms``: the detached per-token terms the loss reduced (``TokenTerms``); the controllers'
        per-response signals are their token means (``per_response_mean``).
        """
        ...


class Objective(NamedTuple):
    """What a step optimises, its two axes (verl: ``adv_estimator`` and ``policy_loss``): the advantage estimator
    (``advantage=<name>``, gdro/loss/advantage_estimators.py) and the loss that reads its advantages (``loss=<name>``)."""

    advantage: AdvantageEstimator  # (rewards, group_index, num_groups) -> (N,) advantages
    loss: Loss
