"""Rollout allocators: exact budget, bounds, shadow-price dynamics, square-root law, state round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdro.common.interfaces import BinSpec, StepFeedback
from gdro.controllers.allocators import FixedAllocator, RolloutGDRO, RolloutGDROVariance, SqrtAllocator


def feedback(ids: np.ndarray, bins: np.ndarray, group_index: np.ndarray, correct: np.ndarray,
             pg_loss: np.ndarray | None = None) -> StepFeedback:
    """A step's ``StepFeedback`` (rollouts per prompt counted from ``group_index``, no KL; pg_loss zero if not given)."""
    group_index = np.asarray(group_index, dtype=np.int64)
    rows = len(group_index)
    return StepFeedback(ids=ids, bins=bins, n=np.bincount(group_index, minlength=len(bins)), group_index=group_index,
                        correct=correct, pg_loss=np.zeros(rows) if pg_loss is None else pg_loss, kl=np.zeros(rows),
                        beta_kl=0.0)


def _step(alloc, bins: np.ndarray, n_bar: int, correct_p: dict[int, float], rng: np.random.Generator, signal=None):
    """One step of ``len(bins)`` prompts under the budget ``n_bar × len(bins)``; returns the allocation.

    The per-rollout loss is 1 − correct, or ``signal(group_index, bins)`` fed as ``pg_loss`` (then the allocator
    must be built with ``signal="pg_loss"``); with the default it reaches the allocator under every signal name.
    """
    bins = np.asarray(bins, dtype=np.int64)
    n = alloc.allocate(np.arange(len(bins)), bins, n_bar, None)
    group_index = np.repeat(np.arange(len(bins)), n)
    p = np.array([correct_p.get(int(b), 0.5) for b in bins])[group_index]
    correct = rng.random(len(group_index)) < p
    sig = (1.0 - correct) if signal is None else signal(group_index, bins)
    fb = feedback(np.arange(len(bins)), bins, group_index, correct, pg_loss=sig)
    if signal is None:
        assert all(np.array_equal(fb.signal(name), sig) for name in ("failure_rate", "pg_loss", "pg_kl"))
    alloc.update(fb)
    return n


@given(st.lists(st.integers(0, 6), min_size=1, max_size=60), st.integers(2, 6), st.integers(0, 10_000))
def test_rollout_gdro_meets_budget_exactly_within_bounds(bins, n_bar, seed):
    rng = np.random.default_rng(seed)
    alloc = RolloutGDRO(n_min=2, n_max=3 * n_bar)
    bins = np.asarray(bins)
    for _ in range(4):  # scores move between steps; the budget must hold at every step
        n = _step(alloc, bins, n_bar, {b: rng.random() for b in range(7)}, rng)
        assert n.sum() == n_bar * len(bins)
        assert n.min() >= 2 and n.max() <= 3 * n_bar
        for b in np.unique(bins):  # one arm per bin: every prompt of a bin gets the same n
            assert len(set(n[bins == b].tolist())) == 1


def test_equal_scores_give_n_bar_everywhere():
    alloc = RolloutGDRO(n_min=2, n_max=12)
    bins = np.array([0, 0, 1, 2, 2, 2, 9])
    assert alloc.allocate(np.arange(7), bins, 4, None).tolist() == [4] * 7


def test_mu_rises_when_consumption_exceeds_budget_and_falls_below():
    alloc = RolloutGDRO(n_min=2, n_max=12, alpha_mu=0.1)
    bins = np.zeros(8, dtype=np.int64)
    rng = np.random.default_rng(0)
    # make the big arms attractive: the arm distribution then asks for more than n̄ (expected consumption)
    alloc.scores[0] = np.linspace(0.0, 20.0, len(alloc.arms))
    mu0 = alloc.mu
    _step(alloc, bins, 4, {0: 0.5}, rng)
    assert alloc.metrics()["gdro/consumption"] > 4 and alloc.mu > mu0
    alloc.scores[0] = np.linspace(20.0, 0.0, len(alloc.arms))
    mu1 = alloc.mu
    _step(alloc, bins, 4, {0: 0.5}, rng)
    assert alloc.metrics()["gdro/consumption"] < 4 and alloc.mu < mu1


def test_realized_consumption_keeps_mu_inert_as_in_the_released_code():
    alloc = RolloutGDRO(n_min=2, n_max=12, consumption="realized")
    alloc.scores[0] = np.linspace(0.0, 5.0, len(alloc.arms))
    _step(alloc, np.zeros(8, dtype=np.int64), 4, {0: 0.5}, np.random.default_rng(0))
    assert alloc.mu == 0.0


@pytest.mark.parametrize("mode", ["official", "paper"])
def test_arm_scores_follow_the_chosen_direction(mode):
    """official: arms that met high loss gain score (adversarial); paper: arms with low loss + μn gain."""
    alloc = RolloutGDRO(n_min=2, n_max=12, score_update=mode, alpha_mu=0.0, signal="pg_loss")
    bins = np.zeros(4, dtype=np.int64)
    _step(alloc, bins, 4, {0: 0.5}, np.random.default_rng(0), signal=lambda g, b: np.ones(len(g)))  # loss 1
    s = alloc.scores[0][4 - alloc.n_min]
    assert (s > 0) if mode == "official" else (s < 0)


def test_sqrt_allocator_gives_more_rollouts_to_high_variance_bins_and_meets_budget():
    alloc = SqrtAllocator(n_min=2, n_max=24)
    alloc.bind(BinSpec(("hard", "mid", "easy"), num_pass_bins=3))  # metric keys use the bins' labels
    rng = np.random.default_rng(1)
    bins = np.repeat(np.arange(3), [10, 10, 12])
    p = {0: 0.02, 1: 0.5, 2: 0.98}
    for _ in range(5):
        n = _step(alloc, bins, 8, p, rng)
        assert n.sum() == 8 * len(bins) and n.min() >= 2 and n.max() <= 24
    m = alloc.metrics()
    assert m["gdro/wse"] <= m["gdro/wse_uniform"] + 1e-12
    assert m["gdro/rollouts/mid"] > m["gdro/rollouts/hard"] and m["gdro/rollouts/mid"] > m["gdro/rollouts/easy"]
    assert m["gdro/variance/mid"] > m["gdro/variance/hard"]
    assert abs(sum(v for k, v in m.items() if k.startswith("gdro/budget_share/")) - 1) < 1e-12


def test_state_round_trip():
    rng = np.random.default_rng(2)
    a = RolloutGDRO(n_min=2, n_max=12)
    bins = rng.integers(0, 5, size=30)
    ids = np.arange(30)
    for _ in range(3):
        _step(a, bins, 4, {b: rng.random() for b in range(5)}, rng)
    b = RolloutGDRO(n_min=2, n_max=12)
    b.load_state_dict(a.state_dict())
    assert b.mu == a.mu and np.array_equal(a.allocate(ids, bins, 4, None), b.allocate(ids, bins, 4, None))
    s = SqrtAllocator(n_min=2, n_max=12)
    _step(s, bins, 4, {0: 0.3}, rng)
    t = SqrtAllocator(n_min=2, n_max=12)
    t.load_state_dict(s.state_dict())
    assert np.array_equal(s.allocate(ids, bins, 4, None), t.allocate(ids, bins, 4, None))


@pytest.mark.parametrize(
    ("cls", "kwargs", "key"),
    [
        (RolloutGDRO, {"n_min": 0}, "n_min"),
        (SqrtAllocator, {"n_min": 5, "n_max": 4}, "n_max"),
        (RolloutGDRO, {"eta": 0}, "eta"),
        (RolloutGDRO, {"gamma": 0}, "gamma"),
        (RolloutGDRO, {"score_update": "vibes"}, "score_update"),
        (RolloutGDRO, {"consumption": "x"}, "consumption"),
        (RolloutGDRO, {"signal": "loss"}, "signal"),
        (SqrtAllocator, {"beta_ema": 0}, "beta_ema"),
        (SqrtAllocator, {"v_prior": 0.3}, "v_prior"),
    ],
)
def test_bad_values_name_the_key(cls, kwargs, key):
    with pytest.raises(ValueError, match=key):
        cls(**kwargs)


# The mean budget n̄ is no constructor argument: it is passed with every allocate(), which derives the step's budget
# n̄ × #prompts from it; whether it can be met is checked once, before a run (check_budget), not at every step.
@pytest.mark.parametrize(
    ("make", "n_bar", "match"),
    [
        (lambda: RolloutGDRO(n_min=2), 1, "n_bar must be >= n_min"),
        (lambda: RolloutGDRO(n_max=12), 13, "n_bar must be <= n_max"),
        (lambda: SqrtAllocator(n_max=24), 30, "n_bar must be <= n_max"),
        (lambda: SqrtAllocator(n_min=3), 2, "n_bar must be >= n_min"),
        (FixedAllocator, 0, "mean budget must be >= 1"),
    ],
)
def test_infeasible_mean_budget_is_refused(make, n_bar, match):
    with pytest.raises(ValueError, match=match):
        make().check_budget(n_bar)


@pytest.mark.parametrize("make", [FixedAllocator, RolloutGDRO, SqrtAllocator])
def test_the_budget_is_the_mean_times_the_prompts_and_a_step_needs_one(make):
    alloc = make()
    alloc.bind(BinSpec(("0", "1", "unseen"), num_pass_bins=2))
    for n_bar in (2, 4, 12):
        alloc.check_budget(n_bar)  # feasible: no error
        assert alloc.allocate(np.arange(3), np.array([0, 1, 1]), n_bar, None).sum() == 3 * n_bar
    if not isinstance(alloc, FixedAllocator):
        with pytest.raises(ValueError, match="at least one prompt"):
            alloc.allocate(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 8, None)


@pytest.mark.parametrize("n_bar", [1, 4, 7])
def test_fixed_allocator_gives_every_prompt_the_mean_budget(n_bar):
    alloc = FixedAllocator()
    alloc.bind(BinSpec(("0", "1", "unseen"), num_pass_bins=2))
    bins = np.array([2, 0, 1, 1, 0])
    n = alloc.allocate(np.arange(5), bins, n_bar, None)
    assert n.dtype == np.int64 and n.tolist() == [n_bar] * 5
    _step(alloc, bins, n_bar, {}, np.random.default_rng(0))
    assert alloc.metrics() == {} and alloc.state_dict() == {}


def test_lagrangian_moves_rollouts_to_high_loss_bins_under_the_budget():
    """Default update: the high-loss bin gets more than n̄, the low-loss bin fewer, every step meets the budget
    exactly, and the dual variable settles where the arm distributions ask for n̄ on average (Eq. 21)."""
    alloc = RolloutGDRO(n_min=2, n_max=24, alpha_mu=0.2)
    bins = np.repeat([0, 1], [16, 16])
    rng = np.random.default_rng(0)
    for _ in range(60):
        n = _step(alloc, bins, 8, {0: 0.1, 1: 0.9}, rng)  # bin 0: failure ≈ 0.9, bin 1: failure ≈ 0.1
        assert n.sum() == 8 * 32
    assert n[bins == 0][0] > 8 > n[bins == 1][0]
    assert abs(alloc.metrics()["gdro/consumption"] - 8) < 1.0 and alloc.mu > 0


@pytest.mark.parametrize("make", [FixedAllocator, lambda: RolloutGDRO(n_min=2, n_max=12, alpha_mu=0.2), SqrtAllocator])
def test_each_step_spends_its_own_budget(make):
    """n̄ is passed with every call: a step with another mean (or prompt count) meets its own budget exactly."""
    alloc, rng = make(), np.random.default_rng(3)
    for g, n_bar in [(12, 4), (12, 8), (7, 2), (20, 6), (12, 4)]:
        bins = rng.integers(0, 4, size=g)
        n = _step(alloc, bins, n_bar, {0: 0.1, 1: 0.4, 2: 0.6, 3: 0.9}, rng)
        assert n.sum() == n_bar * g and n.min() >= 1
        if not isinstance(alloc, FixedAllocator):
            assert alloc.n_bar == n_bar and n.min() >= alloc.n_min and n.max() <= alloc.n_max


# ------------------------------------------------------------------------------------------------ variance signal
def test_the_informative_signal_is_one_for_every_rollout_of_a_mixed_group():
    # groups: 0 -> 2/3 correct (mixed), 1 -> 2/2 (solved), 2 -> 0/1 (unsolved), 3 -> 1/2 (mixed)
    fb = feedback(np.arange(4), np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1, 1, 2, 3, 3]),
                  np.array([1, 1, 0, 1, 1, 0, 0, 1], dtype=bool))
    assert fb.signal("informative").tolist() == [1, 1, 1, 0, 0, 0, 1, 1]
    # frontier by hand: 4·(2/3)(1/3) = 8/9 for group 0, 0, 0, 4·(1/2)(1/2) = 1 for group 3
    assert fb.signal("frontier").tolist() == pytest.approx([8 / 9] * 3 + [0, 0, 0, 1, 1])


def _three_bin_run(alloc: RolloutGDRO, steps: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Bin 0 learns (exactly half of each group right), bin 1 is solved (all right), bin 2 unsolved (all wrong)."""
    alloc.bind(BinSpec(("0", "1", "2"), num_pass_bins=3))
    bins = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    for _ in range(steps):
        n = alloc.allocate(np.arange(9), bins, 4, None)
        assert n.sum() == 36
        group_index = np.repeat(np.arange(9), n)
        rank = np.arange(len(group_index)) - np.r_[0, np.cumsum(n)[:-1]][group_index]  # position in its group
        correct = np.where(bins[group_index] == 0, rank % 2 == 0, bins[group_index] == 1)
        alloc.update(feedback(np.arange(9), bins, group_index, correct))
    return bins, n


@pytest.mark.parametrize("signal", ["frontier", "informative"])
def test_the_variance_signal_moves_rollouts_to_the_learning_bin_and_away_from_saturated_ones(signal):
    bins, n = _three_bin_run(RolloutGDROVariance(n_min=2, n_max=12, signal=signal))
    assert n[bins == 0].min() > 4 and n[bins == 1].max() < 4 and n[bins == 2].max() < 4


def test_the_paper_default_is_unchanged_and_feeds_the_unsolved_bin():
    paper = RolloutGDRO(n_min=2, n_max=12)
    assert (paper.signal, paper.score_update) == ("failure_rate", "lagrangian")
    bins, n = _three_bin_run(paper)
    assert n[bins == 2].min() > 4 and n[bins == 1].max() < 4  # failure rate: the unsolved bin gets the surplus


def test_the_variance_option_takes_only_variance_signals():
    assert RolloutGDROVariance().signal == "frontier"
    with pytest.raises(ValueError, match="signal must be frontier | informative"):
        RolloutGDROVariance(signal="failure_rate")


# ------------------------------------------------------------------ dual dynamics options (issue #36)
def test_rest_consumption_is_the_arm_grid_mean():
    assert RolloutGDRO(n_min=2, n_max=12).rest_consumption() == pytest.approx(7.0)
    assert RolloutGDRO(n_min=2, n_max=6).rest_consumption() == pytest.approx(4.0)  # a grid symmetric around n̄ = 4


def test_mu_target_rest_measures_consumption_against_the_rest_mean_by_hand():
    """Equal scores: the arm distributions ask for 7 (the grid's mean) at n̄ = 4. Eq. 21 against n̄ moves μ by
    α(7 − 4); against the rest mean μ stays where it is."""
    bins = np.zeros(8, dtype=np.int64)
    for target, expected_mu in (("budget", 0.1 * (7.0 - 4.0)), ("rest", 0.0)):
        alloc = RolloutGDRO(n_min=2, n_max=12, alpha_mu=0.1, score_update="official", signal="pg_loss",
                            mu_target=target)
        _step(alloc, bins, 4, {0: 0.5}, np.random.default_rng(0), signal=lambda g, b: np.zeros(len(g)))
        assert alloc.metrics()["gdro/consumption"] == pytest.approx(7.0)
        assert alloc.mu == pytest.approx(expected_mu)


def test_joint_per_prompt_weights_each_bins_log_prob_by_its_prompt_count_by_hand():
    """Two bins of 2 and 4 prompts, budget 4 × 6 = 24, arms 2..6: 2 n0 + 4 n1 = 24 holds for (2, 5), (4, 4) and
    (6, 3). Bin 0 prefers n = 6, bin 1 n = 4 (hand-set scores). Eq. 19 per bin maximises log p0 + log p1 over the
    three; per prompt, 2 log p0 + 4 log p1. Enumerated here and compared with the allocator's DP."""
    s0 = np.array([0.0, 0.0, 0.0, 0.0, 5.0])  # p0(6) = 0.86: a stronger preference than bin 1's
    s1 = np.array([0.0, 0.0, 3.0, 0.0, 0.0])  # p1(4) = 0.63
    bins = np.array([0, 0, 1, 1, 1, 1])
    feasible = [(2, 5), (4, 4), (6, 3)]
    chosen = {}
    for joint, (w0, w1) in (("per_bin", (1, 1)), ("per_prompt", (2, 4))):
        alloc = RolloutGDRO(n_min=2, n_max=6, joint=joint)
        alloc.scores = {0: s0.copy(), 1: s1.copy()}
        lp0, lp1 = np.log(alloc.arm_probs(0)), np.log(alloc.arm_probs(1))
        best = max(feasible, key=lambda c: w0 * lp0[c[0] - 2] + w1 * lp1[c[1] - 2])
        n = alloc.allocate(np.arange(6), bins, 4, None)
        chosen[joint] = (int(n[0]), int(n[2]))
        assert chosen[joint] == best
    assert chosen == {"per_bin": (6, 3), "per_prompt": (4, 4)}  # the big bin keeps its arm once it counts 4 times


def test_joint_per_prompt_moves_the_surplus_off_the_largest_bin():
    """Both bins' arm distributions prefer small arms (μ high), the budget forces a surplus somewhere. per_bin puts it
    on the bin where one log-prob costs least, the largest bin (its many prompts absorb the rollouts); per_prompt
    charges that bin once per prompt and spreads it on the small bin instead."""
    arms = np.arange(2, 13)
    pref_small = np.linspace(3.0, 0.0, len(arms))  # every bin prefers n = 2, equally
    bins = np.array([0] * 2 + [1] * 14)
    n = {}
    for joint in ("per_bin", "per_prompt"):
        alloc = RolloutGDRO(n_min=2, n_max=12, joint=joint)
        alloc.scores = {0: pref_small.copy(), 1: pref_small.copy()}
        n[joint] = alloc.allocate(np.arange(16), bins, 4, None)
        assert n[joint].sum() == 64
    assert n["per_bin"][-1] > n["per_prompt"][-1]  # the large bin gets more rollouts per prompt under per_bin
    assert n["per_prompt"][0] > n["per_bin"][0]


@pytest.mark.parametrize(("kwargs", "key"), [({"mu_target": "n_bar"}, "mu_target"), ({"joint": "both"}, "joint")])
def test_dual_dynamics_options_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        RolloutGDRO(**kwargs)
