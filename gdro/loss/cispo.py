"""CISPO, ``loss=cispo``: Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv 2506.13585, Eq. 4-5), as TRL
1.16 computes it (``loss_type="cispo"``).

    rho_t = exp(logp_t - old_logp_t)
    w_t   = sg(min(rho_t, ratio_max))                  the importance weight, capped above and not differentiated
    pg_t  = -w_t A_i logp_t                            a REINFORCE term: every token keeps its gradient
    loss  = sum_{i,t} m_{i,t} (pg_t + beta_kl kl_t) / (N_step · rows / rows_step)        loss=dapo's normaliser

Unlike the PPO clip (loss=grpo, dapo), a token whose ratio leaves the range is not dropped from the gradient: its
weight is capped (``d loss / d logp_t = -w_t A_i``). TRL caps above only, at its ``epsilon_high`` used as the cap
itself (not ``1 + epsilon_high``; TRL recommends 5.0, ScaleRL's ε_max); the paper's lower bound is not applied.

The normaliser is loss=dapo's (TRL gives ``cispo`` and ``dapo`` the same ``num_items_in_batch`` branch): see
gdro/loss/dapo.py for how it maps onto ``BatchCounts`` and where gdro differs.

Note that the loss's *value*, and so the per-response ``pg`` term the controllers read (``train/pg_loss``,
Rollout-GDRO's PG signal), is ``-w A logp``, which grows with the response's negative log-likelihood, not the
``-A rho`` of a surrogate: it is TRL's value; only its gradient is CISPO's estimator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.terms import TokenTerms
from gdro.loss.trl import TRLLoss, token_ratio

__all__ = ["CISPOLoss"]


@dataclass(frozen=True)
class CISPOLoss(TRLLoss):
    """The CISPO loss (TRL ``loss_type="cispo"``).

    ratio_max: the cap of the importance weight (TRL ``epsilon_high`` with ``loss_type="cispo"``). The rest:
    :class:`gdro.loss.trl.TRLLoss`.
    """

    ratio_max: float = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.ratio_max > 0.0 and math.isfinite(self.ratio_max)):
            raise ValueError(f"ratio_max must be > 0, got {self.ratio_max}")

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """The CISPO loss of one micro-batch over the step's token share (``BatchCounts.step_token_share``).

        Stats: ``pg_loss`` and ``kl``; ``cap_frac`` (valid tokens whose weight is capped, either sign of A; TRL's
        ``cispo_clip_ratio`` counts those with A > 0) and ``ratio_mean``, over the mini-batch's valid tokens.
        """
        ratio = token_ratio(batch)
        weight = ratio.clamp(max=self.ratio_max).detach()
        pg = -weight * batch.adv.to(batch.logp.dtype).unsqueeze(-1) * batch.logp
        return self.reduce(pg, batch, counts, agg="token-mean", denom=counts.step_token_share(),
                           token_stats={"cap_frac": (ratio > self.ratio_max).to(ratio.dtype), "ratio_mean": ratio})
