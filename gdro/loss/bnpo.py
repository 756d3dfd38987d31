"""BNPO, ``loss=bnpo``: TRL 1.16's ``loss_type="bnpo"``, the clipped surrogate's token mean over the batch.

    pg_t = max(-A_i rho_t, -A_i clip(rho_t, 1 - clip_low, 1 + clip_high))       as loss=dapo
    loss = sum_{i,t} m_{i,t} (pg_t + beta_kl kl_t) / sum_{i,t} m_{i,t}          over the mini-batch

The normaliser. TRL divides each micro-batch's token sum by that *micro-batch's* valid tokens (its "local batch")
and by ``gradient_accumulation_steps``: an optimiser step's loss is the mean of its micro-batches' token means, so
it depends on how the rows are cut (TRL's docs say so). gdro's micro-batches are a memory detail
(``optim.micro_batch_size``, the forward's plan) whose losses must sum to the mini-batch's, so gdro divides by the
mini-batch's valid tokens (``BatchCounts.tokens``): TRL's bnpo with one micro-batch per optimiser step on one
process (``gradient_accumulation_steps = 1``). It can differ from ``loss=dapo`` only with ``optim.mini_batches >
1`` (dapo: the step's tokens over k; bnpo: each mini-batch's own tokens); it is ``loss=grpo``'s token-mean
aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass

from gdro.loss.base import BatchCounts
from gdro.loss.dapo import DAPOLoss

__all__ = ["BNPOLoss"]


@dataclass(frozen=True)
class BNPOLoss(DAPOLoss):
    """The clipped surrogate's token mean over the mini-batch (TRL ``loss_type="bnpo"``); hyperparameters as
    :class:`gdro.loss.dapo.DAPOLoss`'s."""

    def normaliser(self, counts: BatchCounts) -> float:
        """The mini-batch's valid tokens (TRL: the micro-batch's; see the module docstring)."""
        return float(counts.tokens)
