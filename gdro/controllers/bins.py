"""Difficulty bins from pass-rates: edges, raw bins, hysteresis, and the pooled pass@k estimate (paper §3.1).

Edges ``0 = a_0 < a_1 < ... < a_B = 1`` define ``B`` bins ``D_b = {x : p(x) in [a_b, a_{b+1})}`` (paper Eq. 11,
0-based here), with ``p = 1`` in the top bin. Bin 0 holds the lowest pass-rates, i.e. the hardest prompts (the
paper's ``accbin_0``). Hysteresis (paper L227; no value given) reassigns a prompt only when its pass-rate crosses
a boundary of its current bin by a margin ``delta``.

Everything here is pure and vectorised (numpy only): the stateful classifier lives in ``gdro.controllers.difficulty``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["hysteresis_bins", "make_edges", "passk_from_window", "raw_bins"]


def make_edges(edges: Sequence[float] | None, num_bins: int | None) -> np.ndarray:
    """Full edge vector ``[0, a_1, ..., a_{B-1}, 1]`` (paper Eq. 11) from interior ``edges`` or ``num_bins``.

    Args:
        edges: interior edges, strictly increasing and strictly inside (0, 1); ``[]`` is one bin.
        num_bins: number of equal-width bins (>= 1). Exactly one of ``edges`` / ``num_bins`` is given.

    Raises:
        ValueError: naming ``edges`` or ``num_bins`` when neither/both are given or the value is invalid.
    """
    if (edges is None) == (num_bins is None):
        raise ValueError(
            f"exactly one of edges / num_bins must be set (the other null), got edges={edges!r}, "
            f"num_bins={num_bins!r}"
        )
    if num_bins is not None:
        if isinstance(num_bins, bool) or int(num_bins) != num_bins or num_bins < 1:
            raise ValueError(f"num_bins must be an integer >= 1, got {num_bins!r}")
        # i / B is correctly rounded (linspace gives 0.30000000000000004 for 3/10, misbinning p = 0.3).
        return np.arange(int(num_bins) + 1, dtype=np.float64) / int(num_bins)
    inner = np.asarray(list(edges), dtype=np.float64)  # type: ignore[arg-type]
    if inner.ndim != 1:
        raise ValueError(f"edges must be a flat list of interior edges, got {edges!r}")
    if not np.all(np.isfinite(inner)) or np.any(inner <= 0.0) or np.any(inner >= 1.0):
        raise ValueError(f"edges must lie strictly inside (0, 1) (0 and 1 are implied), got {list(edges)!r}")
    if np.any(np.diff(inner) <= 0.0):
        raise ValueError(f"edges must be strictly increasing, got {list(edges)!r}")
    return np.concatenate([[0.0], inner, [1.0]])


def raw_bins(p: np.ndarray, full_edges: np.ndarray) -> np.ndarray:
    """Bin ``b`` with ``a_b <= p < a_{b+1}`` (paper Eq. 11); ``p = 1`` goes to the top bin ``B - 1``.

    A pass-rate exactly on an interior edge belongs to the bin above it.

    Raises:
        ValueError: if ``p`` has a value outside [0, 1] (NaN included: unseen prompts are the caller's job).
    """
    p = np.asarray(p, dtype=np.float64)
    if p.size and not (np.all(p >= 0.0) and np.all(p <= 1.0)):
        raise ValueError(f"p must lie in [0, 1] (no NaN), got min {np.nanmin(p)}, max {np.nanmax(p)}")
    return np.searchsorted(full_edges[1:-1], p, side="right").astype(np.int64)


def hysteresis_bins(p: np.ndarray, prev_bins: np.ndarray, full_edges: np.ndarray, delta: float) -> np.ndarray:
    """Bins with hysteresis margin ``delta`` (paper L227) relative to each prompt's previous bin.

    A prompt in bin ``prev`` moves up only if ``p >= a_{prev+1} + delta`` and down only if ``p < a_prev - delta``;
    when it moves it goes to ``raw_bins(p)`` (possibly several bins away), otherwise it stays in ``prev``.
    ``prev = -1`` means no previous bin: the raw bin is taken. ``delta = 0`` reduces to ``raw_bins``.

    Unlike the official code, whose equal-width path tests the *new* bin's lower edge and so never moves down,
    the rule is symmetric: the margin is measured from the edges of the bin the prompt currently sits in.
    """
    raw = raw_bins(p, full_edges)
    prev = np.asarray(prev_bins, dtype=np.int64)
    if prev.shape != raw.shape:
        raise ValueError(f"prev_bins must have the shape of p {raw.shape}, got {prev.shape}")
    num_bins = len(full_edges) - 1
    if prev.size and (prev.min() < -1 or prev.max() >= num_bins):
        raise ValueError(f"prev_bins must lie in [-1, {num_bins - 1}], got {prev.min()}..{prev.max()}")
    has_prev = prev >= 0
    safe = np.where(has_prev, prev, 0)
    p = np.asarray(p, dtype=np.float64)
    up = p >= full_edges[safe + 1] + delta
    down = p < full_edges[safe] - delta
    return np.where(~has_prev | up | down, raw, prev).astype(np.int64)


def passk_from_window(correct_sum: np.ndarray, total_sum: np.ndarray, k: int) -> np.ndarray:
    """Pass@k from ``correct_sum`` correct out of ``total_sum`` rollouts pooled over a window (paper Eq. 10, k).

    Where ``total >= k``: the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021; equals
    ``gdro.grading.passk.pass_at_k``), computed as ``1 - prod_{j<k} (n-c-j)/(n-j)`` over a ``(len, k)`` array.
    Where ``0 < total < k``: the plug-in ``1 - (1 - c/n)^k``. Where ``total = 0``: NaN.

    Raises:
        ValueError: if ``k < 1``, shapes differ, or not ``0 <= correct_sum <= total_sum``.
    """
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    c = np.asarray(correct_sum, dtype=np.float64)
    n = np.asarray(total_sum, dtype=np.float64)
    if c.shape != n.shape:
        raise ValueError(f"correct_sum and total_sum must have the same shape, got {c.shape} and {n.shape}")
    if c.size and not (np.all(c >= 0) and np.all(c <= n)):
        raise ValueError("correct_sum must satisfy 0 <= correct_sum <= total_sum elementwise")
    k = int(k)
    out = np.full(c.shape, np.nan, dtype=np.float64)
    seen = n > 0
    plug = seen & (n < k)
    out[plug] = 1.0 - (1.0 - c[plug] / n[plug]) ** k
    full = n >= k
    if np.any(full):
        nf, cf = n[full][:, None], c[full][:, None]
        j = np.arange(k, dtype=np.float64)[None, :]
        # (n-c-j) hits 0 at j = n-c when n-c < k: the product is 0 and pass@k = 1; clip the later negatives.
        ratio = np.prod(np.maximum(nf - cf - j, 0.0) / (nf - j), axis=1)
        out[full] = 1.0 - ratio
    return out
