"""What the losses of TRL's ``loss_type``s share in gdro (``loss=dapo|bnpo|cispo|sapo|vespo|luspo``): a KL to π_ref
(``beta_kl``), with its checks, the options every loss shares with TRL's trainer (gdro/loss/options.py), and the
reduction of a per-token loss.

TRL 1.16 (``GRPOTrainer._compute_loss``) computes one per-token loss per ``loss_type`` and one normaliser; each
option of gdro is one file (gdro/loss/dapo.py, bnpo.py, cispo.py, sapo.py, vespo.py, luspo.py) that subclasses :class:`TRLLoss` and
writes its ``compute``. Where gdro's batch differs from TRL's (a step's rollouts are TRL's *generation batch*;
gdro's mini-batch is one optimiser step; its micro-batches are a memory detail whose losses must sum to the
mini-batch's), each file says how TRL's normaliser maps onto :class:`gdro.loss.BatchCounts`.

Advantages: the advantage group's since #50 (``advantage=grpo``, the default: ``(r - mean_g) / (std + eps)`` as
``advantage.scale_rewards`` says, TRL's ``scale_rewards``). TRL's own constants are ``advantage.eps=1e-4`` and
``advantage.unbiased_std=true`` (``nanstd``, Bessel); gdro's defaults are GRPO's (1e-6, population std), so that
``loss=grpo`` against ``loss=<trl>`` changes the loss only. The KL is TRL's k3 when ``kl_estimator: low_var_kl`` (gdro clamps its log-ratio to [-20, 20]
and the estimate to [0, 10]; TRL does not), added as ``beta_kl`` times the KL aggregated like the PG term, as
TRL adds ``beta * per_token_kl`` to the per-token loss before it normalises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.options import LossOptions
from gdro.loss.terms import (
    _LOG_RATIO_CLAMP,
    KL_ESTIMATORS,
    TokenTerms,
    _check_2d,
    _check_adv,
    aggregate,
    kl_term,
    weighted,
)

__all__ = ["TRLLoss", "token_ratio"]


def token_ratio(batch: LossInputs) -> torch.Tensor:
    """``(B, T)`` token importance ratios ``exp(logp - old_logp)`` of a checked micro-batch, the log-ratio clamped
    to [-20, 20] as in gdro's other losses (TRL does not clamp; equal wherever |log-ratio| <= 20)."""
    _check_2d("old_logp", batch.old_logp, batch.logp)
    _check_2d("mask", batch.mask, batch.logp)
    _check_adv(batch.adv, batch.logp)
    return torch.exp((batch.logp - batch.old_logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))


@dataclass(frozen=True)
class TRLLoss(LossOptions):
    """The hyperparameters every TRL-style loss of gdro has (a base class: no ``compute``).

    beta_kl / kl_estimator: the KL to π_ref (TRL ``beta``; TRL's estimator is k3, ``low_var_kl``).
    use_bias_correction_kl / off_policy_mask_threshold / top_entropy_quantile: gdro/loss/options.py (off).
    """

    beta_kl: float = 0.001
    kl_estimator: str = "low_var_kl"

    def __post_init__(self) -> None:
        if not (self.beta_kl >= 0.0 and math.isfinite(self.beta_kl)):
            raise ValueError(f"beta_kl must be >= 0, got {self.beta_kl}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        self.check_options()

    def reduce(self, pg: torch.Tensor, batch: LossInputs, counts: BatchCounts, *, agg: str, denom: float,
               token_stats: dict[str, torch.Tensor], kl_ratio: torch.Tensor | None = None,
               engine_weight: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """``(loss, stats, terms)`` from the per-token PG loss ``pg``: ``pg`` (times the options' gate, then the
        engine importance weight unless ``engine_weight`` is False) and the KL (times ``kl_ratio``, default the token
        ratio, when ``use_bias_correction_kl``) aggregated by ``agg`` over ``denom`` (the KL added times
        ``beta_kl``), the stats ``pg_loss``, ``kl`` and each of ``token_stats``'s per-token values' mean over the
        mini-batch's valid tokens."""
        pg = pg.expand_as(batch.logp)  # a (B, 1) sequence term: on each token
        gate = self.gate(batch)
        if gate is not None:
            pg = pg * gate
        if engine_weight:
            pg = weighted(pg, batch.token_weight)
        kl_weight = self.token_kl_weight(batch) if kl_ratio is None else self.kl_weight(kl_ratio)
        pg_loss = aggregate(pg, batch.mask, agg, denom)
        loss, kl, kl_tok = kl_term(pg_loss, batch.logp, batch.ref_logp, batch.mask, beta_kl=self.beta_kl,
                                   kl_estimator=self.kl_estimator, agg=agg, denom=denom, kl_weight=kl_weight)
        with torch.no_grad():
            tokens = float(counts.tokens)
            stats = {"pg_loss": pg_loss.detach(), "kl": kl.detach()}
            stats |= {k: aggregate(v.detach(), batch.mask, "token-mean", tokens) for k, v in token_stats.items()}
        return loss, stats, TokenTerms(pg.detach(), None if kl_tok is None else kl_tok.detach())
