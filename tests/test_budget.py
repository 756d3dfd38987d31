"""Exact-budget DP (Eq. 19) and the square-root law (Theorem 4.2, Eq. 29–30): exactness, optimality, ties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdro.controllers.budget import (
    check_budget_feasible,
    exact_budget_select,
    sqrt_allocation,
    sqrt_closed_form,
    weighted_se,
)

FAST = settings(derandomize=True, deadline=None, max_examples=150)


def _instance(seed: int, integer_values: bool):
    """A small random instance (B ≤ 4, A ≤ 5) with some forbidden arms and a budget that is often feasible."""
    rng = np.random.default_rng(seed)
    n_bins, n_arms = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    arms = np.sort(rng.choice(np.arange(1, 9), size=n_arms, replace=False))
    counts = rng.integers(1, 5, size=n_bins)
    values = (
        rng.integers(0, 4, size=(n_bins, n_arms)).astype(float)
        if integer_values
        else rng.normal(size=(n_bins, n_arms))
    )
    values[rng.random(values.shape) < 0.15] = -np.inf
    if rng.random() < 0.7:
        budget = int(np.dot(counts, arms[rng.integers(0, n_arms, size=n_bins)]))
    else:
        budget = int(rng.integers(counts.sum() * arms[0], counts.sum() * arms[-1] + 1))
    prefer = int(rng.integers(1, 9))
    return values, counts, arms, budget, prefer


def _brute(values, counts, arms, budget):
    """All feasible (objective, n) pairs by enumeration."""
    out = []
    for idx in itertools.product(range(len(arms)), repeat=len(counts)):
        n = arms[list(idx)]
        obj = float(values[np.arange(len(counts)), list(idx)].sum())
        if int(np.dot(counts, n)) == budget and np.isfinite(obj):
            out.append((obj, n))
    return out


def _objective(values, arms, n):
    return float(values[np.arange(len(n)), np.searchsorted(arms, n)].sum())


@FAST
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_dp_matches_brute_force(seed, integer_values):
    values, counts, arms, budget, prefer = _instance(seed, integer_values)
    sols = _brute(values, counts, arms, budget)
    if not sols:
        with pytest.raises(ValueError, match="budget"):
            exact_budget_select(values, counts, arms, budget, prefer=prefer)
        return
    n = exact_budget_select(values, counts, arms, budget, prefer=prefer)
    assert int(np.dot(counts, n)) == budget and set(n.tolist()) <= set(arms.tolist())
    best = max(obj for obj, _ in sols)
    assert _objective(values, arms, n) == pytest.approx(best, abs=1e-9)
    optimal = [m for obj, m in sols if obj >= best - 1e-9]
    if integer_values:  # exact ties: the lexicographic second objective Σ|n_b − prefer| is minimised
        assert np.abs(n - prefer).sum() == min(np.abs(m - prefer).sum() for m in optimal)
    if len(optimal) == 1 and all(obj < best - 1e-6 for obj, m in sols if not np.array_equal(m, optimal[0])):
        np.testing.assert_array_equal(n, optimal[0])


@FAST
@given(st.integers(0, 2**32 - 1))
def test_total_is_exact_and_within_bounds(seed):
    rng = np.random.default_rng(seed)
    n_bins, n_min, n_max = int(rng.integers(1, 11)), int(rng.integers(1, 5)), int(rng.integers(5, 13))
    arms = np.arange(n_min, n_max + 1)
    counts = rng.integers(1, 60, size=n_bins)
    budget = int(rng.integers(counts.sum() * n_min, counts.sum() * n_max + 1))
    reachable = {0}
    for c in counts.tolist():
        reachable = {t + c * a for t in reachable for a in arms.tolist()}
    values = np.log(rng.dirichlet(np.ones(len(arms)), size=n_bins))
    if budget not in reachable:  # not every total in range is reachable (e.g. near the ends)
        with pytest.raises(ValueError, match=f"budget {budget} cannot be met exactly"):
            exact_budget_select(values, counts, arms, budget)
        budget = int(np.dot(counts, rng.integers(n_min, n_max + 1, size=n_bins)))
    n = exact_budget_select(values, counts, arms, budget)
    assert int(np.dot(counts, n)) == budget
    assert n.min() >= n_min and n.max() <= n_max


@FAST
@given(st.lists(st.integers(1, 50), min_size=1, max_size=10), st.integers(2, 12), st.floats(-5, 5))
def test_equal_values_give_prefer_everywhere(counts, n_bar, c):
    arms = np.arange(2, 13)
    counts = np.asarray(counts)
    n = exact_budget_select(
        np.full((len(counts), len(arms)), c), counts, arms, n_bar * int(counts.sum()), prefer=n_bar
    )
    assert n.tolist() == [n_bar] * len(counts)


@FAST
@given(st.integers(0, 2**32 - 1))
def test_permuting_bins_permutes_answer(seed):
    rng = np.random.default_rng(seed)
    n_bins, arms = int(rng.integers(2, 8)), np.arange(2, 13)
    counts = rng.integers(1, 30, size=n_bins)
    values = rng.normal(size=(n_bins, len(arms)))
    budget = 4 * int(counts.sum())
    perm = rng.permutation(n_bins)
    n = exact_budget_select(values, counts, arms, budget, prefer=4)
    n_perm = exact_budget_select(values[perm], counts[perm], arms, budget, prefer=4)
    np.testing.assert_array_equal(n_perm, n[perm])


def test_infeasible_budget_raises_naming_budget():
    with pytest.raises(ValueError, match="budget 9 cannot be met exactly"):  # parity: 2·n0 + 2·n1 is even
        exact_budget_select(np.zeros((2, 2)), np.array([2, 2]), np.array([2, 3]), 9)
    with pytest.raises(ValueError, match="budget 100 cannot be met exactly"):  # out of range
        exact_budget_select(np.zeros((2, 2)), np.array([2, 2]), np.array([2, 3]), 100)
    values = np.array([[0.0, -np.inf], [-np.inf, 0.0]])  # only (2, 3) allowed: total 10
    with pytest.raises(ValueError, match="budget 8 cannot be met exactly"):
        exact_budget_select(values, np.array([2, 2]), np.array([2, 3]), 8)
    assert exact_budget_select(values, np.array([2, 2]), np.array([2, 3]), 10).tolist() == [2, 3]


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="arms"):
        exact_budget_select(np.zeros((1, 2)), np.array([1]), np.array([3, 2]), 3)
    with pytest.raises(ValueError, match="counts"):
        exact_budget_select(np.zeros((1, 2)), np.array([0]), np.array([2, 3]), 0)
    with pytest.raises(ValueError, match="values"):
        exact_budget_select(np.zeros((2, 2)), np.array([1]), np.array([2, 3]), 2)
    with pytest.raises(ValueError, match="values"):
        exact_budget_select(np.full((1, 2), np.nan), np.array([1]), np.array([2, 3]), 2)
    assert exact_budget_select(np.zeros((0, 2)), np.zeros(0, dtype=int), np.array([2, 3]), 0).shape == (0,)


@pytest.mark.parametrize(
    ("n_bar", "n_min", "n_max", "key"),
    [
        (1, 2, 12, "n_bar"),
        (13, 2, 12, "n_bar"),
        (4, 0, 12, "n_min"),
        (4, 6, 5, "n_max"),
        (4.0, 2, 12, "n_bar"),
    ],
)
def test_check_budget_feasible_names_key(n_bar, n_min, n_max, key):
    with pytest.raises(ValueError, match=key):
        check_budget_feasible(n_bar, n_min, n_max)


def test_check_budget_feasible_accepts_edges():
    for n_bar in (2, 4, 12):
        check_budget_feasible(n_bar, 2, 12)


def _integral_case(rng):
    """Targets n_b in pairs n̄ ± d (equal counts within a pair) so Σ counts·n = n̄·Σ counts, and v_b ∝ n_b²."""
    n_min, n_max = int(rng.integers(1, 4)), int(rng.integers(6, 13))
    n_bar = int(rng.integers(n_min + 1, n_max))
    targets, counts = [], []
    for _ in range(int(rng.integers(1, 4))):
        d, c = int(rng.integers(1, min(n_bar - n_min, n_max - n_bar) + 1)), int(rng.integers(1, 20))
        targets += [n_bar + d, n_bar - d]
        counts += [c, c]
    if rng.random() < 0.5:
        targets.append(n_bar)
        counts.append(int(rng.integers(1, 20)))
    targets, counts = np.array(targets), np.array(counts)
    return targets, counts, rng.uniform(0.1, 3.0) * targets.astype(float) ** 2, n_bar, n_min, n_max


@FAST
@given(st.integers(0, 2**32 - 1))
def test_sqrt_allocation_equals_integral_closed_form(seed):
    targets, counts, v, n_bar, n_min, n_max = _integral_case(np.random.default_rng(seed))
    np.testing.assert_allclose(sqrt_closed_form(v, counts / counts.sum(), n_bar), targets, rtol=1e-12)
    np.testing.assert_allclose(sqrt_closed_form(v, counts, n_bar), targets, rtol=1e-12)  # q renormalised
    np.testing.assert_array_equal(sqrt_allocation(v, counts, n_bar, n_min, n_max), targets)
    # weighted SE with σ = √v: the (here integral) square-root allocation is no worse than uniform n̄
    q = counts / counts.sum()
    assert weighted_se(q, np.sqrt(v), targets) <= weighted_se(q, np.sqrt(v), np.full(len(v), n_bar)) + 1e-12


@FAST
@given(st.lists(st.integers(0, 40), min_size=1, max_size=10), st.integers(1, 30), st.integers(2, 8))
def test_sqrt_allocation_monotone_and_zero_variance(v_int, c, n_bar):
    v = np.asarray(v_int, dtype=float)
    counts = np.full(len(v), c)  # equal counts: an exchange argument makes the optimum monotone in v
    n = sqrt_allocation(v, counts, n_bar, 2, 12)
    assert int(np.dot(counts, n)) == n_bar * counts.sum() and n.min() >= 2 and n.max() <= 12
    for i, j in itertools.product(range(len(v)), repeat=2):
        if v[i] > v[j]:
            assert n[i] >= n[j]
    assert np.all(n[v == 0] <= n_bar)
    if np.all(v == v[0]):
        assert n.tolist() == [n_bar] * len(v)


@FAST
@given(st.integers(0, 2**32 - 1))
def test_sqrt_allocation_minimises_var_proxy(seed):
    rng = np.random.default_rng(seed)
    n_bins, n_bar = int(rng.integers(1, 8)), int(rng.integers(2, 9))
    counts, v = rng.integers(1, 40, size=n_bins), rng.exponential(size=n_bins) * (rng.random(n_bins) < 0.8)
    n = sqrt_allocation(v, counts, n_bar, 2, 12)
    assert int(np.dot(counts, n)) == n_bar * counts.sum() and n.min() >= 2 and n.max() <= 12
    assert np.sum(counts * v / n) <= np.sum(counts * v / n_bar) + 1e-12  # Σ q v/n: uniform n̄ is feasible
    if v.max() > 0:  # continuous optimum (Eq. 30): objective (Σ q √v)² / n̄ is a lower bound; SE beats uniform
        q = counts / counts.sum()
        assert np.sum(q * v / n) >= np.dot(q, np.sqrt(v)) ** 2 / n_bar - 1e-12
        n_star = sqrt_closed_form(v, q, n_bar)
        pos = v > 0
        assert np.dot(q, n_star) == pytest.approx(n_bar)
        se_uniform = weighted_se(q, np.sqrt(v), np.full(n_bins, n_bar))
        assert weighted_se(q[pos], np.sqrt(v[pos]), n_star[pos]) <= se_uniform * (1 + 1e-12)  # Cauchy–Schwarz


def test_sqrt_allocation_all_zero_variance_gives_n_bar():
    assert sqrt_allocation(np.zeros(4), np.array([3, 1, 7, 2]), 4, 2, 12).tolist() == [4, 4, 4, 4]


def test_closed_form_and_se_validation():
    with pytest.raises(ValueError, match="v"):
        sqrt_closed_form(np.zeros(3), np.ones(3), 4)
    with pytest.raises(ValueError, match="q"):
        sqrt_closed_form(np.ones(3), np.ones(2), 4)
    with pytest.raises(ValueError, match="n must be > 0"):
        weighted_se(np.ones(2), np.ones(2), np.array([1, 0]))
    assert weighted_se(np.array([0.5, 0.5]), np.array([2.0, 4.0]), np.array([4, 16])) == pytest.approx(1.0)
