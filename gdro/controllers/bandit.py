"""Exponential-weights adversary over difficulty bins: the pure math of Prompt-GDRO (paper Eq. 12–16).

Functions only, numpy only, no state: the stateful controller lives in ``gdro.controllers.samplers.PromptGDRO``.
Bins are indexed ``0..B-1`` (bin 0 = hardest, as in the classifier).
"""

from __future__ import annotations

import numpy as np


def _check_unit_interval(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")


def _check_clip(clip: float | None) -> None:
    if clip is not None and not clip > 0.0:
        raise ValueError(f"clip must be > 0 or None, got {clip}")


def ema(
    prev: np.ndarray, value: np.ndarray, beta: float, observed: np.ndarray, initialized: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """EMA bin scores (Eq. 12): ``S_t(b) = (1-β) S_{t-1}(b) + β · value(b)`` for the observed bins.

    A bin's first observation initialises ``S`` to ``value`` (as the official code does, so an early
    score is not shrunk towards an arbitrary 0); unobserved bins keep their score and flag.
    Returns ``(new_scores, new_initialized)``; the inputs are not modified.
    """
    _check_unit_interval("beta", beta)
    prev = np.asarray(prev, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    observed = np.asarray(observed, dtype=bool)
    initialized = np.asarray(initialized, dtype=bool)
    if not prev.shape == value.shape == observed.shape == initialized.shape:
        raise ValueError(
            f"prev, value, observed and initialized must share one shape, got "
            f"{prev.shape}, {value.shape}, {observed.shape}, {initialized.shape}"
        )
    new = prev.copy()
    first, cont = observed & ~initialized, observed & initialized
    new[first] = value[first]
    new[cont] = (1.0 - beta) * prev[cont] + beta * value[cont]
    return new, initialized | observed


def _clipped(scores: np.ndarray, clip: float | None) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    return scores if clip is None else np.clip(scores, -clip, clip)


def exp_weights(scores: np.ndarray, eta: float, clip: float | None = None) -> np.ndarray:
    """Unnormalised exponential weights (Eq. 14): ``ω(b) = exp(η · clip(S(b), -C, C))``.

    ``clip=None`` means no clipping (the paper never states C; the official code does not clip).
    These are the raw multipliers of Eq. 16 and may overflow to ``inf`` for large ``η·S``; the cap
    ``min(ω, ω_max)`` of Eq. 16 then still yields a finite multiplier.
    """
    if not eta > 0.0:
        raise ValueError(f"eta must be > 0, got {eta}")
    _check_clip(clip)
    with np.errstate(over="ignore"):
        return np.exp(eta * _clipped(scores, clip))


def mixed_distribution(
    scores: np.ndarray, eta: float, gamma: float, clip: float | None = None, active: np.ndarray | None = None
) -> np.ndarray:
    """Adversary's distribution with uniform exploration (Eq. 15) over the K active bins.

    ``q(b) = (1-γ) · softmax_{active}(η · clip(S))(b) + γ/K`` for active b, and 0 outside. The softmax
    subtracts the maximum, so it is stable for any score scale; ``q`` lies on the simplex, is invariant to
    adding a constant to every score (``clip=None``) and is non-decreasing in a bin's own score.
    ``active=None`` means all bins (the paper's K = B); the official code passes the bins present in
    the batch.
    """
    if not eta > 0.0:
        raise ValueError(f"eta must be > 0, got {eta}")
    _check_unit_interval("gamma", gamma)
    _check_clip(clip)
    z = eta * _clipped(scores, clip)
    active = np.ones(z.shape, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    if active.shape != z.shape:
        raise ValueError(f"active must have the shape of scores {z.shape}, got {active.shape}")
    k = int(active.sum())
    if k == 0:
        raise ValueError("active must select at least one bin, got none")
    if not np.all(np.isfinite(z[active])):
        raise ValueError("scores must be finite on the active bins")
    e = np.zeros_like(z)
    e[active] = np.exp(z[active] - z[active].max())
    q = (1.0 - gamma) * e / e.sum()
    q[active] += gamma / k
    return q


def bin_means(values: np.ndarray, bins: np.ndarray, num_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin mean of per-prompt values (Eq. 13): ``ℓ̄(b) = (1/|B_b|) Σ_{x∈B_b} ℓ(x)``.

    ``values`` and ``bins`` have one entry per prompt. Returns ``(mean (B,), count (B,))``; a bin with
    no prompt has count 0 and mean NaN (it is not observed, so it must not enter the EMA).
    """
    values = np.asarray(values, dtype=np.float64)
    bins = np.asarray(bins, dtype=np.int64)
    if values.shape != bins.shape or values.ndim != 1:
        raise ValueError(f"values and bins must be 1-D of one length, got {values.shape} and {bins.shape}")
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    if bins.size and (bins.min() < 0 or bins.max() >= num_bins):
        raise ValueError(f"bins must lie in [0, num_bins={num_bins}), got range [{bins.min()}, {bins.max()}]")
    count = np.bincount(bins, minlength=num_bins)
    total = np.bincount(bins, weights=values, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return mean, count
