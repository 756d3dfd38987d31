"""Check a composed config before anything is built: key names, value types, then ranges and cross-field rules.

Every config group node names its component with ``_target_``: a dataclass, or a class whose ``__init__`` is typed
(a ``**kwargs`` constructor is described by the dataclass its other parameter is annotated with, e.g.
``MathVerifyReward(config: RewardConfig | None, /, **kwargs)``). The schema is read from the type hints:

* an unknown key — also one added with ``+key=`` — is an error that suggests the closest valid key;
* ``int`` takes integers only (not ``2.0``, ``true`` or ``abc``); ``float`` takes finite numbers (not ``true``);
  ``bool`` takes ``true``/``false`` only; ``str`` takes strings; ``X | None`` takes ``null``; sequences take lists;
* ranges and cross-field rules are the component's own: its constructor (``__post_init__``) raises, and the
  message is rewritten to name the dotted key and its value: ``sampler.eta=-1: must be > 0``.

Errors are :class:`ConfigError`, one line each, the offending key first. Nothing here loads a model or data.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import importlib
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    "ConfigError", "Schema", "build_node", "check_keys", "check_values", "field_default", "node_schema", "resolve", "schema_of", "show",
    "validate_config",
]

_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_RESERVED = ("_target_",)  # the only Hydra instantiate key a group node may carry


class ConfigError(ValueError):
    """An invalid configuration value; the message (one line) names the offending key."""

    label = "config error"  # what an entry point prints before the message


@dataclass(frozen=True)
class Schema:
    """The keys a component accepts: name -> type hint, the required ones, and whether extra keys pass."""

    fields: dict[str, Any]
    required: frozenset[str]
    open: bool = False  # an untyped **kwargs: any key is passed on unchecked


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except (NameError, TypeError):  # an unresolvable annotation: check nothing rather than fail
        return {}


def _dataclass_schema(cls: type) -> Schema:
    hints = _hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return Schema({f.name: hints.get(f.name, Any) for f in fields}, frozenset(required))


def schema_of(target: Callable[..., Any]) -> Schema:
    """The schema of a dataclass, or of a typed constructor (``**kwargs`` typed by a dataclass parameter)."""
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        return _dataclass_schema(target)
    hints = _hints(target.__init__ if isinstance(target, type) else target)
    fields: dict[str, Any] = {}
    required: set[str] = set()
    var_kw = False
    for name, p in inspect.signature(target).parameters.items():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            fields[name] = hints.get(name, Any)
            if p.default is p.empty:
                required.add(name)
    if var_kw:  # **kwargs: the fields of the dataclass that a parameter is annotated with (the config object)
        configs = [a for h in hints.values() for a in (typing.get_args(h) or (h,))
                   if dataclasses.is_dataclass(a) and isinstance(a, type)]
        if not configs:
            return Schema(fields, frozenset(required), open=True)
        inner = _dataclass_schema(configs[0])
        return Schema({**fields, **inner.fields}, frozenset(required | inner.required))
    return Schema(fields, frozenset(required))


# ----------------------------------------------------------------------------------------------------- values
def show(value: Any) -> str:
    """A value as it is written on the command line: ``null``, ``true``, ``[0.1,0.2]``, ``''``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value and value.strip() == value else repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{show(v)}" for k, v in value.items()) + "}"
    return str(value)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if tp is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + " | ".join(show(a) for a in args)
    if origin in _SEQUENCES or tp in _SEQUENCES:
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin in _MAPPINGS or tp in _MAPPINGS:
        return "a mapping"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def _plural(tp: Any) -> str:
    return {int: "integers", float: "numbers", str: "strings", bool: "booleans"}.get(tp, _describe(tp))


def _problem(value: Any, tp: Any) -> str | None:
    """Why ``value`` does not fit the type hint ``tp`` ("must be ..."), or None when it does."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is inspect.Parameter.empty or isinstance(tp, (str, typing.TypeVar)):
        return None
    if origin in (typing.Union, types.UnionType):
        if any(_problem(value, a) is None for a in args):
            return None
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:  # X | None: X's own reason, with null among the allowed values
            why = _problem(value, members[0]) or ""
            head = f"must be {_describe(members[0])}"
            return why.replace(head, f"{head} or null", 1) if why.startswith(head) else why
        return f"must be {_describe(tp)} (got {_kind(value)})"
    if tp is type(None):
        return None if value is None else f"must be null (got {_kind(value)})"
    if origin is typing.Literal:
        return None if value in args else f"must be {_describe(tp)}"
    ok: bool
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            return f"must be a finite number (got {show(value)})"
    elif tp is str:
        ok = isinstance(value, str)
    elif origin in _SEQUENCES or tp in _SEQUENCES:
        if not isinstance(value, (list, tuple)):
            return f"must be {_describe(tp)} (got {_kind(value)})"
        item = args[0] if args else Any
        for i, v in enumerate(value):
            if _problem(v, item) is not None:
                return f"must be {_describe(tp)} (item {i} is {_kind(v)} {show(v)})"
        return None
    elif origin in _MAPPINGS or tp in _MAPPINGS:
        ok = isinstance(value, dict)
    else:
        return None  # a type this checker does not know: the constructor decides
    return None if ok else f"must be {_describe(tp)} (got {_kind(value)})"


# ----------------------------------------------------------------------------------------------------- keys
def check_keys(keys: Iterable[str], valid: Iterable[str], prefix: str = "", *, elsewhere: Iterable[str] = ()) -> None:
    """Reject the first key of ``keys`` not in ``valid``, suggesting the closest valid key.

    ``elsewhere``: dotted keys of other nodes (``optim.lr``); an unknown ``lr`` suggests ``optim.lr``.
    """
    valid = list(valid)
    for key in keys:
        if key in valid:
            continue
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
        hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
        if not hint:
            moved = [d for d in elsewhere if d.rsplit(".", 1)[-1] == key]
            hint = f" (did you mean '{moved[0]}'?)" if moved else ""
        listed = ", ".join(v for v in valid if not v.startswith("_"))
        if not hint:
            where = f" of {prefix.rstrip('.')}" if prefix else ""
            hint = f" (valid keys{where}: {listed})" if listed else f" ({prefix.rstrip('.')} takes no keys)"
        err = ConfigError(f"unknown key '{prefix}{key}'{hint}")
        err.key = f"{prefix}{key}"  # read by gdro.cli.app.precheck, which names the options that have it
        raise err


def _source(node: DictConfig, key: str) -> str:
    """`` (from ${x})`` when ``node.key`` is an interpolation, so a message also names the key that set it."""
    if OmegaConf.is_interpolation(node, key):
        raw = OmegaConf.to_container(node, resolve=False)[key]  # type: ignore[index]
        return f" (from {raw})"
    return ""


def resolve(node: DictConfig, prefix: str, keys: Iterable[str] | None = None) -> dict[str, Any]:
    """Plain values of ``node`` (or of its ``keys``), interpolations resolved; a missing or broken one is an error."""
    out: dict[str, Any] = {}
    for key in node if keys is None else keys:
        try:
            value = node[key]
            out[str(key)] = OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) \
                else value
        except OmegaConfBaseException as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"{prefix}{key}: {first}") from err
    return out


def check_values(values: dict[str, Any], schema: Schema, prefix: str = "", node: DictConfig | None = None) -> None:
    """Every required key present; every value of a known key of the type its hint allows."""
    for key in sorted(schema.required - values.keys()):
        raise ConfigError(f"{prefix}{key}: missing (a value is required)")
    for key, value in values.items():
        if key in schema.fields:
            why = _problem(value, schema.fields[key])
            if why is not None:
                src = _source(node, key) if node is not None else ""
                raise ConfigError(f"{prefix}{key}={show(value)}{src}: {why}")


def rewrite(err: Exception, values: dict[str, Any], prefix: str, node: DictConfig | None = None) -> ConfigError:
    """A component's ``"<key> must be ..., got <v>"`` as ``"<prefix><key>=<v>: must be ..."`` (one line)."""
    msg = " ".join(str(err).split()) or type(err).__name__
    if getattr(err, "keyed", False):  # the message names the key inside the node already (reward.functions[0].fn=...)
        return ConfigError(f"{prefix}{msg}")
    m = re.match(r"(\w+)\b[:\s]*(.*)", msg)
    if m is None or m.group(1) not in values:
        return ConfigError(f"{prefix.rstrip('.')}: {msg}" if prefix else msg)
    key, rest = m.group(1), m.group(2)
    value = values[key]
    for shown in {show(value), str(value), repr(value)}:  # drop a leading "=<value>" ("mode=x needs ..."): it leads
        if rest.startswith(f"={shown}"):
            rest = rest[len(shown) + 1:].lstrip(" :")
            break
    for shown in {show(value), str(value), repr(value)}:  # drop a trailing ", got <value>": the value leads
        if rest.endswith(f", got {shown}"):
            rest = rest[: -len(f", got {shown}")]
            break
    src = _source(node, key) if node is not None else ""
    return ConfigError(f"{prefix}{key}={show(value)}{src}: {rest}")


def construct(target: Callable[..., Any], values: dict[str, Any], prefix: str, node: DictConfig | None = None) -> Any:
    """``target(**values)``; a ValueError/TypeError of its own checks becomes a ConfigError naming the key."""
    try:
        return target(**values)
    except (ValueError, TypeError) as err:
        raise rewrite(err, values, prefix, node) from err


def _locate(path: Any, key: str) -> Callable[..., Any]:
    """The object at a dotted ``_target_`` path (the longest importable module prefix, then attributes)."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{key}._target_: missing (a config group node names its component with _target_)")
    parts, obj = path.split("."), None
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is not None and name != err.name and not name.startswith(err.name + "."):
                raise ConfigError(f"{key}._target_={path}: cannot be imported ({err})") from err  # a dependency
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        break
    if obj is None or isinstance(obj, types.ModuleType) or not callable(obj):
        raise ConfigError(f"{key}._target_={path}: no such class or function")
    return obj


def field_default(target: Callable[..., Any], name: str) -> Any:
    """The Python default of parameter ``name`` of a dataclass or constructor (through the config dataclass of a
    ``**kwargs`` constructor); ``dataclasses.MISSING`` when it has none."""
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        for f in dataclasses.fields(target):
            if f.name == name and f.init:
                if f.default_factory is not dataclasses.MISSING:
                    return f.default_factory()
                return f.default
        return dataclasses.MISSING
    params = inspect.signature(target).parameters
    p = params.get(name)
    if p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
        return dataclasses.MISSING if p.default is p.empty else p.default
    if any(q.kind is q.VAR_KEYWORD for q in params.values()):
        hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
        for h in hints.values():
            for a in typing.get_args(h) or (h,):
                if dataclasses.is_dataclass(a) and isinstance(a, type):
                    return field_default(a, name)
    return dataclasses.MISSING


def component_class(node: Mapping[str, Any], key: str) -> Callable[..., Any]:
    """The component a group node names by its ``_target_`` (the node composed, or resolved to plain values)."""
    return _locate(node.get("_target_"), key)


def node_schema(node: Any, key: str) -> tuple[Callable[..., Any], Schema]:
    """The component a group node builds and the schema of its keys."""
    if not isinstance(node, DictConfig):
        raise ConfigError(f"{key}={show(node)}: must be a config group node (a mapping with _target_)")
    target = _locate(node.get("_target_"), key)
    return target, schema_of(target)


def build_node(node: Any, key: str, *, elsewhere: Iterable[str] = ()) -> Any:
    """Check one group node (keys, types) and build its component (ranges, cross-field rules)."""
    target, schema = node_schema(node, key)
    prefix = f"{key}."
    if not schema.open:
        check_keys([str(k) for k in node], [*_RESERVED, *schema.fields], prefix, elsewhere=elsewhere)
    values = resolve(node, prefix)
    values.pop("_target_")
    check_values(values, schema, prefix, node)
    return construct(target, values, prefix, node)


def validate_config(cfg: DictConfig, groups: Iterable[str], run_cls: type) -> tuple[Any, dict[str, Any]]:
    """Check a composed training config and build its parts: ``(run_cls(**top-level keys), {group: component})``.

    Top-level keys are the ``groups``, the fields of ``run_cls`` and Hydra's own ``hydra`` node; each group node is
    checked and built by :func:`build_node`, in ``groups`` order. Nothing is loaded.
    """
    groups = list(groups)
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"the config must be a mapping, got {_kind(cfg)}")
    run_schema = schema_of(run_cls)
    dotted = {g: [f"{g}.{k}" for k in cfg[g] if not str(k).startswith("_")]
              for g in groups if isinstance(cfg.get(g), DictConfig)}
    every = [d for keys in dotted.values() for d in keys]
    check_keys([str(k) for k in cfg if k != "hydra"], [*groups, *run_schema.fields], elsewhere=every)
    missing = [k for k in [*groups, *run_schema.fields] if k not in cfg]
    if missing:
        raise ConfigError(f"{missing[0]}: missing (the config must set every group and top-level key; "
                          f"missing: {', '.join(missing)})")
    values = resolve(cfg, "", run_schema.fields)
    check_values(values, run_schema, "", cfg)
    run = construct(run_cls, values, "", cfg)
    parts = {}
    for g in groups:
        others = [d for h, keys in dotted.items() if h != g for d in keys] + list(run_schema.fields)
        parts[g] = build_node(cfg[g], g, elsewhere=others)
    return run, parts
