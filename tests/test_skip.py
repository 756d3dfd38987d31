"""skip=greso (gdro/controllers/skip.py): the keep probability by hand, termination when every prompt is skippable,
the draw count, the adaptive base, state round trips, the oracle refused, composition on the tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from gdro.common.interfaces import PromptPool, StepFeedback
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, build_training
from gdro.controllers.difficulty import OnlineDifficultyClassifier
from gdro.controllers.samplers import PromptGDRO, UniformSampler
from gdro.controllers.skip import GresoSkip, NoSkip, PreRolloutSkip, keep_probability
from tests.conftest import FAST, compose_cfg


def _pool(streaks: dict[int, int], size: int = 10) -> OnlineDifficultyClassifier:
    """A classifier over ``size`` prompts where prompt i's latest ``streaks[i]`` visits were all wrong."""
    clf = OnlineDifficultyClassifier(edges=[0.5])
    clf.bind(PromptPool(tuple(str(i) for i in range(size))))
    for i, z in streaks.items():
        clf.record(np.array([i]), np.array([1]), np.array([2]))  # a mixed visit first
        for _ in range(z):
            clf.record(np.array([i]), np.array([0]), np.array([2]))
    return clf


def test_keep_probability_by_hand():
    assert keep_probability(np.array([0, 1, 2, 3, 10]), 0.5, 0.05).tolist() == [1.0, 0.5, 0.25, 0.125, 0.05]


def test_streaky_prompts_are_skipped_at_their_rate_and_no_one_else_is():
    clf = _pool({0: 1, 1: 3})
    sampler = PreRolloutSkip(UniformSampler(), keep_base=0.5, keep_floor=0.05, adapt=False)
    sampler.bind(PromptPool(tuple(str(i) for i in range(10))), clf.bin_spec())
    rng = np.random.default_rng(0)
    counts = np.zeros(10)
    for _ in range(2000):
        counts += np.bincount(sampler.sample(5, rng, clf), minlength=10)
    rate = counts / counts[2:].mean()  # relative to an always-kept prompt
    assert rate[0] == pytest.approx(0.5, abs=0.05) and rate[1] == pytest.approx(0.125, abs=0.03)


def test_it_terminates_when_every_prompt_is_skippable_and_counts_its_draws():
    clf = _pool({i: 5 for i in range(10)})
    sampler = PreRolloutSkip(UniformSampler(), keep_base=1e-12, keep_floor=1e-12, adapt=False, max_draws=3)
    sampler.bind(PromptPool(tuple(str(i) for i in range(10))), clf.bin_spec())
    ids = sampler.sample(4, np.random.default_rng(0), clf)
    assert len(ids) == 4 and len(set(ids.tolist())) <= 4
    m = sampler.metrics()
    assert m["skip/drawn"] == 12.0 and m["skip/skipped"] == 8.0  # 3 x 4 candidates; 4 of them fill the batch


def test_the_base_adapts_toward_the_target_and_the_state_round_trips():
    clf = _pool({})
    sampler = GresoSkip(keep_base=0.5, target_zero_var=0.25, adapt_step=0.1).wrap(PromptGDRO())
    sampler.bind(PromptPool(tuple(str(i) for i in range(10))), clf.bin_spec())
    ids = sampler.sample(4, np.random.default_rng(0), clf)
    bins = clf.bins(ids)
    gi = np.repeat(np.arange(4), 2)
    fb = StepFeedback(ids=ids, bins=bins, n=np.full(4, 2), group_index=gi, correct=np.array([0, 0, 1, 1, 0, 1, 0, 1]),
                      pg_loss=np.zeros(8), kl=np.zeros(8), beta_kl=0.0)
    sampler.update(fb)  # zero-variance share 2/4 > 0.25: skip more
    assert sampler.keep_base == pytest.approx(0.4)
    again = GresoSkip().wrap(PromptGDRO())
    again.bind(PromptPool(tuple(str(i) for i in range(10))), clf.bin_spec())
    again.load_state_dict(sampler.state_dict())
    assert again.keep_base == pytest.approx(0.4) and again.state_dict()["inner"].keys() == sampler.state_dict()["inner"].keys()
    assert NoSkip().wrap(sampler) is sampler


def test_bad_settings_and_the_oracle_are_refused_before_the_model_loads():
    with pytest.raises(ValueError, match="keep_floor"):
        GresoSkip(keep_base=0.1, keep_floor=0.2)
    with pytest.raises(ConfigError, match="skip=greso cannot wrap"):
        build_components(compose_cfg(["skip=greso", "sampler=oracle-levels"]))
    comp = build_components(compose_cfg(["skip=greso", "sampler=uniform"]))
    assert isinstance(comp.sampler, PreRolloutSkip) and isinstance(comp.sampler.inner, UniformSampler)
    assert isinstance(build_components(compose_cfg([])).sampler, PromptGDRO)  # the default: no wrapper


def test_the_skip_composes_with_dynamic_sampling_and_knapsack_on_the_tiny_model(tmp_path):
    cfg = compose_cfg([*FAST, "skip=greso", "filter=dynamic", "allocator=knapsack", "data.train_size=8", "steps=3"])
    rows = [r for r in build_training(cfg, tmp_path / "run").fit() if r.get("step")]
    assert len(rows) == 3 and all(r["skip/drawn"] >= r["rollout/n_prompts"] for r in rows)
