"""The typed seams of gdro/common/interfaces.py: PromptPool, BinSpec and StepFeedback validation, and every shipped
controller an instance of its runtime-checkable Protocol (tests/test_protocols.py checks the ``conf/`` options'
signatures as well)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gdro.common.interfaces import (
    SIGNALS,
    BinSpec,
    DifficultyClassifier,
    PromptPool,
    PromptSampler,
    RolloutAllocator,
    StepFeedback,
)
from gdro.controllers.allocators import FixedAllocator, RolloutGDRO, SqrtAllocator
from gdro.controllers.difficulty import OnlineDifficultyClassifier
from gdro.controllers.oracle import OracleLevelSampler
from gdro.controllers.samplers import PromptGDRO, UniformSampler

FIELDS = ("ids", "bins", "n", "group_index", "correct", "pg_loss", "kl")


def valid(**change) -> dict:
    """Keyword arguments of a valid StepFeedback (3 prompts with 2, 0 and 3 rollouts), with ``change`` applied."""
    kw = {
        "ids": np.array([7, 2, 4]),
        "bins": np.array([0, 3, 1]),
        "n": np.array([2, 0, 3]),
        "group_index": np.array([0, 0, 2, 2, 2]),
        "correct": np.array([True, False, False, True, True]),
        "pg_loss": np.array([0.5, -0.25, 1.0, 0.0, 2.0]),
        "kl": np.array([0.1, 0.2, 0.0, 0.4, 1.0]),
        "beta_kl": 0.5,
    }
    return kw | change


# ---------------------------------------------------------------- PromptPool
def test_prompt_pool_holds_uids_and_optional_levels():
    pool = PromptPool(("a", "b", "c"))
    assert len(pool) == 3 and pool.uids == ("a", "b", "c") and pool.levels is None
    labelled = PromptPool(("a", "b"), levels=(3, 1))
    assert len(labelled) == 2 and labelled.levels == (3, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        pool.uids = ("x",)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"uids": ()}, "the prompt pool is empty"),
        ({"uids": ("a", "b"), "levels": (1,)}, r"levels must have one entry per uid \(2\), got 1"),
        ({"uids": ("a",), "levels": (1, 2)}, r"levels must have one entry per uid \(1\), got 2"),
        ({"uids": ("a",), "levels": ()}, r"levels must have one entry per uid \(1\), got 0"),
    ],
)
def test_prompt_pool_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PromptPool(**kwargs)


# ---------------------------------------------------------------- BinSpec
@pytest.mark.parametrize("num_pass_bins", [0, 2, 3])
def test_bin_spec_accepts_any_number_of_pass_rate_bins_up_to_all(num_pass_bins):
    spec = BinSpec(("0", "1", "unseen"), num_pass_bins)
    assert spec.num_bins == 3 and spec.num_pass_bins == num_pass_bins
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.num_pass_bins = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("labels", "num_pass_bins", "match"),
    [
        ((), 0, "at least one bin"),
        (("0", "1"), 3, r"num_pass_bins must be in \[0, 2\], got 3"),
        (("0", "1"), -1, r"num_pass_bins must be in \[0, 2\], got -1"),
    ],
)
def test_bin_spec_validation(labels, num_pass_bins, match):
    with pytest.raises(ValueError, match=match):
        BinSpec(labels, num_pass_bins)


# ---------------------------------------------------------------- StepFeedback
def test_step_feedback_normalises_dtypes_and_counts_correct_per_prompt():
    fb = StepFeedback(**valid(ids=[7, 2, 4], bins=[0.0, 3.0, 1.0], correct=[1, 0, 0, 1, 1], pg_loss=[1, 0, 0, 0, 2]))
    for name in ("ids", "bins", "n", "group_index"):
        assert getattr(fb, name).dtype == np.int64, name
    assert fb.correct.dtype == bool and fb.pg_loss.dtype == np.float64 and fb.kl.dtype == np.float64
    assert fb.n_correct.dtype == np.int64 and fb.n_correct.tolist() == [1, 0, 2]  # a prompt without rollouts: 0
    assert fb.pg_loss.tolist() == [1.0, 0.0, 0.0, 0.0, 2.0]


def test_step_feedback_may_be_empty():
    e = np.zeros(0)
    fb = StepFeedback(ids=e, bins=e, n=e, group_index=e, correct=e, pg_loss=e, kl=e, beta_kl=0.0)
    assert fb.n_correct.tolist() == [] and fb.signal("pg_kl").tolist() == []


def test_step_feedback_signals():
    fb = StepFeedback(**valid())
    np.testing.assert_array_equal(fb.signal("pg_loss"), [0.5, -0.25, 1.0, 0.0, 2.0])
    np.testing.assert_allclose(fb.signal("pg_kl"), [0.55, -0.15, 1.0, 0.2, 2.5], rtol=0, atol=1e-15)  # + 0.5 · kl
    np.testing.assert_array_equal(fb.signal("failure_rate"), [0.0, 1.0, 1.0, 0.0, 0.0])
    for name in SIGNALS:
        sig = fb.signal(name)
        assert sig.dtype == np.float64 and sig.shape == (5,), name
    # frontier: each rollout carries its group's 4 p(1 - p): group 0 solved 1 of 2, group 2 solved 2 of 3
    np.testing.assert_allclose(fb.signal("frontier"), [1.0, 1.0, 8 / 9, 8 / 9, 8 / 9], rtol=0, atol=1e-15)
    # informative: both groups are mixed (1 of 2, 2 of 3 right)
    np.testing.assert_array_equal(fb.signal("informative"), [1.0, 1.0, 1.0, 1.0, 1.0])
    assert set(SIGNALS) == {"pg_loss", "pg_kl", "failure_rate", "frontier", "informative"}
    without_kl = StepFeedback(**valid(beta_kl=0.0))
    np.testing.assert_array_equal(without_kl.signal("pg_kl"), without_kl.signal("pg_loss"))


@pytest.mark.parametrize("name", ["loss", "PG_LOSS", "", "correct"])
def test_step_feedback_unknown_signal_raises(name):
    with pytest.raises(ValueError, match=r"signal must be one of \('pg_loss', 'pg_kl', 'failure_rate', 'frontier', 'informative'\)"):
        StepFeedback(**valid()).signal(name)


def test_step_feedback_arrays_are_read_only():
    fb = StepFeedback(**valid())
    for name in FIELDS:
        arr = getattr(fb, name)
        assert not arr.flags.writeable, name
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = arr[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fb.beta_kl = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):  # a derived signal is a fresh array, the stored one is not
        fb.signal("pg_loss")[0] = 0.0


def test_step_feedback_does_not_freeze_or_alias_the_callers_arrays():
    kw = valid()
    fb = StepFeedback(**kw)
    for name in FIELDS:
        assert kw[name].flags.writeable, f"the caller's {name} was made read-only"
    kw["pg_loss"][0] = 99.0
    kw["group_index"][:] = 0
    assert fb.pg_loss[0] == 0.5 and fb.group_index.tolist() == [0, 0, 2, 2, 2]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"ids": np.array([[7, 2, 4]])}, r"ids must be 1-D of length 3, got shape \(1, 3\)"),
        ({"ids": np.int64(7)}, r"ids must be 1-D of length 1, got shape \(\)"),
        ({"bins": np.array([0, 3])}, r"bins must be 1-D of length 3, got shape \(2,\)"),
        ({"bins": np.zeros((3, 1))}, r"bins must be 1-D of length 3"),
        ({"n": np.array([2, 0, 3, 0])}, r"n must be 1-D of length 3, got shape \(4,\)"),
        ({"group_index": np.zeros((5, 1))}, r"group_index must be 1-D, got shape \(5, 1\)"),
        ({"correct": np.array([True, False])}, r"correct must be 1-D of length 5, got shape \(2,\)"),
        ({"pg_loss": np.zeros(6)}, r"pg_loss must be 1-D of length 5, got shape \(6,\)"),
        ({"kl": np.zeros((5, 2))}, r"kl must be 1-D of length 5"),
        ({"kl": np.float64(0.0)}, r"kl must be 1-D of length 5, got shape \(\)"),
    ],
)
def test_step_feedback_wrong_shapes_raise(change, match):
    with pytest.raises(ValueError, match=f"StepFeedback.{match}"):
        StepFeedback(**valid(**change))


@pytest.mark.parametrize(
    "n",
    [
        [2, 0, 2],  # one rollout short
        [2, 1, 2],  # a rollout moved to a prompt that has none
        [3, 0, 3],  # too many
        [0, 0, 5],  # right total, wrong prompts
    ],
)
def test_step_feedback_n_must_count_group_index(n):
    with pytest.raises(ValueError, match="StepFeedback.n must count each prompt's rollouts in group_index"):
        StepFeedback(**valid(n=np.array(n)))


@pytest.mark.parametrize(
    ("group_index", "match"),
    [
        ([0, 0, 2, 2, 3], r"group_index must lie in \[0, 3\), got \[0, 3\]"),
        ([-1, 0, 2, 2, 2], r"group_index must lie in \[0, 3\), got \[-1, 2\]"),
    ],
)
def test_step_feedback_group_index_out_of_range_raises(group_index, match):
    with pytest.raises(ValueError, match=f"StepFeedback.{match}"):
        StepFeedback(**valid(group_index=np.array(group_index)))


def test_step_feedback_rollouts_without_prompts_raise():
    e = np.zeros(0)
    with pytest.raises(ValueError, match="group_index must lie in"):
        StepFeedback(ids=e, bins=e, n=e, group_index=[0], correct=[True], pg_loss=[0.0], kl=[0.0], beta_kl=0.0)


# ---------------------------------------------------------------- Protocols
SAMPLERS = [UniformSampler, PromptGDRO, lambda: PromptGDRO(mode="resample"), OracleLevelSampler]
ALLOCATORS = [FixedAllocator, RolloutGDRO, SqrtAllocator]


@pytest.mark.parametrize("make", SAMPLERS, ids=["uniform", "prompt-gdro", "prompt-gdro-resample", "oracle"])
def test_samplers_are_prompt_samplers(make):
    sampler = make()
    assert isinstance(sampler, PromptSampler)
    assert not isinstance(sampler, (RolloutAllocator, DifficultyClassifier))
    assert sampler.reads_labels is isinstance(sampler, OracleLevelSampler)  # only the oracle control reads labels


@pytest.mark.parametrize("make", ALLOCATORS, ids=["fixed", "rollout-gdro", "sqrt"])
def test_allocators_are_rollout_allocators(make):
    alloc = make()
    assert isinstance(alloc, RolloutAllocator)
    assert not isinstance(alloc, (PromptSampler, DifficultyClassifier))


@pytest.mark.parametrize("kwargs", [{}, {"unseen": "hardest", "estimator": "unbiased_passk"}])
def test_classifier_is_a_difficulty_classifier(kwargs):
    clf = OnlineDifficultyClassifier(**kwargs)
    assert isinstance(clf, DifficultyClassifier)
    assert not isinstance(clf, (PromptSampler, RolloutAllocator))


def test_a_component_missing_a_method_is_not_an_instance():
    class NoCheckBudget:
        def bind(self, bins): ...
        def allocate(self, ids, bins, n_bar, classifier): ...
        def update(self, feedback): ...
        def metrics(self): ...
        def state_dict(self): ...
        def load_state_dict(self, state): ...

    assert not isinstance(NoCheckBudget(), RolloutAllocator)
    NoCheckBudget.check_budget = lambda self, n_bar: None
    assert isinstance(NoCheckBudget(), RolloutAllocator)


def test_every_component_binds_through_the_typed_seams():
    """The trainer's set-up sequence: the classifier gets the pool, the others its BinSpec (and the oracle the levels)."""
    pool = PromptPool(tuple(f"p{i}" for i in range(6)), levels=(1, 1, 2, 2, 3, 3))
    clf = OnlineDifficultyClassifier(edges=[0.5])
    clf.bind(PromptPool(pool.uids))
    spec = clf.bin_spec()
    assert spec == BinSpec(("0", "1", "unseen"), num_pass_bins=2)
    rng = np.random.default_rng(0)
    for make in SAMPLERS:
        sampler = make()
        sampler.bind(pool if sampler.reads_labels else PromptPool(pool.uids), spec)
        ids = sampler.sample(4, rng, clf)
        assert ids.dtype == np.int64 and ids.shape == (4,) and 0 <= ids.min() and ids.max() < 6
    for make in ALLOCATORS:
        alloc = make()
        alloc.bind(spec)
        alloc.check_budget(4)
        assert alloc.allocate(np.arange(6), clf.bins(np.arange(6)), 4, clf).sum() == 24


def test_oracle_needs_the_pools_levels():
    oracle = OracleLevelSampler()
    with pytest.raises(RuntimeError, match="bind"):
        oracle.sample(1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="PromptPool.levels"):
        oracle.bind(PromptPool(("a", "b")))
    oracle.bind(PromptPool(("a", "b", "c"), levels=(5, 9, 5)))
    ids = oracle.sample(2000, np.random.default_rng(0))
    m = oracle.metrics()
    assert set(m) == {"oracle/level_share/5", "oracle/level_share/9"}
    assert abs(m["oracle/level_share/9"] - 0.5) < 0.05 and np.mean(ids == 1) == m["oracle/level_share/9"]


@pytest.mark.parametrize(("field", "value", "match"), [
    ("group_index", [0.5, 1.7], "integer values"),
    ("n", [1.5, 0.5], "integer values"),
    ("correct", [0.3, 1.0], "0/1 or bool"),
    ("correct", [2, 0], "0/1 or bool"),
])
def test_step_feedback_refuses_values_it_would_silently_truncate(field, value, match):
    ok = {"ids": [0, 1], "bins": [0, 0], "n": [1, 1], "group_index": [0, 1], "correct": [True, False],
          "pg_loss": [0.0, 0.0], "kl": [0.0, 0.0], "beta_kl": 0.0}
    StepFeedback(**ok)
    with pytest.raises(ValueError, match=match):
        StepFeedback(**{**ok, field: value})
