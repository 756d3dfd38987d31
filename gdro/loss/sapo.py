"""SAPO, ``loss=sapo``: Soft Adaptive Policy Optimization (arXiv 2511.20347), as TRL 1.16 computes it
(``loss_type="sapo"``): a smooth gate in place of the hard clip, with a temperature per sign of the advantage.

    rho_t  = exp(logp_t - old_logp_t)
    tau_i  = tau_pos if A_i > 0 else tau_neg
    pg_t   = -A_i (4 / tau_i) sigmoid(tau_i (rho_t - 1))        d pg / d logp = -A_i rho_t 4 s (1 - s), s = sigmoid
    loss   = sum_i (sum_t m_{i,t} (pg_t + beta_kl kl_t) / max(sum_t m_{i,t}, 1)) / B

At rho = 1 the gradient is REINFORCE's (``-A``); away from it the gate decays smoothly (faster for the larger
temperature: ``tau_neg > tau_pos`` damps negative updates more), so no token is cut off at an edge.

The normaliser. TRL's ``sapo`` (like its ``grpo``) takes each response's token mean, then the mean over the
micro-batch's responses, *all* of them (a response without valid tokens adds 0 and still counts), and divides by
``gradient_accumulation_steps``. gdro divides the sum of the token means by the mini-batch's responses
(``BatchCounts.rows``), so that its micro-batches sum to the mini-batch's loss: TRL's with one micro-batch per
optimiser step (``gradient_accumulation_steps = 1``), or micro-batches of equal size (TRL's mean of means is
then the same). Note ``seq-mean-token-mean`` elsewhere in gdro (``BatchCounts.denom``) counts only responses
with a valid token; SAPO uses ``rows``, as TRL. TRL builds its temperatures with ``torch.where`` on two Python
floats, i.e. in float32 (1.05 is 1.0499999523 there); gdro keeps them in the log-probs' dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.terms import TokenTerms
from gdro.loss.trl import TRLLoss, token_ratio

__all__ = ["SAPOLoss"]


@dataclass(frozen=True)
class SAPOLoss(TRLLoss):
    """The SAPO loss (TRL ``loss_type="sapo"``).

    tau_pos / tau_neg: the gate's temperatures for A > 0 and A <= 0 (TRL ``sapo_temperature_pos`` /
    ``sapo_temperature_neg``, 1.0 / 1.05). The rest: :class:`gdro.loss.trl.TRLLoss`.
    """

    tau_pos: float = 1.0
    tau_neg: float = 1.05

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("tau_pos", "tau_neg"):
            value = getattr(self, key)
            if not (value > 0.0 and math.isfinite(value)):
                raise ValueError(f"{key} must be > 0, got {value}")

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """The SAPO loss of one micro-batch over the mini-batch's responses (``BatchCounts.rows``).

        Stats: ``pg_loss`` and ``kl`` (as the loss aggregates them); ``gate_mean`` (the token mean of the
        gradient's gate ``4 s (1 - s)``, 1 on-policy) and ``ratio_mean``, over the mini-batch's valid tokens.
        """
        ratio = token_ratio(batch)
        a = batch.adv.to(ratio.dtype).unsqueeze(-1)
        tau = torch.where(a > 0, torch.tensor(self.tau_pos, dtype=ratio.dtype, device=ratio.device),
                          torch.tensor(self.tau_neg, dtype=ratio.dtype, device=ratio.device))
        soft = torch.sigmoid(tau * (ratio - 1.0))
        pg = -a * soft * (4.0 / tau)
        return self.reduce(pg, batch, counts, agg="seq-mean-token-mean", denom=float(counts.rows),
                           token_stats={"gate_mean": 4.0 * soft * (1.0 - soft), "ratio_mean": ratio})
