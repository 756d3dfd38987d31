"""Knapsack RL's per-prompt rollout allocation (Li et al., arXiv 2509.25849), as pure functions. numpy only.

Giving a prompt with per-rollout success rate p a group of n rollouts is worth

    value(n, p) = (1 − pⁿ − (1 − p)ⁿ) · p (1 − p)²

the probability that the group is mixed (neither all correct nor all wrong: only then does a GRPO group carry a
gradient) times a gradient-size term p(1 − p)² that peaks at p = 1/3. ``value`` is 0 at p ∈ {0, 1} and at n = 1,
and for 0 < p < 1 strictly increasing and concave in n ≥ 1 (its increments p(1 − p)²·(pⁿ(1 − p) + (1 − p)ⁿ p)
shrink). :func:`knapsack_allocate` maximises Σ_i value(n_i, p_i) subject to Σ_i n_i = budget *exactly* and
n_min_i ≤ n_i ≤ n_max_i, by dynamic programming over the prompts with the extra rollouts above n_min as state.

Tie-breaking (deterministic, exact on exact ties): (1) the largest Σ value, where totals within
``tie_rtol · Σ_i max_n value(n, p_i)`` of the best count as tied (float sums in different orders differ by a few
ulps); (2) among those, the most even allocation, the smallest Σ_i n_i² (⇔ the smallest Σ_i (n_i − budget/G)²):
a surplus that no prompt with value can take is spread evenly over the prompts with p ∈ {0, 1}; (3) then the
lexicographically smallest (n_0, n_1, …). :func:`brute_force_allocate` applies the same rule by enumeration in
exact rational arithmetic; it is the tests' reference.

What the official code does (liziniu/KnapsackRL @ 05eeb92, read for semantics; none of it is copied here), and what
differs here:

- **Formula: the same.** ``verl/trainer/ppo/exploration_utils.py``, ``solve_by_dp`` (and ``dp_core_numba``): the
  gain of k extra rollouts above ``min_n`` is (1 − p^(k+min_n) − (1 − p)^(k+min_n)) · p · (1 − p)². (The
  ``values`` array of ``sampling_budget_by_knapsack``, p(1 − p)³, is only printed.)
- **A prompt left at n_min is worth 0 there.** The official DP's "don't allocate" option (k = 0 extra) adds 0, not
  value(min_n, p), so it maximises Σ_{i: n_i > n_min} value(n_i, p_i). Here the default credits every prompt
  (``floor_credit=True``); ``floor_credit=False`` reproduces the official objective. They differ only when
  n_min ≥ 2 (value(1, p) = 0).
- **Who enters the DP.** Official (``sampling_budget_by_knapsack``): only prompts with 0 < p < 1 and a "valid" state.
  A prompt with p = 0 gets ``negative_n`` and one with p = 1 gets ``positive_n`` (both default to ``min_n``); a prompt
  whose state is invalid gets n̄ (``n``), all outside the DP. A state is invalid when the prompt has fewer than
  ``min_buffer_length`` = 8 rollouts on record, e.g. a prompt never seen. Here every prompt enters. p ∈ {0, 1} has
  value 0 for every n, so such a prompt stays at n_min unless the budget forces more on it. A caller that wants the
  official treatment of unseen prompts passes per-prompt bounds n_min_i = n_max_i = n̄.
- **Budget.** Official: total = batch size × n (``total_budget`` default), asserted exact at the end. But the DP takes
  the largest reachable total ≤ its budget. Whatever is left is spread round-robin over the DP's prompts, and that
  can exceed ``max_n``. Here Σ n_i = budget exactly with every bound kept, or a ValueError before any work.
- **Fallback** (official ``allow_fallback=True``): each DP prompt has a cost c_i = log(1 − α) / log(max(p, 1 − p)),
  with α = 0.9: the rollouts needed for a mixed group with probability about α. If Σ_i int(min(max_n, c_i)) is below
  the remaining budget, the surplus goes round-robin to the p = 0 prompts, or to all non-DP prompts if there are
  none. The DP then gets only that estimated cost, which counts whole groups although it is compared with a budget of
  *extra* rollouts. With no DP prompt at all, the surplus goes to the p = 0 prompts, or else every prompt gets n̄.
  None of this is done here. The DP spends the whole budget on value. Only when every prompt with value is at n_max
  does the surplus go, by tie rule (2), evenly to the prompts with p ∈ {0, 1}.
- **The estimate p** (an input here; docs/allocation-design.md says where gdro gets it). Official
  (``verl/utils/dataset/rl_dataset.py``, ``update_sample_state`` / ``get_sample_state``): rewards −1 → 0. With the
  script's ``epoch_estimation`` and ``robust_epoch_estimation``, p is the mean of the last visit's rollouts when it
  drew ≥ ``reward_buffer_length`` = 16 of them. Otherwise p is the mean of the 16 most recent rollouts across visits.
  That is a per-rollout success rate, not a pass@k. An unseen prompt reads as [invalid, p = 0, count 0].
- **Ties.** Official: a strict ``>`` at each (prompt, budget) cell, so "don't allocate" wins first, then the smallest
  k. Backtracking then follows that choice table. Here the rule is (1)–(3) above.
- **Ranges.** Official script (``examples/knapsack_trainer/run_knapsack_grpo_7b.sh``): n̄ = 8, min_n = 2, max_n = 128,
  negative_n = positive_n = 2. Here n_min ≥ 1 (a group needs a rollout; value(0, p) < 0 would be meaningless).
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["brute_force_allocate", "knapsack_allocate", "rollout_value", "value_table"]


def rollout_value(n: int, p: Any) -> Any:
    """value(n, p) = (1 − pⁿ − (1 − p)ⁿ) · p (1 − p)² for one prompt; exact for a ``Fraction`` p, else a float."""
    q = 1 - p
    return (1 - p**n - q**n) * p * q**2


def value_table(p: np.ndarray, arms: np.ndarray) -> np.ndarray:
    """``(G, A)`` float64 table of value(arms[a], p[i]) (vectorised :func:`rollout_value`)."""
    return _values(np.asarray(p, dtype=np.float64)[:, None], np.asarray(arms, dtype=np.float64)[None, :])


def _values(p: np.ndarray, n: np.ndarray) -> np.ndarray:
    """value(n, p) elementwise over broadcast float arrays."""
    q = 1.0 - p
    return (1.0 - p**n - q**n) * p * q**2


def _bounds(p: Any, n_min: Any, n_max: Any, budget: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Inputs checked: p in [0, 1], integer bounds 1 ≤ n_min_i ≤ n_max_i (scalars broadcast), a reachable budget."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"p must be a non-empty 1-D array of pass-rate estimates, got shape {p.shape}")
    if not np.all((p >= 0) & (p <= 1)):  # NaN fails this too
        raise ValueError(f"p must lie in [0, 1] (no NaN: give unseen prompts a prior), got {p[~((p >= 0) & (p <= 1))]}")
    lo, hi = (np.broadcast_to(np.asarray(x), p.shape) for x in (n_min, n_max))
    for name, x in (("n_min", lo), ("n_max", hi)):
        if x.dtype.kind not in "iu" or x.min() < 1:
            raise ValueError(f"{name} must be integers >= 1, got {np.unique(x)}")
    if np.any(lo > hi):
        bad = int(np.argmax(lo > hi))
        raise ValueError(f"n_min must be <= n_max for every prompt, got n_min={lo[bad]} > n_max={hi[bad]}")
    if isinstance(budget, (bool, np.bool_)) or not isinstance(budget, (int, np.integer)):
        raise ValueError(f"budget must be an int, got {budget!r}")  # noqa: TRY004 (project: ValueError naming arg)
    low, high = int(lo.sum()), int(hi.sum())
    if not low <= budget <= high:
        raise ValueError(f"budget {budget} cannot be met exactly by {p.size} prompts: "
                         f"Σ n_min = {low}, Σ n_max = {high}")
    return p, lo.astype(np.int64), hi.astype(np.int64), int(budget)


def knapsack_allocate(p: Any, budget: int, n_min: Any = 2, n_max: Any = 128, *, floor_credit: bool = True,
                      tie_rtol: float = 1e-9) -> np.ndarray:
    """Rollouts per prompt maximising Σ_i value(n_i, p_i) with Σ_i n_i == budget and n_min_i ≤ n_i ≤ n_max_i.

    Args:
        p: ``(G,)`` per-rollout success-rate estimates in [0, 1].
        budget: the step's exact total of rollouts.
        n_min, n_max: integer bounds, scalars or ``(G,)`` arrays (equal entries pin a prompt).
        floor_credit: False = the official objective, a prompt at its n_min is worth 0 (module docstring).
        tie_rtol: totals within ``tie_rtol`` × (Σ_i max_n value) of the best are tied (tie rules in the docstring).

    Returns:
        ``(G,)`` int64 allocation. Raises ValueError (one line) on bad inputs or an unreachable budget.

    DP over prompts from last to first: ``best[w]``/``even[w]`` hold the (value, Σn²) of the tie-rule-best allocation
    of the prompts after i that uses ``w`` extra rollouts above their n_min; prompt i tries every k extra and keeps,
    per w, the tied-best value, then the smallest Σn², then the smallest k. Reading the choices forward from
    prompt 0 then gives the lexicographically smallest optimum. O(G · K · W) time, O(G · W) memory, with K the widest
    range n_max − n_min + 1 and W = budget − Σ n_min + 1.
    """
    p, lo, hi, budget = _bounds(p, n_min, n_max, budget)
    if not (np.isfinite(tie_rtol) and tie_rtol >= 0):
        raise ValueError(f"tie_rtol must be finite and >= 0, got {tie_rtol}")
    g, spare = len(p), budget - int(lo.sum())
    width = int((hi - lo).max()) + 1
    n = lo[:, None] + np.arange(width)[None, :]  # (G, K): prompt i's k-th option is n_min_i + k rollouts
    vals = _values(p[:, None], n.astype(np.float64))
    vals[np.arange(width)[None, :] > (hi - lo)[:, None]] = -np.inf  # k beyond n_max_i is forbidden
    if not floor_credit:
        vals[:, 0] = 0.0
    tol = tie_rtol * float(np.where(np.isfinite(vals), np.abs(vals), 0.0).max(axis=1).sum())
    best = np.full(spare + 1, -np.inf)
    best[0] = 0.0
    even = np.zeros(spare + 1)  # Σ n² of the chosen suffix (exact integers in float64 up to 2**53)
    choice = np.zeros((g, spare + 1), dtype=np.int64)
    for i in range(g - 1, -1, -1):
        best, even, choice[i] = _relax(best, even, vals[i], lo[i], tol)
    if not np.isfinite(best[spare]):  # unreachable after the checks in _bounds; kept as a guard
        raise ValueError(f"budget {budget} cannot be met exactly")
    out, w = np.empty(g, dtype=np.int64), spare
    for i in range(g):
        k = int(choice[i, w])
        out[i], w = lo[i] + k, w - k
    return out


def _relax(best: np.ndarray, even: np.ndarray, vals: np.ndarray, lo: int, tol: float):
    """Add one prompt in front of the suffix: for every total w of extras, its best k by the tie rule."""
    size, width = len(best), len(vals)
    cand = np.full((width, size), -np.inf)
    sq = np.full((width, size), np.inf)
    for k in range(min(width, size)):
        if np.isfinite(vals[k]):
            cand[k, k:] = best[: size - k] + vals[k]
            sq[k, k:] = even[: size - k] + float((lo + k) ** 2)
    top = cand.max(axis=0)
    reach = np.isfinite(top)
    tied = np.isfinite(cand) & (cand >= (top - tol)[None, :])
    sq_tied = np.where(tied, sq, np.inf)
    pick = np.argmax(tied & (sq_tied == sq_tied.min(axis=0)[None, :]), axis=0)  # first (smallest) k among the tied
    cols = np.arange(size)
    new_best = np.where(reach, cand[pick, cols], -np.inf)
    new_even = np.where(reach, sq[pick, cols], 0.0)
    return new_best, new_even, np.where(reach, pick, 0)


def brute_force_allocate(p: Any, budget: int, n_min: Any = 2, n_max: Any = 128, *,
                         floor_credit: bool = True) -> np.ndarray:
    """:func:`knapsack_allocate` by enumeration, in exact rational arithmetic (floats are converted exactly): the
    largest Σ value (exact ties), then the smallest Σ n², then the lexicographically smallest n. For tests: the cost
    is Π_i (n_max_i − n_min_i + 1)."""
    p_arr, lo, hi, budget = _bounds(p, n_min, n_max, budget)
    ps = [x if isinstance(x, Fraction) else Fraction(float(x)) for x in (p_arr if isinstance(p, np.ndarray) else p)]
    table = [{n: (Fraction(0) if (n == l and not floor_credit) else rollout_value(n, q)) for n in range(l, h + 1)}
             for q, l, h in zip(ps, lo.tolist(), hi.tolist())]
    best_key, best_n = None, None
    for n in itertools.product(*(range(l, h + 1) for l, h in zip(lo.tolist(), hi.tolist()))):
        if sum(n) != budget:
            continue
        key = (-sum(t[x] for t, x in zip(table, n)), sum(x * x for x in n), n)  # min key = the tie rule
        if best_key is None or key < best_key:
            best_key, best_n = key, n
    return np.asarray(best_n, dtype=np.int64)
