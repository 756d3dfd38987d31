"""VESPO, ``loss=vespo``: Variational Sequence-Level Soft Policy Optimization (arXiv 2602.10693), as TRL 1.16 computes
it (``loss_type="vespo"``, ``importance_sampling_level="token"``): a smooth, asymmetric Gamma weight of the
*sequence* importance ratio, in place of a clip, on a REINFORCE term.

    log w_i = clamp(sum_t m_{i,t} clamp(logp_t - old_logp_t, -20, 20), log 1e-8, 20)    (a sum, not GSPO's mean)
    phi_i   = exp(lam + k log w_i - lam w_i) = e^lam w_i^k e^(-lam w_i)       phi(1) = 1; detached, NaN/inf -> 0
    (k, lam) = (k_pos, lambda_pos) if A_i >= 0 else (k_neg, lambda_neg)             (lam clamped to >= 1e-4)
    pg_t    = -phi_i A_i logp_t                        d pg / d logp_t = -phi_i A_i: every token keeps its gradient
    loss    = sum_{i,t} m_{i,t} (pg_t + beta_kl kl_t) / (N_step · rows / rows_step)        loss=dapo's normaliser

``k`` down-weights responses whose ratio fell below 1 (w^k), ``lam`` those above it (e^(-lam w)); on-policy (w = 1)
phi = 1 and the gradient is REINFORCE's. As CISPO's, the loss's *value* (and the per-response ``pg`` term the
controllers read) is ``-phi A logp``: TRL's value; only its gradient is VESPO's estimator.

The engine importance weight (``optim.engine_is_mode``, TRL's vLLM ``importance_sampling_ratio``) does not multiply
the PG term: as in TRL, its log (clamped to [log 1e-8, 20]) is added to ``log w_i``, over the response's valid tokens
(TRL: over all positions, where padded ones hold weight 1 unless ``engine_is_min`` > 1). TRL accepts only its
``token_*`` modes for VESPO; gdro also takes a ``sequence_*`` mode's one weight per response (its log added once).

The normaliser is loss=dapo's (TRL gives ``vespo``, ``dapo`` and ``cispo`` one branch): gdro/loss/dapo.py.
TRL's ``torch.where`` on Python floats makes k and lam float32; gdro keeps them in the log-probs' dtype (equal for
values a float32 holds exactly, as the defaults).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.terms import TokenTerms
from gdro.loss.trl import TRLLoss, token_ratio

__all__ = ["VESPOLoss", "gamma_weights"]

_LOG_W_MIN = math.log(1e-8)  # TRL's lower clamp of log w (the original implementation's w >= 1e-8)


def gamma_weights(batch: LossInputs, *, k_pos: float, lambda_pos: float, k_neg: float,
                  lambda_neg: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(phi, w)``, each ``(B, 1)`` and detached: VESPO's weight and the sequence ratio it is a function of."""
    with torch.no_grad():
        m = batch.mask.to(batch.logp.dtype)
        log_ratio = (batch.logp.detach() - batch.old_logp).clamp(-20.0, 20.0)
        seq = (log_ratio * m).sum(dim=-1, keepdim=True)
        if batch.token_weight is not None:
            log_is = torch.log(batch.token_weight.detach().to(seq.dtype)).clamp(_LOG_W_MIN, 20.0)
            seq = seq + (log_is * m if log_is.shape[1] == m.shape[1] else log_is).sum(dim=-1, keepdim=True)
        log_w = seq.clamp(_LOG_W_MIN, 20.0)
        w = torch.exp(log_w)
        nonneg = batch.adv.to(seq.dtype).unsqueeze(-1) >= 0
        k = torch.where(nonneg, torch.tensor(k_pos, dtype=seq.dtype, device=seq.device),
                        torch.tensor(k_neg, dtype=seq.dtype, device=seq.device))
        lam = torch.where(nonneg, torch.tensor(lambda_pos, dtype=seq.dtype, device=seq.device),
                          torch.tensor(lambda_neg, dtype=seq.dtype, device=seq.device)).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * w).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return phi, w


@dataclass(frozen=True)
class VESPOLoss(TRLLoss):
    """The VESPO loss (TRL ``loss_type="vespo"``).

    k_pos / lambda_pos: the Gamma weight's power and decay for A >= 0 (TRL ``vespo_k_pos`` / ``vespo_lambda_pos``,
    2.0 / 3.0); k_neg / lambda_neg: for A < 0 (``vespo_k_neg`` / ``vespo_lambda_neg``, 3.0 / 2.0). k >= 0, lambda
    > 0 (TRL clamps lambda to >= 1e-4; so does gdro). The rest: :class:`gdro.loss.trl.TRLLoss`.
    """

    k_pos: float = 2.0
    lambda_pos: float = 3.0
    k_neg: float = 3.0
    lambda_neg: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("k_pos", "k_neg"):
            value = getattr(self, key)
            if isinstance(value, bool) or not (value >= 0.0 and math.isfinite(value)):
                raise ValueError(f"{key} must be >= 0, got {value}")
        for key in ("lambda_pos", "lambda_neg"):
            value = getattr(self, key)
            if isinstance(value, bool) or not (value > 0.0 and math.isfinite(value)):
                raise ValueError(f"{key} must be > 0, got {value}")

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """The VESPO loss of one micro-batch over the step's token share (``BatchCounts.step_token_share``).

        Stats: ``pg_loss`` and ``kl``; ``phi_mean`` (the token mean of phi; TRL's ``vespo/phi_seq_mean`` is its
        mean over responses) and ``ratio_mean``, over the mini-batch's valid tokens.
        """
        ratio = token_ratio(batch)
        phi, _ = gamma_weights(batch, k_pos=self.k_pos, lambda_pos=self.lambda_pos, k_neg=self.k_neg,
                               lambda_neg=self.lambda_neg)
        pg = -phi * batch.adv.to(batch.logp.dtype).unsqueeze(-1) * batch.logp
        return self.reduce(pg, batch, counts, agg="token-mean", denom=counts.step_token_share(),
                           token_stats={"phi_mean": phi.expand_as(ratio), "ratio_mean": ratio}, engine_weight=False)
