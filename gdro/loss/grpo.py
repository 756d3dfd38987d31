"""GRPO, ``loss=grpo`` (the default): the token-level clipped surrogate with a KL to the frozen initial policy (paper
Eq. 4-7, Appendix A; verl's actor loss with ``use_kl_loss``), over the advantages it is given (``advantage=grpo``, the
default, is Eq. 3: gdro/loss/advantage_estimators.py).

    A_i  = (r_i - mean_g r) / (std_g r + eps)        advantage=grpo, over each prompt's own (ragged) group  (Eq. 3)
    pg_t = max(-A_i rho_t, -A_i clip(rho_t, 1 - clip_low, 1 + clip_high))                       (Eq. 4-5)
    loss = agg(pg) + beta_kl agg(kl)                                                            (Eq. 6)

The terms are gdro/loss/terms.py's (``grpo_loss``); this class binds ``conf/loss/grpo.yaml``'s values.

TRL 1.16's ``loss_type="grpo"`` is ``agg: seq-mean-token-mean`` (each response's token mean, then the mean over the
responses) with ``count_empty_rows: true``: TRL's mean counts every response, a response without a valid token
(``optim.mask_truncated_completions``) included, while gdro's ``seq-mean-token-mean`` (verl's) divides by the
responses that have one. tests/test_trl_losses.py compares both with TRL's ``_compute_loss``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.options import LossOptions
from gdro.loss.terms import TokenTerms, check_hyper, grpo_loss

__all__ = ["GRPOLoss"]


def seq_mean_denom(counts: BatchCounts, agg: str, count_empty_rows: bool) -> float:
    """``counts.denom(agg)``, but all the mini-batch's responses (``rows``, TRL's denominator) for
    ``seq-mean-token-mean`` with ``count_empty_rows``."""
    if count_empty_rows and agg == "seq-mean-token-mean":
        return float(counts.rows)
    return counts.denom(agg)


def check_count_empty_rows(value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"count_empty_rows must be true or false, got {value!r}")


@dataclass(frozen=True)
class GRPOLoss(LossOptions):
    """The GRPO loss (paper Appendix A / the verl defaults the official code uses).

    clip_low / clip_high: asymmetric PPO clip epsilons (0.2 / 0.28). beta_kl: KL loss coefficient (0.001).
    kl_estimator: ``kl_penalty`` name (verl ``low_var_kl``). agg: ``aggregate`` mode (verl ``token-mean``).
    clip_ratio_c: dual-clip cap for A < 0 (None = off; verl's default, used by the official runs, is 3.0).
    The advantages' options (std, eps, scale_rewards) are ``advantage.*`` (``GRPOAdvantage``) since #50.
    count_empty_rows: with ``agg: seq-mean-token-mean``, divide by all the mini-batch's responses (TRL's
    ``grpo``), not only those with a valid token (verl's, the default); no effect with another ``agg``.
    use_bias_correction_kl / off_policy_mask_threshold / top_entropy_quantile: gdro/loss/options.py (off).
    """

    clip_low: float = 0.2
    clip_high: float = 0.28
    beta_kl: float = 0.001
    kl_estimator: str = "low_var_kl"
    agg: str = "token-mean"
    clip_ratio_c: float | None = None
    count_empty_rows: bool = False

    def __post_init__(self) -> None:
        check_hyper(clip_low=self.clip_low, clip_high=self.clip_high, beta_kl=self.beta_kl,
                    kl_estimator=self.kl_estimator, agg=self.agg, clip_ratio_c=self.clip_ratio_c)
        check_count_empty_rows(self.count_empty_rows)
        self.check_options()

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """``grpo_loss`` of one micro-batch, over the mini-batch's ``agg`` denominator and (the token
        statistics) its valid-token count: ``pg_loss``, ``kl``, ``clip_frac`` (tokens clipped),
        ``ratio_mean``."""
        return grpo_loss(batch.logp, batch.old_logp, batch.adv, batch.mask, clip_low=self.clip_low,
                         clip_high=self.clip_high, beta_kl=self.beta_kl, ref_logp=batch.ref_logp,
                         kl_estimator=self.kl_estimator, agg=self.agg,
                         denom=seq_mean_denom(counts, self.agg, self.count_empty_rows),
                         token_denom=float(counts.tokens), clip_ratio_c=self.clip_ratio_c, token_weight=batch.token_weight,
                         gate=self.gate(batch), kl_weight=self.token_kl_weight(batch))
