"""GSPO, ``loss=gspo``: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071), as TRL
computes it with ``importance_sampling_level="sequence"``.

Deltas from GRPO (gdro/loss/grpo.py): the importance ratio and its clip are per *sequence*, not per token.

    log s_i = (1/|y_i|) sum_t (logp_{i,t} - old_logp_{i,t})    s_i: geometric mean of y_i's token ratios
    l_i     = max(-A_i s_i, -A_i clip(s_i, 1 - clip_low, 1 + clip_high))       one clipped term per sequence
    loss    = agg(l_i on each valid token of y_i) + beta_kl agg(kl)    seq-mean-token-mean: mean_i l_i

The advantages are those it is given (``advantage=grpo`` by default: Eq. 3 over ragged groups). With ``agg: seq-mean-token-mean`` (TRL's
``loss_type="grpo"``, the paper's 1/G sum over a group's sequences) the gradient of y_i's term is
``-A_i s_i mean_t grad logp_{i,t}`` while it is not clipped: every token of a sequence weighs the same.
s_i = 1 when the update is one optimiser step (π_old = π_θ): the clip acts off-policy, from the second
mini-batch or epoch on (the paper: 4 mini-batches per rollout batch).

TRL's GSPO (``loss_type="grpo"``, ``importance_sampling_level="sequence"``) is ``agg: seq-mean-token-mean`` with
``count_empty_rows: true`` (TRL's mean counts a response without a valid token; gdro's default does not): equal to
TRL's ``_compute_loss`` in tests/test_trl_losses.py. With ``use_bias_correction_kl`` the KL is weighted by s_i, as
TRL broadcasts its sequence weight onto the per-token KL.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gdro.loss.base import BatchCounts, LossInputs
from gdro.loss.grpo import check_count_empty_rows, seq_mean_denom
from gdro.loss.options import LossOptions
from gdro.loss.terms import (
    _LOG_RATIO_CLAMP,
    TokenTerms,
    _check_2d,
    _check_adv,
    aggregate,
    check_hyper,
    kl_term,
    weighted,
)

__all__ = ["GSPOLoss", "sequence_log_ratio"]


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` log of the sequence importance ratio: the masked token mean of ``logp - old_logp`` (0 for a
    response without valid tokens), clamped to [-20, 20] as the token log-ratios are."""
    m = mask.to(logp.dtype)
    diff = torch.where(mask != 0, logp - old_logp, torch.zeros_like(logp)) * m
    return (diff.sum(dim=-1) / m.sum(dim=-1).clamp_min(1.0)).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)


@dataclass(frozen=True)
class GSPOLoss(LossOptions):
    """The GSPO loss; hyperparameters as in ``conf/loss/gspo.yaml``.

    clip_low / clip_high: the sequence ratio's clip range ``[1 - clip_low, 1 + clip_high]`` (the paper: 3e-4
    / 4e-4). beta_kl / kl_estimator: the KL to π_ref, aggregated like the PG term. agg: ``aggregate`` mode of
    the per-token loss (each token carries its sequence's term). The advantages' options are ``advantage.*``.
    count_empty_rows: as :class:`gdro.loss.grpo.GRPOLoss`'s (TRL's denominator). use_bias_correction_kl /
    off_policy_mask_threshold / top_entropy_quantile: gdro/loss/options.py (off).
    """

    clip_low: float = 3e-4
    clip_high: float = 4e-4
    beta_kl: float = 0.001
    kl_estimator: str = "low_var_kl"
    agg: str = "seq-mean-token-mean"
    count_empty_rows: bool = False

    def __post_init__(self) -> None:
        check_hyper(clip_low=self.clip_low, clip_high=self.clip_high, beta_kl=self.beta_kl,
                    kl_estimator=self.kl_estimator, agg=self.agg)
        check_count_empty_rows(self.count_empty_rows)
        self.check_options()

    def compute(self, batch: LossInputs,
                counts: BatchCounts) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenTerms]:
        """The GSPO loss of one micro-batch, divided by the mini-batch's ``counts``.

        Stats: ``pg_loss`` and ``kl`` (``agg``); ``clip_frac`` (valid tokens whose sequence is clipped: no
        gradient) and ``ratio_mean`` (token mean of the token ratios, as GRPO logs it), over the valid tokens;
        ``seq_clip_frac`` (responses clipped) and ``seq_ratio_mean`` (mean s_i), over the responses with a
        valid token.
        """
        logp, mask = batch.logp, batch.mask
        _check_2d("old_logp", batch.old_logp, logp)
        _check_2d("mask", mask, logp)
        _check_adv(batch.adv, logp)
        s = torch.exp(sequence_log_ratio(logp, batch.old_logp, mask))  # (B,)
        a = batch.adv.to(logp.dtype)
        unclipped, clipped = -a * s, -a * s.clamp(1.0 - self.clip_low, 1.0 + self.clip_high)
        seq_loss = torch.maximum(unclipped, clipped)
        pg = seq_loss.unsqueeze(-1).expand_as(logp)  # each token: its sequence's term
        gate = self.gate(batch)
        if gate is not None:
            pg = pg * gate
        pg = weighted(pg, batch.token_weight)
        denom = seq_mean_denom(counts, self.agg, self.count_empty_rows)
        pg_loss = aggregate(pg, mask, self.agg, denom)
        loss, kl, kl_tok = kl_term(pg_loss, logp, batch.ref_logp, mask, beta_kl=self.beta_kl,
                                   kl_estimator=self.kl_estimator, agg=self.agg, denom=denom,
                                   kl_weight=self.kl_weight(s.unsqueeze(-1)))
        with torch.no_grad():
            seq_clipped = (clipped > unclipped).to(logp.dtype)
            has_tokens = (mask != 0).any(dim=-1).to(logp.dtype)
            ratio = torch.exp((logp - batch.old_logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
            tokens, seqs = float(counts.tokens), float(counts.responses)
            stats = {
                "pg_loss": pg_loss.detach(),
                "kl": kl.detach(),
                "clip_frac": aggregate(seq_clipped.unsqueeze(-1).expand_as(logp), mask, "token-mean", tokens),
                "ratio_mean": aggregate(ratio, mask, "token-mean", tokens),
                "seq_clip_frac": (seq_clipped * has_tokens).sum() / seqs,
                "seq_ratio_mean": (s.detach() * has_tokens).sum() / seqs,
            }
        return loss, stats, TokenTerms(pg.detach(), None if kl_tok is None else kl_tok.detach())
