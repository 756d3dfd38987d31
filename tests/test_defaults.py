"""One source for every default: a Python default that exists must equal its YAML option file.

The YAML option files (``conf/<group>/<option>.yaml``, the ``checkpoint:`` node and the top-level run keys of
``conf/train.yaml``) are where every default is documented, and the main job runs from them. A Hydra-instantiated
class may still carry Python defaults (tests, scripts and notebooks construct it by hand), so each one is checked
against the YAML here, with this rule:

* The *Python defaults* of a ``_target_`` are its dataclass field defaults, or the defaults of its constructor's
  signature; a constructor that takes ``**kwargs`` on behalf of a config dataclass (``MathVerifyReward(config,
  /, **kwargs)`` → ``RewardConfig``) is described by that dataclass, as in ``gdro.common.validate.schema_of``.
* The *reference option* of a target within its group is the group's default option (the ``defaults:`` list of
  ``conf/train.yaml``, read from Hydra's config choices) when that option targets it; otherwise the one option
  that targets it. Values are those of the composed config (``${rollouts_per_prompt}`` resolves against the
  top-level keys of ``conf/train.yaml``).
* Every parameter with a Python default must appear in the reference option with an equal value (tuples compare
  as lists; a bool never equals a number). A default the reference option does not list is a failure too: that
  value would be documented nowhere.
* When several options of a group target the same class and none of them is the group's default option, a key
  on which they disagree may have no Python default at all (there is no single YAML value it could mirror).
  Options that share a target with the default option (``logger/jsonl``, ``model/qwen3-*``) may set other
  values: the Python default mirrors the default option only.
* Every key of every option is a parameter of its target, and every required parameter is set by every option
  (``gdro.common.validate`` checks the first at run time as well; here it is cheap and covers every option).
* A key whose YAML value interpolates another group's key (``overlong_max_tokens: ${model.max_new_tokens}``)
  has no single value a Python default could mirror: its Python default must be ``None`` (set from the config).
* ``conf/eval_app.yaml`` picks the same default option as ``conf/train.yaml`` for each group both use, so "the
  default option" means one thing for both entry points (the toy benchmark, ``CopyTask(**entry).test()``, relies
  on ``CopyTask``'s defaults being ``conf/data/copy.yaml``'s).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from typing import Any

import pytest
from hydra.utils import get_object
from omegaconf import OmegaConf

from gdro.algorithm.settings import RunSettings
from gdro.common.validate import schema_of
from gdro.compose.build import GROUPS
from tests.conftest import CONF, compose_cfg

NOT_COMPONENT_GROUPS = {"experiment", "method", "suite", "memory", "hydra"}  # presets | table rows | eval suites | per-size deltas | Hydra launchers
REQUIRED = object()  # a parameter without a Python default
AMBIGUOUS = object()  # several options of one target, none of them the group's default, disagree on a key
FROM_GROUP = object()  # the YAML value interpolates another group's key (``${model.max_new_tokens}``)


# ------------------------------------------------------------------------------------------------ helpers
def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def raw_target(group: str, option: str) -> str:
    return str(OmegaConf.load(CONF / group / f"{option}.yaml")["_target_"])


@functools.cache
def composed(group: str, option: str) -> dict[str, Any]:
    """The option's node as ``gdro-train {group}={option}`` would build it (resolved, without ``_target_``)."""
    raw = OmegaConf.to_container(compose_cfg([f"{group}={option}"])[group], resolve=False)
    node = OmegaConf.to_container(compose_cfg([f"{group}={option}"])[group], resolve=True)
    node.pop("_target_")
    for key, value in raw.items():
        if isinstance(value, str) and value.startswith("${") and value[2:].split(".")[0] in GROUPS:
            node[key] = FROM_GROUP
    return node


@functools.cache
def default_choices() -> dict[str, str]:
    """Group -> default option, from conf/train.yaml's defaults list (as Hydra resolved it)."""
    choices = compose_cfg(return_hydra_config=True).hydra.runtime.choices
    return {g: str(choices[g]) for g in GROUPS}


def _config_class(target: Any) -> type | None:
    """The dataclass a ``**kwargs`` constructor stands for (its parameter annotated with one), as in validate."""
    hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
    found = [a for h in hints.values() for a in (typing.get_args(h) or (h,))
             if dataclasses.is_dataclass(a) and isinstance(a, type)]
    return found[0] if found else None


def python_defaults(target: Any) -> dict[str, Any]:
    """Parameter name -> Python default (``REQUIRED`` if none) of a dataclass or a constructor."""
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        out = {}
        for f in dataclasses.fields(target):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = REQUIRED
        return out
    out, var_kw = {}, False
    for name, p in inspect.signature(target).parameters.items():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            out[name] = REQUIRED if p.default is p.empty else p.default
    if var_kw:
        config = _config_class(target)
        assert config is not None, f"{target.__qualname__} takes untyped **kwargs: its defaults cannot be checked"
        out.update(python_defaults(config))
    return out


def norm(value: Any) -> Any:
    """Comparable form: sequences as lists, a settings dataclass (``model.lora``) as its mapping, bools tagged so that
    ``True`` never equals ``1``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return norm({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, bool):
        return ("bool", value)
    return value


def disagreements(target: Any, expected: dict[str, Any], where: str) -> list[str]:
    """Every Python default of ``target`` that differs from (or is missing in) ``expected``."""
    name = f"{target.__module__}.{target.__qualname__}"
    out = []
    for key, default in python_defaults(target).items():
        if default is REQUIRED:
            continue
        if key not in expected:
            out.append(f"{name}({key}={default!r}): a Python default that {where} does not list")
        elif expected[key] is FROM_GROUP:
            if default is not None:
                out.append(f"{name}({key}={default!r}): {where} sets {key} from another group's key, so its Python "
                           "default must be None")
        elif expected[key] is AMBIGUOUS:
            out.append(f"{name}({key}={default!r}): the options of {where} disagree on {key}, so it may have no "
                       "Python default")
        elif norm(default) != norm(expected[key]):
            out.append(f"{name}({key}={default!r}): {where} has {key}={expected[key]!r}")
    return out


# (group, target) pairs; each is checked against its reference option
TARGETS = sorted({(g, raw_target(g, o)) for g in GROUPS for o in options(g)})
ALL = [(g, o) for g in GROUPS for o in options(g)]


# -------------------------------------------------------------------------------------------------- tests
def test_every_config_group_is_covered():
    groups = {p.name for p in CONF.iterdir() if p.is_dir()}
    assert groups - NOT_COMPONENT_GROUPS == set(GROUPS), "a config group this test (and gdro.compose.build) does not know"
    for g, option in default_choices().items():
        assert option in options(g), f"default option {g}={option} has no conf/{g}/{option}.yaml"


@pytest.mark.parametrize(("group", "option"), ALL, ids=[f"{g}={o}" for g, o in ALL])
def test_option_keys_are_parameters_and_required_ones_are_set(group, option):
    target = get_object(raw_target(group, option))
    node = composed(group, option)
    params = schema_of(target).fields
    assert not set(node) - set(params), f"conf/{group}/{option}.yaml: not parameters of {target.__qualname__}"
    required = {k for k, v in python_defaults(target).items() if v is REQUIRED}
    assert not required - set(node), f"conf/{group}/{option}.yaml: required parameters not set"


@pytest.mark.parametrize(("group", "target"), TARGETS, ids=[f"{g}:{t.rsplit('.', 1)[-1]}" for g, t in TARGETS])
def test_python_defaults_equal_the_reference_option(group, target):
    cls = get_object(target)
    mine = [o for o in options(group) if raw_target(group, o) == target]
    default = default_choices()[group]
    if default in mine:
        expected, where = composed(group, default), f"conf/{group}/{default}.yaml (the default option)"
    else:
        nodes = [composed(group, o) for o in mine]
        keys = {k for n in nodes for k in n}
        expected = {}
        for k in keys:
            values = [n[k] for n in nodes if k in n]
            same = len(values) == len(nodes) and all(norm(v) == norm(values[0]) for v in values)
            expected[k] = values[0] if same else AMBIGUOUS
        where = " / ".join(f"conf/{group}/{o}.yaml" for o in mine)
    problems = disagreements(cls, expected, where)
    assert not problems, "Python defaults disagree with the YAML:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize(("key", "target"), [("checkpoint", "gdro.run.checkpoint.CheckpointConfig"),
                                           ("dist", "gdro.parallel.distributed.DistConfig"), ("lock", "gdro.run.lock.LockConfig")])
def test_train_yaml_nodes_defaults_equal_their_dataclass(key, target):
    """The nodes conf/train.yaml sets itself (not groups): their keys and values are their dataclass's defaults."""
    cls = get_object(target)
    node = OmegaConf.to_container(compose_cfg()[key], resolve=True)
    assert get_object(node.pop("_target_")) is cls
    assert set(node) == set(python_defaults(cls)), f"{key}: keys vs {cls.__name__} fields"
    problems = disagreements(cls, node, f"conf/train.yaml {key}:")
    assert not problems, "\n".join(problems)


def test_run_config_defaults_equal_train_yaml_top_level_keys():
    cfg = compose_cfg()
    top = {str(k) for k in cfg} - set(GROUPS) - {"checkpoint", "dist", "lock"}
    assert top == set(python_defaults(RunSettings)), "conf/train.yaml top-level keys vs RunSettings fields"
    values = {k: cfg[k] for k in top}
    problems = disagreements(RunSettings, values, "conf/train.yaml")
    assert not problems, "\n".join(problems)


def test_eval_app_uses_the_same_default_options():
    def defaults_list(name: str) -> dict[str, str]:
        entries = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))["defaults"]
        return {k: v for e in entries if isinstance(e, dict) for k, v in e.items()}

    train, app = defaults_list("train"), defaults_list("eval_app")
    shared = set(train) & set(app)
    assert shared >= {"model", "eval", "reward", "rollout"}
    assert {g: app[g] for g in shared} == {g: train[g] for g in shared}


def test_the_checker_itself():
    """The rule catches a disagreement, a default the YAML omits, and an ambiguous key; ``**kwargs`` is followed."""

    @dataclasses.dataclass(frozen=True)
    class Toy:
        a: int
        b: float = 0.5
        c: tuple = (1, 2)
        d: bool = True
        e: str = "x"

    assert disagreements(Toy, {"a": 3, "b": 0.5, "c": [1, 2], "d": True, "e": "x"}, "toy.yaml") == []
    found = disagreements(Toy, {"b": 0.25, "c": [1, 2], "d": 1, "e": AMBIGUOUS}, "toy.yaml")
    assert [p.split("(")[1].split("=")[0] for p in found] == ["b", "d", "e"]
    assert "does not list" in disagreements(Toy, {"b": 0.5, "c": [1, 2], "d": True}, "toy.yaml")[0]
    from gdro.grading.reward_config import RewardConfig
    from gdro.grading.rewards import MathVerifyReward

    assert python_defaults(MathVerifyReward) == python_defaults(RewardConfig) != {}
