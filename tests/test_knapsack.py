"""Knapsack RL's value and exact-budget DP (gdro/controllers/knapsack.py): hand-computed values, the DP against
exact brute force and against the greedy optimum of a separable concave objective, budget exactness, infeasible
inputs, p ∈ {0, 1}, the official objective (``floor_credit=False``) and determinism."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import numpy as np
import pytest

from gdro.controllers.knapsack import brute_force_allocate, knapsack_allocate, rollout_value, value_table

GRID = [F(0), F(1, 10), F(1, 4), F(1, 3), F(1, 2), F(2, 3), F(3, 4), F(1)]  # exact ties happen on a grid


def _total(p, n, floor_credit=True, n_min=None):
    return sum(0.0 if (not floor_credit and x == n_min) else float(rollout_value(int(x), float(q)))
               for q, x in zip(p, n))


# ------------------------------------------------------------------------------------------------------ value
@pytest.mark.parametrize("n, p, expected", [
    (2, F(1, 2), F(1, 16)),    # (1 − 1/4 − 1/4) · 1/2 · 1/4
    (3, F(1, 2), F(3, 32)),    # (1 − 1/8 − 1/8) · 1/8
    (3, F(1, 3), F(8, 81)),    # (1 − 1/27 − 8/27) · 1/3 · 4/9 = 2/3 · 4/27
    (2, F(1, 4), F(27, 512)),  # (1 − 1/16 − 9/16) · 1/4 · 9/16 = 3/8 · 9/64
    (4, F(2, 3), F(128, 2187)),  # (1 − 16/81 − 1/81) · 2/3 · 1/9 = 64/81 · 2/27
])
def test_value_hand_computed(n, p, expected):
    assert rollout_value(n, p) == expected
    assert value_table(np.array([float(p)]), np.array([n]))[0, 0] == pytest.approx(float(expected), rel=1e-15)


def test_value_zero_without_a_mixed_group():
    # one rollout can never be mixed; p ∈ {0, 1} never gives a mixed group nor a gradient-size term
    assert all(rollout_value(1, q) == 0 for q in GRID)
    assert all(rollout_value(n, F(0)) == 0 and rollout_value(n, F(1)) == 0 for n in range(1, 20))
    table = value_table(np.array([0.0, 1.0]), np.arange(1, 129))
    assert np.all(table == 0.0)


def test_value_increasing_and_concave_in_n_and_peaks_at_one_third():
    for q in GRID[1:-1]:  # exact: in floats the increments underflow below 1's resolution for large n
        v = [rollout_value(n, q) for n in range(1, 41)]
        d = [b - a for a, b in itertools.pairwise(v)]
        assert all(x > 0 for x in d) and all(b < a for a, b in itertools.pairwise(d))
    # as n → ∞ the value tends to p(1 − p)², maximal at p = 1/3 ((1 − p)(1 − 3p) = 0)
    p = np.linspace(0.01, 0.99, 99)
    assert p[np.argmax(value_table(p, np.array([64]))[:, 0])] == pytest.approx(1 / 3, abs=0.005)


# --------------------------------------------------------------------------------------- DP vs references
def _random_instance(rng, exact):
    g = int(rng.integers(1, 6))
    p = [GRID[i] for i in rng.integers(0, len(GRID), size=g)] if exact else list(rng.random(g))
    lo = rng.integers(1, 4, size=g)
    hi = np.minimum(lo + rng.integers(0, 4, size=g), 6)
    scalar = rng.random() < 0.5
    if scalar:
        lo, hi = int(rng.integers(1, 4)), int(rng.integers(3, 7))
        budget = int(rng.integers(g * lo, g * hi + 1))
    else:
        budget = int(rng.integers(lo.sum(), hi.sum() + 1))
    return p, budget, lo, hi


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("floor_credit", [True, False])
def test_dp_equals_brute_force(exact, floor_credit):
    """≤ 5 prompts, n ∈ [1, 6], scalar and per-prompt bounds: the same allocation (tie rule included)."""
    rng = np.random.default_rng(31 + 2 * exact + floor_credit)
    for _ in range(150):
        p, budget, lo, hi = _random_instance(rng, exact)
        want = brute_force_allocate(p, budget, lo, hi, floor_credit=floor_credit)
        got = knapsack_allocate(np.array([float(q) for q in p]), budget, lo, hi, floor_credit=floor_credit)
        assert got.tolist() == want.tolist(), (p, budget, lo, hi)
        assert got.sum() == budget


def test_dp_equals_greedy_at_scale():
    """value is concave in n, so adding rollouts one at a time to the largest marginal gain is optimal: an
    independent reference at the official scale (256 prompts would be slow on CPU; 64 prompts, n̄ = 8, n ∈ [2, 128])."""
    rng = np.random.default_rng(7)
    for g, n_bar, hi in ((64, 8, 128), (32, 4, 12), (16, 8, 24)):
        p = np.where(rng.random(g) < 0.3, rng.integers(0, 2, g).astype(float), rng.random(g))
        n = knapsack_allocate(p, g * n_bar, 2, hi)
        greedy = np.full(g, 2)
        for _ in range(g * n_bar - 2 * g):
            gain = np.where(greedy < hi, value_table(p, np.arange(1, hi + 2))[np.arange(g), greedy]
                            - value_table(p, np.arange(1, hi + 2))[np.arange(g), greedy - 1], -np.inf)
            greedy[int(np.argmax(gain))] += 1
        assert n.sum() == g * n_bar and n.min() >= 2 and n.max() <= hi
        assert _total(p, n) == pytest.approx(_total(p, greedy), rel=1e-12)
        assert _total(p, n) > _total(p, np.full(g, n_bar))


# ------------------------------------------------------------------------------------- budget and bounds
def test_budget_exact_and_bounds_kept():
    rng = np.random.default_rng(3)
    for _ in range(50):
        g = int(rng.integers(1, 40))
        lo = rng.integers(1, 5, size=g)
        hi = lo + rng.integers(0, 10, size=g)
        budget = int(rng.integers(lo.sum(), hi.sum() + 1))
        n = knapsack_allocate(rng.random(g), budget, lo, hi)
        assert n.dtype == np.int64 and n.sum() == budget and np.all((lo <= n) & (n <= hi))


@pytest.mark.parametrize("budget, match", [
    (5, r"budget 5 cannot be met exactly by 3 prompts: Σ n_min = 6, Σ n_max = 12"),
    (13, r"budget 13 cannot be met exactly by 3 prompts: Σ n_min = 6, Σ n_max = 12"),
])
def test_infeasible_budget_rejected_in_one_line(budget, match):
    with pytest.raises(ValueError, match=match) as err:
        knapsack_allocate([0.2, 0.5, 0.9], budget, 2, 4)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=match):
        brute_force_allocate([0.2, 0.5, 0.9], budget, 2, 4)


@pytest.mark.parametrize("kwargs, match", [
    ({"p": [0.5, np.nan], "budget": 4}, r"p must lie in \[0, 1\]"),
    ({"p": [0.5, 1.5], "budget": 4}, r"p must lie in \[0, 1\]"),
    ({"p": [], "budget": 0}, r"non-empty"),
    ({"p": [0.5], "budget": 4, "n_min": 0}, r"n_min must be integers >= 1"),
    ({"p": [0.5], "budget": 4, "n_min": 2.5}, r"n_min must be integers >= 1"),
    ({"p": [0.5], "budget": 4, "n_min": 5, "n_max": 3}, r"n_min must be <= n_max"),
    ({"p": [0.5], "budget": 4.0}, r"budget must be an int"),
])
def test_bad_inputs_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        knapsack_allocate(**kwargs)


# ----------------------------------------------------------------------------------------------- p ∈ {0, 1}
def test_saturated_prompts_get_the_most_even_split():
    # every value is 0: the tie rule's most even allocation; 10 over 4 prompts -> two 3s, lexicographically last
    assert knapsack_allocate([0.0, 1.0, 1.0, 0.0], 10, 1, 6).tolist() == [2, 2, 3, 3]
    assert knapsack_allocate([0.0, 1.0, 0.0], 24, 2, 24).tolist() == [8, 8, 8]


def test_budget_moves_from_saturated_to_mixed_prompts():
    # one learnable prompt takes all it can (value strictly increasing); the rest stay at n_min, or share evenly
    # what the learnable prompt cannot take
    assert knapsack_allocate([0.0, 0.5, 1.0], 24, 2, 20).tolist() == [2, 20, 2]
    assert knapsack_allocate([0.0, 0.5, 1.0], 30, 2, 20).tolist() == [5, 20, 5]


# ------------------------------------------------------------------------------ ties, official objective
def test_tie_rule_by_hand():
    # p = (1/2, 1/2), 5 rollouts in [1, 6]: (2, 3) and (3, 2) are worth 1/16 + 3/32 = 5/32 each, more than
    # (1, 4): 0 + 7/64; equal Σ n², so the lexicographically smallest (2, 3) wins
    assert knapsack_allocate([0.5, 0.5], 5, 1, 6).tolist() == [2, 3]


def test_official_objective_differs_by_hand():
    # p = (1/3, 2/3), 6 rollouts in [2, 4]; value(·, 1/3) = 16/243, 24/243, 256/2187 and value(·, 2/3) = 8/243,
    # 12/243, 128/2187 for n = 2, 3, 4. Crediting every prompt: (4, 2) = 328/2187 > (3, 3) = 324/2187 > (2, 4);
    # the official DP values a prompt left at n_min as 0: (3, 3) = 324/2187 > (4, 2) = 256/2187.
    assert knapsack_allocate([1 / 3, 2 / 3], 6, 2, 4).tolist() == [4, 2]
    assert knapsack_allocate([1 / 3, 2 / 3], 6, 2, 4, floor_credit=False).tolist() == [3, 3]
    assert brute_force_allocate([F(1, 3), F(2, 3)], 6, 2, 4, floor_credit=False).tolist() == [3, 3]


def test_pinned_prompts_keep_their_count():
    # an unseen prompt pinned to n̄ (n_min_i = n_max_i = 8), as the official code treats invalid states
    n = knapsack_allocate([0.3, 0.5, 0.9, 0.0], 32, np.array([2, 8, 2, 2]), np.array([24, 8, 24, 24]))
    assert n[1] == 8 and n.sum() == 32


def test_deterministic():
    rng = np.random.default_rng(11)
    p = np.round(rng.random(24), 1)  # repeated values: many exact ties
    runs = [knapsack_allocate(p.copy(), 24 * 8, 2, 24) for _ in range(3)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


# ------------------------------------------------------------------------------------------------ allocator=knapsack
def _history(unseen_p: float = 0.5):
    """A classifier over 6 prompts: 0..3 seen (1/4, 2/4, 4/4, 0/4 correct), 4 and 5 never seen."""
    from gdro.common.interfaces import PromptPool
    from gdro.controllers.difficulty import OnlineDifficultyClassifier

    clf = OnlineDifficultyClassifier(unseen_p=unseen_p)
    clf.bind(PromptPool(tuple(f"p{i}" for i in range(6))))
    clf.record(np.arange(4), np.array([1, 2, 4, 0]), np.array([4, 4, 4, 4]))
    return clf


@pytest.mark.parametrize("floor_credit", [True, False])
def test_the_allocator_is_the_brute_force_optimum_on_the_classifiers_success_rates(floor_credit):
    from gdro.controllers.allocators import KnapsackAllocator

    clf = _history(unseen_p=0.25)
    alloc = KnapsackAllocator(n_min=2, n_max=6, floor_credit=floor_credit)
    alloc.bind(clf.bin_spec())
    alloc.check_budget(4)
    ids = np.array([0, 1, 2, 3, 4])
    n = alloc.allocate(ids, clf.bins(ids), 4, clf)
    p = [F(1, 4), F(1, 2), F(1), F(0), F(1, 4)]  # the classifier's success rates; the unseen prompt at its prior
    assert n.tolist() == brute_force_allocate(p, 20, 2, 6, floor_credit=floor_credit).tolist()
    assert n.sum() == 20 and n.dtype == np.int64
    m = alloc.metrics()
    assert m["gdro/knapsack/value"] == pytest.approx(float(sum(rollout_value(int(k), q) for k, q in zip(n, p))))
    assert m["gdro/knapsack/value_uniform"] == pytest.approx(float(sum(rollout_value(4, q) for q in p)))
    assert m["gdro/knapsack/p_mean"] == pytest.approx(float(sum(p)) / 5)
    assert m["gdro/knapsack/value"] >= m["gdro/knapsack/value_uniform"]


def test_unseen_fixed_pins_never_seen_prompts_at_the_mean():
    from gdro.controllers.allocators import KnapsackAllocator

    clf = _history()
    alloc = KnapsackAllocator(n_min=2, n_max=8, unseen="fixed")
    alloc.bind(clf.bin_spec())
    ids = np.array([4, 0, 5, 1])
    n = alloc.allocate(ids, clf.bins(ids), 4, clf)
    assert n[[0, 2]].tolist() == [4, 4]
    want = brute_force_allocate([F(1, 2), F(1, 4), F(1, 2), F(1, 2)], 16, [4, 2, 4, 2], [4, 8, 4, 8])
    assert n.tolist() == want.tolist()


def test_the_budget_is_exact_at_every_step_of_a_toy_history():
    from gdro.common.interfaces import PromptPool
    from gdro.controllers.allocators import KnapsackAllocator
    from gdro.controllers.difficulty import OnlineDifficultyClassifier

    rng = np.random.default_rng(0)
    true_p = rng.random(20)
    clf = OnlineDifficultyClassifier()
    clf.bind(PromptPool(tuple(str(i) for i in range(20))))
    alloc = KnapsackAllocator(n_min=2, n_max=12)
    alloc.bind(clf.bin_spec())
    for _ in range(10):
        ids = rng.choice(20, size=8, replace=False)
        n = alloc.allocate(ids, clf.bins(ids), 4, clf)
        assert n.sum() == 32 and n.min() >= 2 and n.max() <= 12
        clf.record(ids, rng.binomial(n, true_p[ids]), n)
    assert alloc.state_dict() == {}
    with pytest.raises(ValueError, match="unseen"):
        KnapsackAllocator(unseen="sometimes")
