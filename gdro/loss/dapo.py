"""DAPO's token-level loss, ``loss=dapo``: TRL 1.16's ``loss_type="dapo"`` (its default; Yu et al. 2025, arXiv
2503.14476, Eq. 8's token-level sum).

    rho_t = exp(logp_t - old_logp_t)
    pg_t  = max(-A_i rho_t, -A_i clip(rho_t, 1 - clip_low, 1 + clip_high))      (capped at -A_i clip_ratio_c)
    loss  = sum_{i,t} m_{i,t} (pg_t + beta_kl kl_t) / (N_step · rows / rows_step)

The normaliser. TRL divides each micro-batch's token sum by ``num_items_in_batch`` (the valid tokens of the whole
*generation batch*, gathered over processes) over ``num_processes`` times ``gradient_accumulation_steps /
steps_per_generation``; summed over the accumulation window and averaged over processes, one optimiser step's
loss is its token sum over ``N_gen / k``, k = ``steps_per_generation / gradient_accumulation_steps`` optimiser
steps per generation batch. In gdro the generation batch is the step's rollouts and k is ``optim.mini_batches``:
the normaliser is ``BatchCounts.step_token_share()`` = the step's valid tokens times the mini-batch's share of the
step's responses (= N_gen / k for equal mini-batches; ``np.array_split`` may differ by one row), the same for every
micro-batch and process of the mini-batch, so their losses and gradients sum to the mini-batch's. With one
mini-batch (the default) it is the step's valid tokens: a token mean over the whole batch. ``ppo_epochs`` (TRL
``num_iterations``) reuses the same normaliser, as TRL does.

The update (gdro/policy/update.py) passes each mini-batch's counts with the step's lengths
(``BatchCounts.of(lengths[mb], step_lengths=lengths)``), so TRL's split holds for any ``optim.mini_batches``
(tests/test_trl_losses.py on the counts, tests/test_update_options.py on the update). With
``optim.mask_truncated_completions`` a masked completion counts 0 tokens there, as TRL's zeroed completion mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.terms import TokenTerms, check_hyper, grpo_loss
from gdro.loss.trl import TRLLoss

__all__ = ["DAPOLoss"]


@dataclass(frozen=True)
class DAPOLoss(TRLLoss):
    """The clipped surrogate as a token sum over the step's tokens (TRL ``loss_type="dapo"``).

    clip_low / clip_high: TRL ``epsilon`` / ``epsilon_high``. clip_ratio_c: TRL ``delta`` (INTELLECT-2's cap of
    the unclipped ratio; it binds for A < 0, as verl's dual clip; refused below ``1 + clip_high``, where TRL's would
    cap A > 0 tokens too). The rest: :class:`gdro.loss.trl.TRLLoss`.
    """

    clip_low: float = 0.2
    clip_high: float = 0.28
    clip_ratio_c: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_hyper(clip_low=self.clip_low, clip_high=self.clip_high, beta_kl=self.beta_kl,
                    kl_estimator=self.kl_estimator, clip_ratio_c=self.clip_ratio_c)

    def normaliser(self, counts: BatchCounts) -> float:
        """TRL's ``num_items_in_batch`` for one optimiser step: the step's tokens times the mini-batch's share."""
        return counts.step_token_share()

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """The token sums of the clipped surrogate and the KL over ``normaliser(counts)``; ``clip_frac`` and
        ``ratio_mean`` over the mini-batch's valid tokens (as GRPO's)."""
        return grpo_loss(batch.logp, batch.old_logp, batch.adv, batch.mask, clip_low=self.clip_low,
                         clip_high=self.clip_high, beta_kl=self.beta_kl, ref_logp=batch.ref_logp,
                         kl_estimator=self.kl_estimator, agg="token-mean", denom=self.normaliser(counts),
                         token_denom=float(counts.tokens), clip_ratio_c=self.clip_ratio_c,
                         token_weight=batch.token_weight, gate=self.gate(batch),
                         kl_weight=self.token_kl_weight(batch))
