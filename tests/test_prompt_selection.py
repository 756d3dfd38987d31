"""sampler=learnability (LILO) and sampler=mopps (MoPPS): hand-computed references, bad values, exact resume, and
``gdro-train`` runs that resume exactly (gdro/controllers/prompt_selection.py, docs/prompt-selection.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gdro.algorithm.tracking import read_metrics
from gdro.common.interfaces import BinSpec, PromptPool, StepFeedback
from gdro.controllers.prompt_selection import (
    LearnabilitySampler,
    MoPPSSampler,
    beta_update,
    learnability,
    select_threshold,
    select_top,
    thompson_distance,
)
from gdro.controllers.skip import PreRolloutSkip
from tests.test_resume import _comparable, _fit

BINS = BinSpec(("all",), 1)


def _bound(sampler, n: int):
    sampler.bind(PromptPool(tuple(f"p{i}" for i in range(n))), BINS)
    return sampler


def _feedback(ids, correct_per_prompt, n) -> StepFeedback:
    """A step in which prompt ids[g] had correct_per_prompt[g] of n[g] rollouts right."""
    ids, c, n = (np.asarray(x, dtype=np.int64) for x in (ids, correct_per_prompt, n))
    gi = np.repeat(np.arange(len(ids)), n)
    correct = np.concatenate([np.arange(k) < h for h, k in zip(c, n)]) if len(ids) else np.zeros(0, bool)
    rows = len(gi)
    return StepFeedback(ids=ids, bins=np.zeros(len(ids)), n=n, group_index=gi, correct=correct,
                        pg_loss=np.zeros(rows), kl=np.zeros(rows), beta_kl=0.0)


EMPTY = _feedback([], [], [])  # ends a step without a visit


# ---------------------------------------------------------------------------------------------- pure math
def test_learnability_is_p_one_minus_p_with_the_unseen_prior():
    got = learnability([2, 1, 3, 0, 4, 0], [4, 4, 4, 4, 4, 0], unseen_p=0.2)
    np.testing.assert_allclose(got, [0.25, 3 / 16, 3 / 16, 0.0, 0.0, 0.16])
    assert got[1] == got[2]  # p̂ and 1 − p̂ score exactly alike (no rounding tie-break bias)


def test_select_top_breaks_ties_by_position():
    assert select_top([0.1, 0.25, 0.25, 0.0], 2).tolist() == [1, 2]
    assert select_top([0.1, 0.25, 0.25, 0.0], 3).tolist() == [1, 2, 0]


def test_beta_update_hand_computed():
    assert beta_update(1.0, 1.0, 3, 1) == (4.0, 2.0)  # λ = 1: the conjugate update
    # λ = 0.5 toward the prior Beta(1, 1): α = 0.5·2 + 0.5·1 + 3, β = 0.5·3 + 0.5·1 + 1
    assert beta_update(2.0, 3.0, 3, 1, decay=0.5) == (4.5, 3.0)
    np.testing.assert_allclose(thompson_distance([0.5, 0.2, 0.9], 0.5), [0.0, 0.09, 0.16])


def test_select_threshold_inside_at_random_else_nearest_first():
    samples = np.array([0.1, 0.35, 0.5, 0.9, 0.65])
    got = select_threshold(samples, 2, 0.3, 0.7, np.random.default_rng(5))
    assert got.tolist() == np.random.default_rng(5).permutation([1, 2, 4])[:2].tolist()
    # fewer inside than k: the three inside (gap 0), then 0.1 and 0.9 tie at gap 0.2 -> the first of them
    assert select_threshold(samples, 4, 0.3, 0.7, np.random.default_rng(5)).tolist() == [1, 2, 4, 0]


# ---------------------------------------------------------------------------------------------- learnability
def test_learnability_takes_the_top_prompts_when_every_prompt_is_a_candidate():
    s = _bound(LearnabilitySampler(candidate_ratio=3.0), 6)
    s.record(np.arange(6), [0, 1, 2, 4, 3, 1], [4, 4, 4, 4, 8, 8])  # priorities 0, 3/16, 1/4, 0, 15/64, 7/64
    np.testing.assert_allclose(s.priority(np.arange(6)), [0, 3 / 16, 1 / 4, 0, 15 / 64, 7 / 64])
    ids = s.sample(2, np.random.default_rng(0))
    assert sorted(ids.tolist()) == [2, 4]
    m = s.metrics()
    assert m["select/priority"] == pytest.approx((1 / 4 + 15 / 64) / 2)
    assert m["select/unseen_share"] == 0.0 and m["select/p_hat"] == pytest.approx((0.5 + 3 / 8) / 2)


def test_learnability_selection_probabilities_equal_the_hand_computed_ones():
    """4 prompts of priorities 1/4 > 3/16 > 7/64 > 0, one trained prompt from 2 candidates: a uniform pair, the
    better of it; prompt i wins against the prompts below it: P = (3, 2, 1, 0) / C(4, 2)."""
    s = _bound(LearnabilitySampler(candidate_ratio=2.0), 4)
    s.record([0, 1, 2, 3], [2, 1, 1, 0], [4, 4, 8, 4])
    rng, draws = np.random.default_rng(1), 6000
    counts = np.zeros(4)
    for _ in range(draws):
        counts[s.sample(1, rng)] += 1
        s.update(EMPTY)
    np.testing.assert_allclose(counts / draws, [3 / 6, 2 / 6, 1 / 6, 0], atol=0.025)


def test_learnability_unseen_prompts_and_window():
    s = _bound(LearnabilitySampler(candidate_ratio=4.0, window=2, unseen_p=0.0), 4)
    s.record([0, 0, 0], [4, 0, 2], [4, 4, 4])  # window 2: the latest two visits, 2/8 right
    np.testing.assert_array_equal(s.p_hat([0, 1]), ([2, 0], [8, 0]))
    assert s.priority([0, 1]).tolist() == [3 / 16, 0.0]  # unseen_p = 0: an unseen prompt ranks with the solved
    assert s.sample(1, np.random.default_rng(0)).tolist() == [0]


def test_prompts_are_distinct_within_a_step_and_drawn_again_the_next():
    s = _bound(LearnabilitySampler(candidate_ratio=8.0), 8)
    rng = np.random.default_rng(3)
    first = np.concatenate([s.sample(3, rng), s.sample(3, rng)])  # two rounds of one step (filter=dynamic)
    assert len(set(first.tolist())) == 6
    s.update(_feedback(first, np.zeros(6), np.full(6, 2)))  # all wrong: priority 0
    assert set(s.sample(2, rng).tolist()) == {i for i in range(8) if i not in first}  # the two unseen first


# ---------------------------------------------------------------------------------------------- MoPPS
def test_mopps_posterior_updates_hand_computed():
    s = _bound(MoPPSSampler(decay=0.5, prior_alpha=2.0, prior_beta=1.0), 3)
    s.update(_feedback([0, 1], [3, 0], [4, 2]))
    s.record([0], [1], [2])  # a group a filter dropped: a visit too
    # prompt 0: (2, 1) -> (0.5·2 + 0.5·2 + 3, 0.5·1 + 0.5·1 + 1) = (5, 2) -> (0.5·5 + 1 + 1, 0.5·2 + 0.5 + 1) = (4.5, 2.5)
    a, b = s.posterior([0, 1, 2])
    np.testing.assert_allclose(a, [4.5, 2.0, 2.0])
    np.testing.assert_allclose(b, [2.5, 3.0, 1.0])


def test_mopps_thompson_top_b_equals_the_reference_draw():
    n, count = 10, 3
    s = _bound(MoPPSSampler(candidate_ratio=4.0), n)
    hits = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 8])
    s.record(np.arange(n), hits, np.full(n, 8))
    ids = s.sample(count, np.random.default_rng(7))
    ref = np.random.default_rng(7)  # the same stream: a permutation of the pool (12 >= 10 candidates), then γ̂
    cand = ref.permutation(n)
    gamma = ref.beta(1.0 + hits[cand], 1.0 + 8 - hits[cand])
    expected = cand[np.argsort((gamma - 0.5) ** 2)[:count]]
    assert ids.tolist() == expected.tolist()
    assert s.metrics()["select/thompson_mean"] == pytest.approx(np.sort(gamma[np.argsort((gamma - 0.5) ** 2)[:count]])
                                                               .mean())


def test_mopps_prediction_error_metric():
    s = _bound(MoPPSSampler(), 2)
    s.update(_feedback([0], [4], [4]))  # prior mean 0.5, then all right: |0.5 − 1|
    assert s.metrics()["select/prediction_error"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------- bad values
@pytest.mark.parametrize(("make", "message"), [
    (lambda: LearnabilitySampler(candidate_ratio=0.5), "candidate_ratio must be >= 1"),
    (lambda: LearnabilitySampler(window=0), "window must be an integer >= 1"),
    (lambda: LearnabilitySampler(window=1.5), "window must be an integer >= 1"),
    (lambda: LearnabilitySampler(unseen_p=1.5), r"unseen_p must be in \[0, 1\]"),
    (lambda: MoPPSSampler(candidate_ratio=float("nan")), "candidate_ratio must be >= 1"),
    (lambda: MoPPSSampler(target=1.0), r"target must be in \(0, 1\)"),
    (lambda: MoPPSSampler(strategy="uniform"), "strategy must be one of"),
    (lambda: MoPPSSampler(lower=-0.1), r"lower must be in \[0, 1\)"),
    (lambda: MoPPSSampler(upper=0.2), r"upper must be in \(lower=0.3, 1\]"),
    (lambda: MoPPSSampler(prior_alpha=0.0), "prior_alpha must be > 0"),
    (lambda: MoPPSSampler(prior_beta=-1.0), "prior_beta must be > 0"),
    (lambda: MoPPSSampler(decay=0.0), r"decay must be in \(0, 1\]"),
])
def test_bad_values_raise_clearly(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_unbound_and_bad_visits_raise():
    with pytest.raises(RuntimeError, match="bind"):
        LearnabilitySampler().sample(1, np.random.default_rng(0))
    s = _bound(MoPPSSampler(), 3)
    with pytest.raises(ValueError, match="ids must lie in"):
        s.record([3], [0], [1])
    with pytest.raises(ValueError, match="correct <= total"):
        s.record([0], [2], [1])


# ---------------------------------------------------------------------------------------------- exact resume
@pytest.mark.parametrize("make", [lambda: LearnabilitySampler(candidate_ratio=2.0, window=2),
                                  lambda: MoPPSSampler(candidate_ratio=2.0, decay=0.7),
                                  lambda: MoPPSSampler(strategy="threshold")],
                         ids=["learnability", "mopps", "mopps-threshold"])
def test_state_dict_round_trip_gives_identical_samples(make):
    def steps(sampler, rng, k):
        out = []
        for _ in range(k):
            ids = sampler.sample(4, rng)
            out.append(ids.tolist())
            sampler.update(_feedback(ids, rng.integers(0, 5, size=4), np.full(4, 4)))
        return out

    a, rng = _bound(make(), 30), np.random.default_rng(11)
    steps(a, rng, 5)
    state = a.state_dict()
    assert all(isinstance(v, (int, float, bool, np.ndarray)) for v in state.values())
    b = _bound(make(), 30)
    b.load_state_dict(state)
    rng_b = np.random.default_rng()
    rng_b.bit_generator.state = rng.bit_generator.state
    assert steps(a, rng, 6) == steps(b, rng_b, 6)
    np.testing.assert_equal(a.state_dict(), b.state_dict())


def test_greso_skip_passes_dropped_groups_to_the_inner_sampler():
    inner = _bound(MoPPSSampler(), 4)
    PreRolloutSkip(inner).record([1], [2], [2])
    assert inner.posterior([1])[0].tolist() == [3.0]


# ---------------------------------------------------------------------------------------------- gdro-train
@pytest.mark.slow  # three short runs each (~25 s on 2 busy cores)
@pytest.mark.parametrize("sampler", [["sampler=learnability"], ["sampler=mopps", "sampler.decay=0.5"]],
                         ids=["learnability", "mopps"])
def test_train_runs_and_resumes_exactly(tmp_path: Path, sampler):
    """2 steps, then 2 more from the checkpoint, equal a straight 4-step run (tests/test_resume.py's check)."""
    common = [*sampler, "checkpoint.every=2"]
    long, rows = _fit(tmp_path / "long", [*common, "steps=4"])
    assert "select/seen" in rows[-1] and rows[-1]["select/seen"] > 0
    _fit(tmp_path / "ext", [*common, "steps=2"])
    ext, rows_ext = _fit(tmp_path / "ext", [*common, "steps=4"])
    assert [r["step"] for r in rows_ext] == [3, 4]
    assert _comparable(read_metrics(tmp_path / "ext")) == _comparable(read_metrics(tmp_path / "long"))
    np.testing.assert_equal(ext.controllers.sampler.state_dict(), long.controllers.sampler.state_dict())


@pytest.mark.parametrize("name", ["mopps", pytest.param("learnability", marks=pytest.mark.slow)])
def test_composes_with_dynamic_filter_greso_skip_and_an_allocator(tmp_path: Path, name):
    """One step under filter=dynamic, skip=greso, allocator=sqrt and loss=dr-grpo; the groups the filter dropped reach
    the sampler's history through the skip (``record``)."""
    trainer, rows = _fit(tmp_path, [f"sampler={name}", "filter=dynamic", "skip=greso", "allocator=sqrt", "loss=dr-grpo",
                                    "steps=1", "checkpoint.at_end=false", "filter.max_rounds=2"])
    assert [r["step"] for r in rows] == [1] and "skip/skipped" in rows[-1] and "select/seen" in rows[-1]
    state = trainer.controllers.sampler.inner.state_dict()
    recorded = state["totals"].sum() if name == "learnability" else (state["alpha"] + state["beta"] - 2).sum()
    assert rows[-1]["compute/discarded_rollouts"] > 0  # the tiny model solves the short copies: groups were dropped
    assert recorded == rows[-1]["compute/rollouts"]  # every generated rollout is history, dropped groups' included
