"""The terms every loss is made of: clipped surrogate, KL estimators, aggregation modes (paper Eq. 4-7; verl
semantics), and ``grpo_loss``, the GRPO loss they make (``loss=grpo``, gdro/loss/grpo.py).

Shapes: ``B`` responses, ``T`` (padded) response tokens. ``logp``/``old_logp``/``ref_logp`` are token
log-probs ``(B, T)`` of the sampled tokens under the current / behaviour / reference policy; ``adv`` is the
scalar advantage of each response ``(B,)`` (Eq. 3), broadcast over its tokens; ``mask`` ``(B, T)`` marks
valid tokens.

Loss to *minimise* (verl ``compute_policy_loss`` "vanilla" + ``use_kl_loss``):
    rho_t = exp(logp_t - old_logp_t)                                                     (Eq. 4)
    pg_t  = max(-A rho_t, -A clip(rho_t, 1 - clip_low, 1 + clip_high))                 (-Eq. 5 per token)
    loss  = agg(pg) + beta_kl * agg(kl(logp, ref_logp))                                 (Eq. 6, batched)

Gradient accumulation. ``aggregate`` divides by a denominator that defaults to a count over the tensor it is
given (valid tokens or sequences). Splitting a mini-batch into micro-batches and summing per-micro-batch
losses therefore does NOT reproduce the mini-batch loss unless every micro-batch divides by the *mini-batch's*
count: compute ``denom = aggregation_denom(minibatch_mask, agg)`` (and ``token_denom =
aggregation_denom(minibatch_mask, "token-mean")`` for the token statistics) once per mini-batch, pass them to
every micro-batch's ``grpo_loss``, and sum (do not average) the micro-batch losses and stats. The update
does this through the loss seam: it hands every micro-batch the mini-batch's ``BatchCounts``
(gdro/loss/base.py), from which each loss takes its own denominators (``BatchCounts.denom(agg)`` is
``aggregation_denom``'s).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = [
    "AGG_MODES",
    "KL_ESTIMATORS",
    "TokenTerms",
    "aggregate",
    "aggregation_denom",
    "check_hyper",
    "clipped_surrogate",
    "grpo_loss",
    "kl_penalty",
    "kl_term",
    "per_response_mean",
]

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
# verl names: "kl" == "k1", "mse" == "k2", "low_var_kl" == "k3" (Schulman, "Approximating KL divergence").
KL_ESTIMATORS = ("k1", "kl", "k2", "mse", "k3", "low_var_kl")
_LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios to [-20, 20] before exp (no inf, no NaN gradients)
_K3_CLAMP = 10.0  # verl clamps the k3 estimate to [-10, 10]


def _check_2d(name: str, x: torch.Tensor, ref: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape != ref.shape:
        raise ValueError(f"{name} must have shape (B, T) = {tuple(ref.shape)}, got {tuple(x.shape)}")


def _check_adv(adv: torch.Tensor, logp: torch.Tensor) -> None:
    if adv.dim() != 1 or adv.shape[0] != logp.shape[0]:
        raise ValueError(f"adv must have shape (B,) = ({logp.shape[0]},), got {tuple(adv.shape)}")


def _check_clip(clip_low: float, clip_high: float) -> None:
    if not 0.0 < clip_low < 1.0:
        raise ValueError(f"clip_low must be in (0, 1), got {clip_low}")
    if not (clip_high > 0.0 and math.isfinite(clip_high)):
        raise ValueError(f"clip_high must be > 0, got {clip_high}")


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL(pi_theta || pi_ref) estimate on sampled tokens (the D_KL of Eq. 6, as verl computes it).

    ``"k1"``/``"kl"``: ``logp - ref`` (unbiased, high variance, can be negative).
    ``"k2"``/``"mse"``: ``0.5 (logp - ref)^2``.
    ``"k3"``/``"low_var_kl"``: ``exp(ref - logp) - (ref - logp) - 1`` (unbiased, >= 0), with ``ref - logp``
    clamped to [-20, 20] and the result clamped to [-10, 10] as in verl.

    Returns:
        ``(B, T)`` per-token estimates (unmasked).
    """
    _check_2d("ref_logp", ref_logp, logp)
    if estimator in ("k1", "kl"):
        return logp - ref_logp
    if estimator in ("k2", "mse"):
        return 0.5 * (logp - ref_logp).square()
    if estimator in ("k3", "low_var_kl"):
        log_r = (ref_logp - logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        # expm1 keeps the estimate >= 0 near log_r = 0, where exp(x) - x - 1 rounds to -1e-16
        return (torch.expm1(log_r) - log_r).clamp(0.0, _K3_CLAMP)
    raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    clip_low: float,
    clip_high: float,
    *,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO clipped surrogate loss (negated Eq. 5 integrand, asymmetric clip as in Appendix A).

    ``pg = max(-A rho, -A clip(rho, 1 - clip_low, 1 + clip_high))`` with ``rho = exp(logp - old_logp)``
    (log-ratio clamped to [-20, 20] like verl). If ``clip_ratio_c`` is given (verl's dual-clip, default 3.0
    there; off here), tokens with ``A < 0`` are further capped: ``pg = min(pg, -A * clip_ratio_c)``.

    Returns:
        ``(per_token_loss (B, T), clipped (B, T) bool)``; ``clipped`` is True where a clipped branch is
        strictly active, i.e. where the token's gradient is zero (verl's ``pg_clipfrac`` indicator, OR-ed with
        the dual-clip indicator when ``clip_ratio_c`` is set).
    """
    _check_2d("old_logp", old_logp, logp)
    _check_adv(adv, logp)
    _check_clip(clip_low, clip_high)
    ratio = torch.exp((logp - old_logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
    a = adv.unsqueeze(-1).to(logp.dtype)
    loss_unclipped = -a * ratio
    loss_clipped = -a * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    clipped = loss_clipped > loss_unclipped
    if clip_ratio_c is not None:
        if not (clip_ratio_c > 1.0 and math.isfinite(clip_ratio_c)):
            raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")
        cap = -a * clip_ratio_c
        dual = (a < 0) & (loss > cap)
        loss = torch.where(dual, cap.expand_as(loss), loss)
        clipped = clipped | dual
    return loss, clipped


def aggregation_denom(mask: torch.Tensor, mode: str) -> float:
    """Default denominator of ``aggregate(., mask, mode)``; compute it on the whole mini-batch's mask.

    ``"token-mean"``: number of valid tokens. ``"seq-mean-token-mean"``: number of sequences with at least
    one valid token. ``"seq-mean-token-sum"``: number of sequences (rows). Clamped to >= 1, so an empty batch
    aggregates to 0 rather than NaN.
    """
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape (B, T), got {tuple(mask.shape)}")
    valid = mask.detach() != 0
    if mode == "token-mean":
        count = int(valid.sum())
    elif mode == "seq-mean-token-mean":
        count = int(valid.any(dim=-1).sum())
    elif mode == "seq-mean-token-sum":
        count = mask.shape[0]
    else:
        raise ValueError(f"mode must be one of {AGG_MODES}, got {mode!r}")
    return float(max(count, 1))


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: str, denom: float | None = None
) -> torch.Tensor:
    """Reduce per-token values ``(B, T)`` to a scalar (verl ``agg_loss``), with an explicit denominator.

    ``"token-mean"``: ``sum_{b,t} m v / denom`` (denom default: #valid tokens).
    ``"seq-mean-token-mean"``: ``sum_b (sum_t m v / sum_t m) / denom`` (default: #sequences with >= 1 valid
    token; a sequence without valid tokens contributes 0).
    ``"seq-mean-token-sum"``: ``sum_b sum_t m v / denom`` (default: #sequences).

    ``denom`` lets micro-batches of one mini-batch each divide by the mini-batch's global count (see
    ``aggregation_denom``), so that the sum of micro-batch results equals the full mini-batch result exactly.
    Masked-out entries never contribute, even if they hold inf/NaN.
    """
    _check_2d("mask", mask, values)
    if denom is None:
        denom = aggregation_denom(mask, mode)
    elif not (denom > 0 and math.isfinite(denom)):
        raise ValueError(f"denom must be a finite positive number, got {denom}")
    valid = mask != 0
    m = mask.to(values.dtype)
    masked = torch.where(valid, values, torch.zeros_like(values)) * m
    if mode == "token-mean":
        total = masked.sum()
    elif mode == "seq-mean-token-mean":
        total = (masked.sum(dim=-1) / m.sum(dim=-1).clamp_min(1.0)).sum()
    elif mode == "seq-mean-token-sum":
        total = masked.sum()
    else:
        raise ValueError(f"mode must be one of {AGG_MODES}, got {mode!r}")
    return total / denom


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    beta_kl: float,
    ref_logp: torch.Tensor | None = None,
    kl_estimator: str = "low_var_kl",
    agg: str = "token-mean",
    denom: float | None = None,
    token_denom: float | None = None,
    clip_ratio_c: float | None = None,
    token_weight: torch.Tensor | None = None,
    gate: torch.Tensor | None = None,
    kl_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO loss ``agg(pg) + beta_kl * agg(kl)`` (paper Eq. 4-6; verl actor loss with ``use_kl_loss``).

    Args:
        logp, old_logp, mask: ``(B, T)``; adv: ``(B,)`` (already multiplied by any Prompt-GDRO weights).
        clip_low, clip_high: asymmetric clip range ``[1 - clip_low, 1 + clip_high]``.
        clip_ratio_c: optional dual-clip cap for negative advantages (see ``clipped_surrogate``).
        beta_kl: KL coefficient; the KL term is added only if > 0, and then ``ref_logp`` is required.
        ref_logp: ``(B, T)`` reference-policy log-probs; if given with ``beta_kl == 0`` the KL is only logged.
        kl_estimator: see ``kl_penalty``. agg: see ``aggregate``.
        denom: denominator for ``agg`` (mini-batch global count under gradient accumulation).
        token_denom: number of valid tokens of the mini-batch, used for the token statistics; defaults to
            ``denom`` when ``agg == "token-mean"``, else to this batch's token count.
        token_weight: detached factor of each token's PG term (``weighted``); None: 1.
        gate: detached 0/1 factor of each token's PG term, applied before ``token_weight`` (the off-policy and
            high-entropy masks, gdro/loss/options.py); None: 1.
        kl_weight: factor of each token's KL (``kl_term``; the bias correction); None: 1.

    Returns:
        ``(loss, stats, tokens)``. ``stats`` holds detached scalars that sum exactly over the micro-batches of
        a mini-batch when ``denom``/``token_denom`` are the mini-batch's counts: ``"pg_loss"`` and ``"kl"``
        (aggregated with ``agg``/``denom``; ``kl`` is 0 without ``ref_logp``), ``"clip_frac"`` (fraction of
        valid tokens with ``clipped`` set) and ``"ratio_mean"`` (token mean of rho), both over
        ``token_denom``. ``tokens`` holds the detached per-token terms the loss reduced (``pg`` and, with
        ``ref_logp``, ``kl``): per-response controller signals are reductions of them (``per_response_mean``).
    """
    _check_2d("mask", mask, logp)
    if token_denom is None:
        token_denom = denom if (agg == "token-mean" and denom is not None) else None

    pg, clipped = clipped_surrogate(logp, old_logp, adv, clip_low, clip_high, clip_ratio_c=clip_ratio_c)
    if gate is not None:
        pg = pg * gate
    pg = weighted(pg, token_weight)
    pg_loss = aggregate(pg, mask, agg, denom)
    loss, kl, kl_tok = kl_term(pg_loss, logp, ref_logp, mask, beta_kl=beta_kl, kl_estimator=kl_estimator,
                               agg=agg, denom=denom, kl_weight=kl_weight)
    with torch.no_grad():
        ratio = torch.exp((logp - old_logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
        stats = {
            "pg_loss": pg_loss.detach(),
            "kl": kl.detach(),
            "clip_frac": aggregate(clipped.to(logp.dtype), mask, "token-mean", token_denom),
            "ratio_mean": aggregate(ratio, mask, "token-mean", token_denom),
        }
    return loss, stats, TokenTerms(pg.detach(), None if kl_tok is None else kl_tok.detach())


def weighted(pg: torch.Tensor, token_weight: torch.Tensor | None) -> torch.Tensor:
    """The per-token PG loss ``pg`` ``(B, T)`` times a detached per-token factor (``LossInputs.token_weight``:
    ``(B, T)`` or ``(B, 1)``), as TRL multiplies its per-token loss by the importance-sampling ratio before the KL is
    added; ``pg`` itself for None."""
    if token_weight is None:
        return pg
    if token_weight.dim() != 2 or token_weight.shape[0] != pg.shape[0] or token_weight.shape[1] not in (1, pg.shape[1]):
        raise ValueError(f"token_weight must have shape (B, T) = {tuple(pg.shape)} or (B, 1), got "
                         f"{tuple(token_weight.shape)}")
    return pg * token_weight.detach().to(pg.dtype)


class TokenTerms(NamedTuple):
    """Detached per-token terms of one ``grpo_loss`` call, ``(B, T)``: the clipped PG loss, and the KL estimate
    (None without a reference)."""

    pg: torch.Tensor
    kl: torch.Tensor | None


def per_response_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` masked token mean of each response; a response without valid tokens gives 0.

    Applied to ``TokenTerms.pg`` it is the official code's per-sample PG loss ``-J^CLIP_{i,j}`` (Eq. 5; Eq. 6
    without the KL term); applied to ``TokenTerms.kl`` the Eq. 6 KL term of each response.
    """
    _check_2d("mask", mask, values)
    m = mask.to(values.dtype)
    masked = torch.where(mask != 0, values, torch.zeros_like(values)) * m
    return masked.sum(dim=-1) / m.sum(dim=-1).clamp_min(1.0)


def kl_term(
    pg_loss: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    mask: torch.Tensor,
    *,
    beta_kl: float,
    kl_estimator: str,
    agg: str,
    denom: float | None,
    kl_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Add the KL to π_ref to an aggregated PG loss: ``(pg_loss + beta_kl * agg(kl), agg(kl), kl per token)``.

    The KL is aggregated like the PG term (``agg``, ``denom``: Eq. 6). It is added only if ``beta_kl > 0``
    (then ``ref_logp`` is required); with ``ref_logp`` and ``beta_kl == 0`` it is only measured. Without
    ``ref_logp`` the KL is a zero scalar and its per-token terms are None. ``kl_weight`` (``(B, T)`` or ``(B, 1)``,
    with its gradient: ``use_bias_correction_kl``'s importance ratio) multiplies the per-token estimate.
    """
    if not (beta_kl >= 0 and math.isfinite(beta_kl)):
        raise ValueError(f"beta_kl must be >= 0, got {beta_kl}")
    if beta_kl > 0 and ref_logp is None:
        raise ValueError(f"ref_logp is required when beta_kl > 0 (beta_kl={beta_kl})")
    if ref_logp is None:
        return pg_loss, torch.zeros((), dtype=pg_loss.dtype, device=pg_loss.device), None
    kl_tok = kl_penalty(logp, ref_logp, kl_estimator)
    if kl_weight is not None:
        kl_tok = kl_tok * kl_weight
    kl = aggregate(kl_tok, mask, agg, denom)
    return (pg_loss + beta_kl * kl if beta_kl > 0 else pg_loss), kl, kl_tok


def check_hyper(
    *,
    clip_low: float,
    clip_high: float,
    beta_kl: float,
    kl_estimator: str,
    agg: str | None = None,
    clip_ratio_c: float | None = None,
) -> None:
    """The range checks a loss's hyperparameters share (its ``__post_init__``); each message names its key."""
    if not 0.0 < clip_low < 1.0:
        raise ValueError(f"clip_low must be in (0, 1), got {clip_low}")
    if not (clip_high > 0.0 and math.isfinite(clip_high)):
        raise ValueError(f"clip_high must be > 0, got {clip_high}")
    if not (beta_kl >= 0.0 and math.isfinite(beta_kl)):
        raise ValueError(f"beta_kl must be >= 0, got {beta_kl}")
    if clip_ratio_c is not None and not (clip_ratio_c > 1.0 and math.isfinite(clip_ratio_c)):
        raise ValueError(f"clip_ratio_c must be > 1 or None, got {clip_ratio_c}")
    if clip_ratio_c is not None and clip_ratio_c < 1.0 + clip_high:
        # verl's dual clip (A < 0 only) and TRL's delta (a cap of the unclipped ratio, A > 0 too) agree from
        # 1 + clip_high up; below it they differ for both signs of A, so neither is chosen silently
        raise ValueError(f"clip_ratio_c must be >= 1 + clip_high = {1.0 + clip_high:g} (below it verl's dual clip "
                         f"and TRL's delta differ), got {clip_ratio_c}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if agg is not None and agg not in AGG_MODES:
        raise ValueError(f"agg must be one of {AGG_MODES}, got {agg!r}")
