"""Every ``_target_`` in ``conf/`` satisfies its group's Protocol (gdro/common/interfaces.py, gdro/common/rollouts.py,
gdro/loss/base.py).

``isinstance`` with a ``runtime_checkable`` Protocol only checks that the members exist; ``conforms`` also checks
that each method accepts the Protocol's parameters by name (extra parameters must have defaults), so a component
whose ``update`` still takes ``**kwargs`` or whose ``allocate`` has another argument order fails here.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from gdro.algorithm.tracking import RunLogger
from gdro.common.interfaces import (
    DifficultyClassifier,
    MetricLogger,
    ProblemSource,
    PromptSampler,
    Reward,
    RewardBatch,
    RolloutAllocator,
)
from gdro.common.rollouts import Generator
from gdro.compose.build import build_components
from gdro.grading.golds import GoldTable
from gdro.loss import Loss
from gdro.models.loading import load_model
from gdro.rollout.factory import make_engine
from tests.conftest import CONF, compose_cfg

PROTOCOLS = {"sampler": PromptSampler, "allocator": RolloutAllocator, "classifier": DifficultyClassifier,
             "reward": Reward, "data": ProblemSource, "loss": Loss}


def _members(proto: type) -> dict[str, object]:
    out = {}
    for klass in reversed(proto.__mro__):
        if klass in (object,) or klass.__name__ in ("Protocol", "Generic"):
            continue
        out.update({k: v for k, v in vars(klass).items() if not k.startswith("_")})
        out.update({k: None for k in getattr(klass, "__annotations__", {})})
    return out


def conforms(obj: object, proto: type) -> list[str]:
    """Problems of ``obj`` against ``proto``: missing members, or methods that do not take its parameters."""
    problems = []
    for name, member in _members(proto).items():
        if not hasattr(obj, name):
            problems.append(f"missing {name}")
            continue
        if not callable(member):
            continue
        want = [p for p in inspect.signature(member).parameters.values() if p.name != "self"]
        have = inspect.signature(getattr(obj, name)).parameters
        for i, p in enumerate(want):
            q = have.get(p.name)
            if q is None or q.kind is inspect.Parameter.VAR_KEYWORD:
                problems.append(f"{name}() lacks parameter {p.name!r}")
            elif q.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and list(have).index(p.name) != i:
                problems.append(f"{name}() takes {p.name!r} at another position")
        extra = [q.name for q in have.values() if q.name not in {p.name for p in want}
                 and q.default is inspect.Parameter.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)]
        if extra:
            problems.append(f"{name}() requires parameters the protocol does not pass: {extra}")
    return problems


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


CASES = [(g, o) for g in PROTOCOLS for o in _options(g)]


@pytest.mark.parametrize(("group", "option"), CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_every_target_satisfies_its_group_protocol(group: str, option: str):
    part = getattr(build_components(compose_cfg([f"{group}={option}"])), group)
    assert isinstance(part, PROTOCOLS[group])
    assert conforms(part, PROTOCOLS[group]) == []


@pytest.mark.parametrize("option", _options("logger"))
def test_every_logger_option_gives_a_metric_logger(option: str, tmp_path: Path):
    cfg = build_components(compose_cfg([f"logger={option}", "logger.wandb_mode=disabled"])).logger
    logger = RunLogger(tmp_path, cfg, run_name="t", config={})
    try:
        assert isinstance(logger, MetricLogger) and conforms(logger, MetricLogger) == []
    finally:
        logger.close()


@pytest.mark.parametrize("option", _options("rollout"))
def test_every_rollout_option_makes_a_generator(option: str):
    if option == "vllm":
        pytest.importorskip("vllm")  # an optional engine (scripts/test_vllm.sh runs it in .venv-vllm)
    comp = build_components(compose_cfg([f"rollout={option}"]))
    model, tokenizer = load_model(comp.model)
    engine = make_engine(comp.rollout, model, tokenizer, comp.model)
    assert isinstance(engine, Generator) and conforms(engine, Generator) == []


def test_conforms_catches_a_component_with_the_old_keyword_update():
    class OldStyle:
        reads_labels = False

        def bind(self, pool, bins): ...
        def sample(self, count, rng, classifier): ...
        def loss_weights(self, bins, group_index): ...
        def update(self, **_): ...
        def metrics(self): ...
        def state_dict(self): ...
        def load_state_dict(self, state): ...

    assert isinstance(OldStyle(), PromptSampler)  # member presence only: why conforms() exists
    assert conforms(OldStyle(), PromptSampler) == ["update() lacks parameter 'feedback'"]


def test_a_reward_that_subclasses_the_protocol_gets_its_default_hooks():
    class Exact(Reward):
        def score(self, completions, golds, finished, lengths=None):
            correct = np.array([c == g for c, g in zip(completions, golds)])
            return RewardBatch(correct.astype(np.float64), correct, 0, 0, 0, 0)

        def metrics(self, batch):
            return {}

    reward = Exact()
    assert isinstance(reward, Reward) and conforms(reward, Reward) == []
    assert reward.for_eval() is reward  # evaluation scores with the training reward
    assert reward.use_golds(GoldTable().add(["1/2"])) is None  # prepared golds: taken by no one, harmless
    assert reward.for_eval().score(["7", "8"], ["7", "7"], [True, True]).correct.tolist() == [True, False]
