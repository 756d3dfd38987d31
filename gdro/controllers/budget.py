"""Exact-budget rollout allocation (paper §3.3 Eq. 19, §4.3 Theorem 4.2 Eq. 29–31). Pure numpy.

- ``exact_budget_select``: choose one arm (rollouts per prompt) per bin maximising Σ_b values[b, a_b] subject
  to Σ_b counts_b · arms[a_b] == budget *exactly* ("exact constrained selection via dynamic programming", L278).
- ``check_budget_feasible``: n_min ≤ n̄ ≤ n_max, checked before any model loads.
- ``sqrt_allocation`` / ``sqrt_closed_form``: the square-root (Neyman) law of Theorem 4.2, over integers / reals.
- ``weighted_se``: the batch standard-error proxy Σ_b q_b σ_b / √n_b (Eq. 33).

Tie-breaking in the DP is *lexicographic*: the primary objective Σ values is maximised; among solutions whose
primary objective is within ``tie_rtol · scale`` of the best (scale = Σ_b max_a |finite values[b, a]|, so that
float round-off in differently-ordered sums counts as a tie), the secondary objective Σ_b |n_b − prefer| is
minimised; remaining ties go to the lowest arm index of the last bin first (deterministic). The secondary
objective never overrides a primary improvement larger than the tolerance (unlike an additive penalty).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "check_budget_feasible",
    "exact_budget_select",
    "sqrt_allocation",
    "sqrt_closed_form",
    "weighted_se",
]


def _int_vector(x: object, name: str, *, minimum: int | None = None) -> np.ndarray:
    """``x`` as a 1-D int64 array (integer-valued), optionally with every entry ``>= minimum``."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
        raise ValueError(f"{name} must hold integers, got {arr}")
    out = arr.astype(np.int64)
    if minimum is not None and out.size and out.min() < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got min {out.min()}")
    return out


def _int_scalar(x: object, name: str) -> int:
    """``x`` as a Python int (bools and non-integers rejected)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {x!r}")  # noqa: TRY004 (project: ValueError naming arg)
    return int(x)


def _float_vector(x: object, name: str, n: int | None = None, *, nonneg: bool = True) -> np.ndarray:
    """``x`` as a finite 1-D float64 array (of length ``n`` if given), optionally non-negative."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise ValueError(f"{name} must have shape ({'B' if n is None else n},), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr}")
    if nonneg and arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be >= 0, got min {arr.min()}")
    return arr


def exact_budget_select(
    values: np.ndarray,
    counts: np.ndarray,
    arms: np.ndarray,
    budget: int,
    *,
    prefer: int | None = None,
    tie_rtol: float = 1e-10,
) -> np.ndarray:
    """Exact-budget arm selection by dynamic programming (Eq. 19 with the equality constraint, L278/L750).

    Maximises Σ_b values[b, a_b] s.t. Σ_b counts[b] · arms[a_b] == budget. DP over bins with the running
    total t ∈ [0, budget] as state; for each bin and arm the value table is shifted by counts[b]·arms[a]
    (vectorised over t) and the (lexicographic) best arm per state is stored for backtracking.
    Cost O(B · A · budget) time, O(B · budget) memory.

    Args:
        values: ``(B, A)`` float utilities; ``-inf`` marks a forbidden arm (``+inf``/NaN are rejected).
        counts: ``(B,)`` int ≥ 1, prompts per bin.
        arms: ``(A,)`` int ≥ 1, strictly increasing arm values (rollouts per prompt).
        budget: the exact total Σ_b counts_b · n_b.
        prefer: tie-break target (e.g. n̄): among optimal solutions, minimise Σ_b |n_b − prefer|.
        tie_rtol: primary objectives within ``tie_rtol · scale`` count as tied (see module docstring).

    Returns:
        ``(B,)`` int64: the chosen arm *value* n_b for each bin.

    Raises:
        ValueError: bad shapes/values, or when ``budget`` cannot be met exactly.
    """
    vals, counts, arms, budget, prefer = _select_inputs(values, counts, arms, budget, prefer, tie_rtol)
    n_bins, n_arms = vals.shape
    if n_bins == 0:
        return np.zeros(0, dtype=np.int64)

    finite = np.isfinite(vals)
    scale = float(np.where(finite, np.abs(vals), 0.0).max(axis=1).sum())
    tol = tie_rtol * scale
    dev = np.zeros(n_arms, dtype=np.int64) if prefer is None else np.abs(arms - prefer)
    # Work in units of g = gcd of every step and the budget (e.g. equal counts shrink the state space).
    steps = counts[:, None] * arms[None, :]
    g = int(np.gcd.reduce(np.append(steps.ravel(), budget)))
    steps, target = steps // g, budget // g
    # Window of totals after bins 0..b that can still reach the target with the remaining bins.
    pre_lo, pre_hi = np.cumsum(steps[:, 0]), np.cumsum(steps[:, -1])
    suf_lo, suf_hi = pre_lo[-1] - pre_lo, pre_hi[-1] - pre_hi
    win_lo = np.maximum(pre_lo, target - suf_hi)
    win_hi = np.minimum(pre_hi, target - suf_lo)
    size = target + 1
    # Secondary objective Σ|n_b − prefer| is carried pre-encoded as key = sec·A + arm index, so one min-reduction
    # over arms gives the lexicographic (sec, arm index) winner among primary-tied arms (argmin is much slower).
    bound = (int(dev.max()) * n_bins + 1) * n_arms + n_arms
    itype = np.int32 if bound < np.iinfo(np.int32).max else np.int64
    big = np.iinfo(itype).max
    step_key = (dev * n_arms + np.arange(n_arms)).astype(itype)
    best = np.full(size, -np.inf)  # best primary objective reaching total t with the bins so far
    best[0] = 0.0
    sec = np.zeros(size, dtype=itype)  # n_arms · (its secondary objective)
    choice = np.zeros((n_bins, size), dtype=np.int16 if n_arms < 2**15 else np.int64)
    for b in range(n_bins):
        lo_t, hi_t = int(win_lo[b]), int(win_hi[b])
        if hi_t < lo_t:
            best = np.full(size, -np.inf)
            break
        best, sec, choice[b, lo_t : hi_t + 1] = _relax(best, sec, (lo_t, hi_t), steps[b], vals[b], finite[b],
                                                       step_key, tol, big)
    if not np.isfinite(best[target]):
        raise ValueError(f"budget {budget} cannot be met exactly with counts {counts} and the allowed arms")
    out = np.empty(n_bins, dtype=np.int64)
    t = target
    for b in range(n_bins - 1, -1, -1):
        a = int(choice[b, t])
        out[b] = arms[a]
        t -= int(steps[b, a])
    return out


def _select_inputs(values, counts, arms, budget, prefer, tie_rtol):
    """:func:`exact_budget_select`'s inputs checked and converted: ``(values, counts, arms, budget, prefer)``."""
    counts = _int_vector(counts, "counts", minimum=1)
    arms = _int_vector(arms, "arms", minimum=1)
    budget = _int_scalar(budget, "budget")
    if arms.size == 0 or np.any(np.diff(arms) <= 0):
        raise ValueError(f"arms must be non-empty and strictly increasing, got {arms}")
    vals = np.asarray(values, dtype=np.float64)
    n_bins, n_arms = counts.shape[0], arms.shape[0]
    if vals.shape != (n_bins, n_arms):
        raise ValueError(f"values must have shape (B, A) = ({n_bins}, {n_arms}), got {vals.shape}")
    if np.any(np.isnan(vals) | (vals == np.inf)):
        raise ValueError("values must not contain NaN or +inf (use -inf for forbidden arms)")
    if prefer is not None:
        prefer = _int_scalar(prefer, "prefer")
    if not (np.isfinite(tie_rtol) and tie_rtol >= 0):
        raise ValueError(f"tie_rtol must be finite and >= 0, got {tie_rtol}")
    lo, hi = int(counts.sum() * arms[0]), int(counts.sum() * arms[-1])
    if not lo <= budget <= hi:
        raise ValueError(f"budget {budget} cannot be met exactly: reachable totals lie in [{lo}, {hi}]")
    return vals, counts, arms, budget, prefer


def _relax(best: np.ndarray, sec: np.ndarray, window: tuple[int, int], steps: np.ndarray, vals: np.ndarray,
           finite: np.ndarray, step_key: np.ndarray, tol: float, big: int):
    """One bin of the DP: every reachable total ``t`` in ``window`` takes the best arm (primary value within ``tol``
    of the top, then the smallest pre-encoded secondary key). Returns the new ``best`` and ``sec`` tables and the
    arm index picked for each total of the window."""
    lo_t, hi_t = window
    width, n_arms, size = hi_t - lo_t + 1, len(steps), len(best)
    new_best, new_sec = np.full(size, -np.inf), np.zeros(size, dtype=sec.dtype)
    cand = np.full((n_arms, width), -np.inf)
    key = np.full((n_arms, width), big, dtype=sec.dtype)
    for a in range(n_arms):
        s = int(steps[a])
        start = max(lo_t, s)
        if start > hi_t or not finite[a]:
            continue
        cand[a, start - lo_t :] = best[start - s : hi_t + 1 - s] + vals[a]
        key[a, start - lo_t :] = sec[start - s : hi_t + 1 - s] + step_key[a]
    top = cand.max(axis=0)
    reach = np.isfinite(top)
    win = np.where(cand >= (top - tol)[None, :], key, big).min(axis=0)
    pick = np.where(reach, win % n_arms, 0)
    new_best[lo_t : hi_t + 1] = np.where(reach, cand[pick, np.arange(width)], -np.inf)
    new_sec[lo_t : hi_t + 1] = np.where(reach, win - win % n_arms, 0)
    return new_best, new_sec, pick


def check_budget_feasible(n_bar: int, n_min: int, n_max: int) -> None:
    """Validate the rollout budget n_min ≤ n̄ ≤ n_max with n_min ≥ 1 (Eq. 19: uniform n̄ is then feasible).

    Raises:
        ValueError: naming ``n_bar``, ``n_min`` or ``n_max``.
    """
    n_bar, n_min, n_max = (
        _int_scalar(n_bar, "n_bar"),
        _int_scalar(n_min, "n_min"),
        _int_scalar(n_max, "n_max"),
    )
    if n_min < 1:
        raise ValueError(f"n_min must be >= 1, got n_min={n_min}")
    if n_min > n_max:
        raise ValueError(f"n_max must be >= n_min, got n_min={n_min} > n_max={n_max}")
    if n_bar < n_min:
        raise ValueError(f"n_bar must be >= n_min, got n_bar={n_bar} < n_min={n_min}")
    if n_bar > n_max:
        raise ValueError(f"n_bar must be <= n_max, got n_bar={n_bar} > n_max={n_max}")


def sqrt_allocation(v: np.ndarray, counts: np.ndarray, n_bar: int, n_min: int, n_max: int) -> np.ndarray:
    """Integer square-root (Neyman) allocation, Theorem 4.2 (Eq. 29) solved exactly over integers.

    Minimises Σ_b counts_b · v_b / n_b s.t. Σ_b counts_b · n_b = n̄ · Σ_b counts_b and n_min ≤ n_b ≤ n_max,
    via ``exact_budget_select`` with values[b, a] = −counts_b · v_b / a and prefer = n̄: zero-variance bins
    (nothing at stake) tie toward n̄, and equal v gives every bin n̄.

    Returns:
        ``(B,)`` int64 rollouts per prompt for each bin.
    """
    check_budget_feasible(n_bar, n_min, n_max)
    counts = _int_vector(counts, "counts", minimum=1)
    v = _float_vector(v, "v", counts.shape[0])
    arms = np.arange(n_min, n_max + 1, dtype=np.int64)
    values = -(counts * v)[:, None] / arms[None, :].astype(np.float64)
    return exact_budget_select(values, counts, arms, n_bar * int(counts.sum()), prefer=n_bar)


def sqrt_closed_form(v: np.ndarray, q: np.ndarray, n_bar: float) -> np.ndarray:
    """Continuous minimiser of Σ_b q_b v_b / n_b s.t. Σ_b q_b n_b = n̄ (Theorem 4.2, Eq. 30).

    n_b* = n̄ · √v_b / Σ_j q_j √v_j, with q normalised to shares (so bin counts may be passed as q).

    Raises:
        ValueError: if ``q`` sums to 0 or Σ_j q_j √v_j = 0 (``v`` zero on the support of q).
    """
    v = _float_vector(v, "v")
    q = _float_vector(q, "q", v.shape[0])
    if not float(n_bar) > 0:
        raise ValueError(f"n_bar must be > 0, got {n_bar}")
    if q.sum() <= 0:
        raise ValueError("q must have a positive sum")
    root = np.sqrt(v)
    denom = float(np.dot(q / q.sum(), root))
    if denom <= 0:
        raise ValueError("v must be positive on some bin with q > 0 (Σ_j q_j √v_j = 0)")
    return float(n_bar) * root / denom


def weighted_se(q: np.ndarray, sigma: np.ndarray, n: np.ndarray) -> float:
    """Batch standard-error proxy Σ_b q_b σ_b / √n_b (Eq. 33); q is used as given (not renormalised)."""
    q = _float_vector(q, "q")
    sigma = _float_vector(sigma, "sigma", q.shape[0])
    n = _float_vector(n, "n", q.shape[0])
    if n.size and n.min() <= 0:
        raise ValueError(f"n must be > 0, got min {n.min()}")
    return float(np.sum(q * sigma / np.sqrt(n)))
