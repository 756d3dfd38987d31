"""Rollout allocators: exact budget, bounds, shadow-price dynamics, square-root law, state round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdro.allocators import FixedAllocator, RolloutGDRO, SqrtAllocator


def _step(alloc, bins: np.ndarray, correct_p: dict[int, float], rng: np.random.Generator, signal=None):
    n = alloc.allocate(len(bins), bins)
    group_index = np.repeat(np.arange(len(bins)), n)
    p = np.array([correct_p.get(int(b), 0.5) for b in bins])[group_index]
    correct = rng.random(len(group_index)) < p
    sig = (1.0 - correct) if signal is None else signal(group_index, bins)
    alloc.update(bins=bins, group_index=group_index, signals={"failure_rate": sig, "pg_loss": sig, "pg_kl": sig},
                 correct=correct, n=n)
    return n


@given(st.lists(st.integers(0, 6), min_size=1, max_size=60), st.integers(2, 6), st.integers(0, 10_000))
def test_rollout_gdro_meets_budget_exactly_within_bounds(bins, n_bar, seed):
    rng = np.random.default_rng(seed)
    alloc = RolloutGDRO(n_bar=n_bar, n_min=2, n_max=3 * n_bar)
    bins = np.asarray(bins)
    for _ in range(4):  # scores move between steps; the budget must hold at every step
        n = _step(alloc, bins, {b: rng.random() for b in range(7)}, rng)
        assert n.sum() == n_bar * len(bins)
        assert n.min() >= 2 and n.max() <= 3 * n_bar
        for b in np.unique(bins):  # one arm per bin: every prompt of a bin gets the same n
            assert len(set(n[bins == b].tolist())) == 1


def test_equal_scores_give_n_bar_everywhere():
    alloc = RolloutGDRO(n_bar=4, n_min=2, n_max=12)
    bins = np.array([0, 0, 1, 2, 2, 2, 9])
    assert alloc.allocate(len(bins), bins).tolist() == [4] * 7


def test_mu_rises_when_consumption_exceeds_budget_and_falls_below():
    alloc = RolloutGDRO(n_bar=4, n_min=2, n_max=12, alpha_mu=0.1)
    bins = np.zeros(8, dtype=np.int64)
    rng = np.random.default_rng(0)
    # make the big arms attractive: the arm distribution then asks for more than n̄ (expected consumption)
    alloc.scores[0] = np.linspace(0.0, 20.0, len(alloc.arms))
    mu0 = alloc.mu
    _step(alloc, bins, {0: 0.5}, rng)
    assert alloc.metrics()["gdro/consumption"] > 4 and alloc.mu > mu0
    alloc.scores[0] = np.linspace(20.0, 0.0, len(alloc.arms))
    mu1 = alloc.mu
    _step(alloc, bins, {0: 0.5}, rng)
    assert alloc.metrics()["gdro/consumption"] < 4 and alloc.mu < mu1


def test_realized_consumption_keeps_mu_inert_as_in_the_released_code():
    alloc = RolloutGDRO(n_bar=4, consumption="realized")
    alloc.scores[0] = np.linspace(0.0, 5.0, len(alloc.arms))
    _step(alloc, np.zeros(8, dtype=np.int64), {0: 0.5}, np.random.default_rng(0))
    assert alloc.mu == 0.0


@pytest.mark.parametrize("mode", ["official", "paper"])
def test_arm_scores_follow_the_chosen_direction(mode):
    """official: arms that met high loss gain score (adversarial); paper: arms with low loss + μn gain."""
    alloc = RolloutGDRO(n_bar=4, score_update=mode, alpha_mu=0.0)
    bins = np.zeros(4, dtype=np.int64)
    _step(alloc, bins, {0: 0.5}, np.random.default_rng(0), signal=lambda g, b: np.ones(len(g)))  # loss 1
    s = alloc.scores[0][4 - alloc.n_min]
    assert (s > 0) if mode == "official" else (s < 0)


def test_sqrt_allocator_gives_more_rollouts_to_high_variance_bins_and_meets_budget():
    alloc = SqrtAllocator(n_bar=8, n_min=2, n_max=24)
    rng = np.random.default_rng(1)
    bins = np.repeat(np.arange(3), [10, 10, 12])
    p = {0: 0.02, 1: 0.5, 2: 0.98}
    for _ in range(5):
        n = _step(alloc, bins, p, rng)
        assert n.sum() == 8 * len(bins) and n.min() >= 2 and n.max() <= 24
    m = alloc.metrics()
    assert m["gdro/wse"] <= m["gdro/wse_uniform"] + 1e-12
    assert m["gdro/rollouts/1"] > m["gdro/rollouts/0"] and m["gdro/rollouts/1"] > m["gdro/rollouts/2"]
    assert abs(sum(v for k, v in m.items() if k.startswith("gdro/budget_share/")) - 1) < 1e-12


def test_state_round_trip():
    rng = np.random.default_rng(2)
    a = RolloutGDRO(n_bar=4)
    bins = rng.integers(0, 5, size=30)
    for _ in range(3):
        _step(a, bins, {b: rng.random() for b in range(5)}, rng)
    b = RolloutGDRO(n_bar=4)
    b.load_state_dict(a.state_dict())
    assert b.mu == a.mu and np.array_equal(a.allocate(30, bins), b.allocate(30, bins))
    s = SqrtAllocator(n_bar=4)
    _step(s, bins, {0: 0.3}, rng)
    t = SqrtAllocator(n_bar=4)
    t.load_state_dict(s.state_dict())
    assert np.array_equal(s.allocate(30, bins), t.allocate(30, bins))


@pytest.mark.parametrize(
    ("cls", "kwargs", "key"),
    [
        (RolloutGDRO, {"n_bar": 1, "n_min": 2}, "n_bar"),
        (RolloutGDRO, {"n_bar": 13, "n_max": 12}, "n_bar"),
        (SqrtAllocator, {"n_bar": 30, "n_max": 24}, "n_bar"),
        (RolloutGDRO, {"n_bar": 4, "eta": 0}, "eta"),
        (RolloutGDRO, {"n_bar": 4, "gamma": 0}, "gamma"),
        (RolloutGDRO, {"n_bar": 4, "score_update": "vibes"}, "score_update"),
        (RolloutGDRO, {"n_bar": 4, "consumption": "x"}, "consumption"),
        (FixedAllocator, {"n": 0}, "n"),
    ],
)
def test_bad_values_name_the_key(cls, kwargs, key):
    with pytest.raises(ValueError, match=key):
        cls(**kwargs)


def test_lagrangian_moves_rollouts_to_high_loss_bins_under_the_budget():
    """Default update: the high-loss bin gets more than n̄, the low-loss bin fewer, every step meets the budget
    exactly, and the dual variable settles where the arm distributions ask for n̄ on average (Eq. 21)."""
    alloc = RolloutGDRO(n_bar=8, n_min=2, n_max=24, alpha_mu=0.2)
    bins = np.repeat([0, 1], [16, 16])
    rng = np.random.default_rng(0)
    for _ in range(60):
        n = _step(alloc, bins, {0: 0.1, 1: 0.9}, rng)  # bin 0: failure ≈ 0.9, bin 1: failure ≈ 0.1
        assert n.sum() == 8 * 32
    assert n[bins == 0][0] > 8 > n[bins == 1][0]
    assert abs(alloc.metrics()["gdro/consumption"] - 8) < 1.0 and alloc.mu > 0
