"""LUSPO, ``loss=luspo``: Length-Unbiased Sequence Policy Optimization (arXiv 2602.05261), as TRL 1.16 computes it
(``loss_type="luspo"``): GSPO's sequence-level clipped term (gdro/loss/gspo.py), each response's term scaled by its
length, then the mean over the responses.

    log s_i = mean_t m_{i,t} (logp_t - old_logp_t)             level: sequence (the paper's; TRL
                                                               importance_sampling_level="sequence")
    l_i     = -min(min(s_i, clip_ratio_c) A_i, clip(s_i, 1 - clip_low, 1 + clip_high) A_i)     TRL's surrogate
    loss    = sum_i sum_t m_{i,t} (l_i + beta_kl kl_t) / B       = mean_i (|y_i| l_i + beta_kl sum_t kl_t)

B counts every response of the mini-batch (TRL: of each micro-batch, then divided by its gradient accumulation
steps: equal for micro-batches of equal size), a response without a valid token included (it adds 0). With
``level: token`` the ratio and its clip are per token (TRL's default ``importance_sampling_level``, which TRL warns
against for luspo): ``loss = mean_i sum_t m_{i,t} (pg_t + beta_kl kl_t)``, pg_t loss=grpo's token surrogate.

Where GSPO's ``seq-mean-token-mean`` weighs every response the same, LUSPO weighs each by its length, so a long
response's update is not shrunk by it (the paper's length bias of GSPO). The clip range defaults to GSPO's (TRL's
GSPO recipe: 3e-4 / 4e-4), since the sequence ratio is a geometric mean of token ratios. ``clip_ratio_c`` is TRL's
``delta``, refused below ``1 + clip_high`` (where TRL's delta also caps A > 0; above it it is verl's dual clip).
The sequence log-ratio is clamped to [-20, 20] (as GSPO's; TRL does not clamp).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.gspo import sequence_log_ratio
from gdro.loss.terms import TokenTerms, check_hyper
from gdro.loss.trl import TRLLoss, token_ratio

__all__ = ["LUSPO_LEVELS", "LUSPOLoss"]

LUSPO_LEVELS = ("sequence", "token")


@dataclass(frozen=True)
class LUSPOLoss(TRLLoss):
    """The LUSPO loss (TRL ``loss_type="luspo"``).

    clip_low / clip_high: the ratio's clip range ``[1 - clip_low, 1 + clip_high]`` (TRL ``epsilon`` /
    ``epsilon_high``; GSPO's 3e-4 / 4e-4 by default). clip_ratio_c: TRL ``delta`` (None: off). level: ``sequence``
    (GSPO's ratio, the paper's) or ``token`` (TRL ``importance_sampling_level``). The rest:
    :class:`gdro.loss.trl.TRLLoss`.
    """

    clip_low: float = 3e-4
    clip_high: float = 4e-4
    clip_ratio_c: float | None = None
    level: str = "sequence"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_hyper(clip_low=self.clip_low, clip_high=self.clip_high, beta_kl=self.beta_kl,
                    kl_estimator=self.kl_estimator, clip_ratio_c=self.clip_ratio_c)
        if self.level not in LUSPO_LEVELS:
            raise ValueError(f"level must be one of {LUSPO_LEVELS}, got {self.level!r}")

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """The LUSPO loss of one micro-batch over the mini-batch's responses (``BatchCounts.rows``).

        Stats: ``pg_loss`` and ``kl``; ``clip_frac`` (valid tokens whose ratio, the sequence's or their own, is on a
        clipped branch: no gradient) and ``ratio_mean`` (the token ratios), over the mini-batch's valid tokens.
        """
        tok = token_ratio(batch)
        if self.level == "sequence":
            ratio = torch.exp(sequence_log_ratio(batch.logp, batch.old_logp, batch.mask)).unsqueeze(-1)  # (B, 1)
        else:
            ratio = tok
        a = batch.adv.to(ratio.dtype).unsqueeze(-1)
        capped = ratio if self.clip_ratio_c is None else ratio.clamp(max=self.clip_ratio_c)
        unclipped, clipped = capped * a, ratio.clamp(1.0 - self.clip_low, 1.0 + self.clip_high) * a
        pg = -torch.minimum(unclipped, clipped)
        on_clip = (clipped < unclipped).to(ratio.dtype).expand_as(tok)
        return self.reduce(pg, batch, counts, agg="seq-mean-token-sum", denom=float(counts.rows),
                           token_stats={"clip_frac": on_clip, "ratio_mean": tok}, kl_ratio=ratio)
