"""Dr. GRPO, ``loss=dr-grpo``: GRPO Done Right (Liu et al. 2025, "Understanding R1-Zero-Like Training: A
Critical Perspective", arXiv 2503.20783), as TRL computes it with ``loss_type="dr_grpo"``.

Deltas from GRPO (gdro/loss/grpo.py), the two biases the paper removes:

    A_i  = r_i - mean_g r                     advantage=dr-grpo: no division by the group std (question-level bias)
    loss = sum_{i,t} m_{i,t} (pg_{i,t} + beta_kl kl_{i,t}) / (B L)      a constant normaliser (length bias)

with GRPO's token-level clipped surrogate ``pg`` (Eq. 4-5), ``B`` the responses of the mini-batch (all of
them, with or without valid tokens) and ``L = max_new_tokens``, the completion length limit (TRL:
``max_completion_length``). A long response's tokens weigh what a short one's do, and the scale of the loss
does not depend on which responses a micro-batch holds: every micro-batch divides by its mini-batch's B L.

The advantage is its own config group since #50: ``loss=dr-grpo`` selects ``advantage=dr-grpo`` (conf/loss/dr-grpo.yaml's
defaults list), so it means both halves as before; ``loss=dr-grpo advantage=<other>`` keeps the normaliser only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.options import LossOptions
from gdro.loss.terms import TokenTerms, check_hyper, grpo_loss

__all__ = ["DrGRPOLoss"]


@dataclass(frozen=True)
class DrGRPOLoss(LossOptions):
    """The Dr. GRPO loss; hyperparameters as in ``conf/loss/dr-grpo.yaml``.

    max_new_tokens: ``L`` of the normaliser ``B L`` (the run's ``model.max_new_tokens``). clip_low /
    clip_high / clip_ratio_c / beta_kl / kl_estimator: as in GRPO. No ``agg`` (the normaliser is the method).
    use_bias_correction_kl / off_policy_mask_threshold / top_entropy_quantile: gdro/loss/options.py (off).
    """

    max_new_tokens: int
    clip_low: float = 0.2
    clip_high: float = 0.28
    beta_kl: float = 0.001
    kl_estimator: str = "low_var_kl"
    clip_ratio_c: float | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        check_hyper(clip_low=self.clip_low, clip_high=self.clip_high, beta_kl=self.beta_kl,
                    kl_estimator=self.kl_estimator, clip_ratio_c=self.clip_ratio_c)
        self.check_options()

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """The token sums of the clipped surrogate and of the KL, each over the mini-batch's ``B L``.

        Stats as GRPO's: ``pg_loss`` and ``kl`` (over ``B L``), ``clip_frac`` and ``ratio_mean`` (over the
        valid tokens).
        """
        return grpo_loss(batch.logp, batch.old_logp, batch.adv, batch.mask, clip_low=self.clip_low,
                         clip_high=self.clip_high, beta_kl=self.beta_kl, ref_logp=batch.ref_logp,
                         kl_estimator=self.kl_estimator, agg="seq-mean-token-sum",
                         denom=float(counts.rows * self.max_new_tokens), token_denom=float(counts.tokens),
                         clip_ratio_c=self.clip_ratio_c, token_weight=batch.token_weight, gate=self.gate(batch),
                         kl_weight=self.token_kl_weight(batch))
