"""A user's own reward functions (``reward.functions``), with TRL's signature, beside math-verify or instead of it.

Each entry of ``reward.functions`` is ``{fn: "package.module:function", weight: w, name: n}`` (and optionally
``correctness`` and ``timeout_s``; :class:`FunctionSpec`). A function is called as TRL calls a ``reward_funcs`` entry,
once per scored batch of N completions, with keyword arguments:

    fn(prompts=[...], completions=[...], completion_ids=[...], **columns) -> list[float | None]   (length N)

``prompts`` holds each completion's prompt (a conversation's list of ``{role, content}`` messages where the dataset
row held one; then ``completions`` are ``[{"role": "assistant", "content": text}]`` lists, as TRL passes them),
``completion_ids`` the sampled tokens, and ``columns`` the row's other columns, one list entry per completion
(``data=custom``: the file's columns but the prompt's), and ``answer``, the gold as gdro reads it, unless a column has
that name (the built-in tasks have no other column). A returned ``None`` means "not applicable to this row".
TRL's ``trainer_state`` is not passed. The module is imported as ``importlib`` does, the current directory searched
after ``sys.path``.

**The reward** (TRL's rule): ``math-verify's reward + Σ weight_i · r_i``, each term NaN where it is None or failed,
summed with ``nansum`` (so such a term adds 0); under ``reward=functions`` the sum alone. Each term's raw values go to
``RewardBatch.terms``: logged as ``reward/<name>`` (their mean over the rows it applied to; absent at a step where it
applied to none) and stored in the sample records (``terms``).

**Correctness** (what ``reward/accuracy``, the difficulty bins, the controllers and evaluation read): math-verify's
verdict beside it (a function there may not be ``correctness: true``); under ``reward=functions`` the function marked
``correctness: true`` (at most one; when there is a single function, it, marked or not): a row is correct when that
function's raw value is > 0 (a None or a failure is incorrect). Evaluation scores with that function alone.

**Failures never stop a run.** A function that raises is called again row by row, so only the rows it raises on fail
(a row of that retry that runs out of time fails the rows after it too); one that runs past ``timeout_s`` of CPU time,
or ``WALL_FACTOR`` times that of wall-clock time (one that waits), is stopped (:func:`gdro.grading.deadline.deadline`,
in the main thread; elsewhere unbounded, as math-verify) and fails every row of the call; a result that is not a list
of N entries fails every row; an entry that is not a number (a bool reads 1/0, as in TRL), or is NaN or infinite,
fails its row. A failed row's term is NaN (it adds 0), the row is counted in ``reward/<name>/errors``, and the first
failure of each kind is logged once per function. A function that cannot be imported, or an entry with a bad key or
value, is a one-line config error before anything loads.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from gdro.common.interfaces import Problem, RewardBatch
from gdro.grading.deadline import MAX_TIMEOUT_S, Deadline, deadline

__all__ = ["WALL_FACTOR", "FunctionReward", "FunctionSpec", "FunctionsError", "parse_functions", "with_functions"]

logger = logging.getLogger(__name__)

WALL_FACTOR = 10.0  # a call also ends after this many times its timeout_s of wall-clock time (a function that waits)
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# the metric names a step logs already (reward/<name>: math-verify's, the rollout summary's): a term may not take one
RESERVED = frozenset({"accuracy", "unparsable_frac", "truncated_frac", "error_frac", "timeout_count", "bad_gold_count",
                      "format_frac", "overlong_frac", "mean", "std"})
_CALL_ARGS = ("prompts", "completions", "completion_ids")


class FunctionsError(ValueError):
    """A bad ``reward.functions`` entry; the message starts with the key inside the reward node
    (``functions[0].fn=...: ...``), which gdro.common.validate prefixes with ``reward.``."""

    keyed = True


@dataclass(frozen=True)
class FunctionSpec:
    """One entry of ``reward.functions``."""

    fn: str  # "package.module:function" (or "package.module.function")
    weight: float = 1.0  # its weight in the reward's sum (0: logged, not rewarded)
    name: str | None = None  # reward/<name> in the metrics and the sample records (None: the function's own name)
    correctness: bool = False  # reward=functions: this term's verdict (> 0) is correctness
    timeout_s: float = 5.0  # CPU seconds one call may run (and WALL_FACTOR times that of wall-clock time)


def show(value: Any) -> str:
    """A value as the command line writes it (gdro.common.validate.show's rules, for the values an entry holds)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{show(v)}" for k, v in value.items()) + "}"
    return value if isinstance(value, str) and value and value.strip() == value else repr(value) \
        if isinstance(value, str) else str(value)


def _fail(i: int, key: str, value: Any, why: str) -> FunctionsError:
    return FunctionsError(f"functions[{i}].{key}={show(value)}: {why}")


def load_function(path: str) -> Callable[..., Any]:
    """The callable at ``"package.module:function"`` (or a dotted path); ValueError (one line) when it cannot be
    had. The current directory is searched after ``sys.path`` (the console scripts do not put it there)."""
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ValueError("must be 'package.module:function'")
    try:
        mod = _import(module)
    except Exception as err:  # a user's module that fails to import is a config error, said in one line
        first = (str(err).strip().splitlines() or [""])[0][:300]
        raise ValueError(f"cannot be imported ({type(err).__name__}: {first})") from err
    obj: Any = mod
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"module {module} has no {attr!r}")
    if not callable(obj):
        raise ValueError(f"{module}:{attr} is not callable")  # noqa: TRY004 -- a config value: ValueError
    return obj


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        here = os.getcwd()
        top = module.split(".")[0]
        if err.name != top or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(module)


def _spec(i: int, entry: Any) -> FunctionSpec:
    """One entry checked (keys, types, ranges) and its function imported; its name filled in."""
    if isinstance(entry, FunctionSpec):
        entry = {f.name: getattr(entry, f.name) for f in fields(FunctionSpec)}
    if not isinstance(entry, Mapping):
        raise FunctionsError(f"functions[{i}]={show(entry)}: must be a mapping {{fn: package.module:function, "
                             "weight: w, name: n}")
    known = [f.name for f in fields(FunctionSpec)]
    for key in entry:
        if key not in known:
            raise FunctionsError(f"functions[{i}].{key}: unknown key (valid keys: {', '.join(known)})")
    if "fn" not in entry:
        raise FunctionsError(f"functions[{i}].fn: missing (the function, as package.module:function)")
    fn, weight = entry["fn"], entry.get("weight", 1.0)
    if not isinstance(fn, str) or not fn.strip():
        raise _fail(i, "fn", fn, "must be a string 'package.module:function'")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise _fail(i, "weight", weight, "must be a finite number")
    correctness, timeout = entry.get("correctness", False), entry.get("timeout_s", 5.0)
    if not isinstance(correctness, bool):
        raise _fail(i, "correctness", correctness, "must be true or false")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise _fail(i, "timeout_s", timeout, f"must be a number > 0 and <= {MAX_TIMEOUT_S:g} (CPU seconds per call)")
    try:
        func = load_function(fn.strip())
    except ValueError as err:
        raise _fail(i, "fn", fn, str(err)) from err
    name = entry.get("name")
    if name is None:
        name = getattr(func, "__name__", None) or fn.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
        key = "fn"
    else:
        key = "name"
    if not isinstance(name, str) or not _NAME.match(name) or name in RESERVED:
        why = "is a metric gdro logs already" if name in RESERVED else "must be letters, digits, '_', '.' or '-'"
        raise _fail(i, key, entry.get(key), f"its name {name!r} {why} (set functions[{i}].name)"
                    if key == "fn" else why)
    return FunctionSpec(fn.strip(), float(weight), name, correctness, float(timeout))


def parse_functions(entries: Sequence[Any] | None, *, beside_math_verify: bool) -> tuple[FunctionSpec, ...]:
    """``reward.functions`` checked, each function imported: :class:`FunctionsError` (one line, naming the key)."""
    if entries is None:
        entries = ()
    if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
        raise FunctionsError(f"functions={show(entries)}: must be a list of {{fn: package.module:function, "
                             "weight: w, name: n}")
    specs = tuple(_spec(i, e) for i, e in enumerate(entries))
    seen: dict[str, int] = {}
    for i, s in enumerate(specs):
        if s.name in seen:
            raise _fail(i, "name", s.name, f"repeats functions[{seen[s.name]}]'s name (each term is logged apart)")
        seen[s.name] = i
    marked = [i for i, s in enumerate(specs) if s.correctness]
    if beside_math_verify and marked:
        raise _fail(marked[0], "correctness", True, "math-verify is the correctness beside it (reward=math-verify); "
                    "reward=functions makes a function the correctness")
    if len(marked) > 1:
        raise _fail(marked[1], "correctness", True, f"functions[{marked[0]}] is the correctness already (one only)")
    if not beside_math_verify:
        if not specs:
            raise FunctionsError("functions=[]: reward=functions needs at least one function "
                                 "({fn: package.module:function, weight: w, name: n})")
        if not marked and len(specs) > 1:
            raise FunctionsError("functions: mark one correctness: true (the accuracy, the difficulty bins and "
                                 "evaluation read its verdict, value > 0)")
    return specs


def _rows(problems: Sequence[Problem] | None, golds: Sequence[str]) -> tuple[list[Any], list[bool], dict[str, list]]:
    """Each row's prompt as a function receives it, whether it is a conversation, and the keyword columns."""
    if problems is None:
        return [None] * len(golds), [False] * len(golds), {"answer": list(golds)}
    prompts = [list(p.messages) if p.messages is not None else p.prompt for p in problems]
    chat = [p.messages is not None for p in problems]
    keys = list(dict.fromkeys(k for p in problems for k in (p.columns or {}) if k not in _CALL_ARGS))
    columns = {k: [(p.columns or {}).get(k) for p in problems] for k in keys}
    if "answer" not in columns:  # the gold as the reward reads it, unless a column has that name
        columns["answer"] = [p.answer for p in problems]
    return prompts, chat, columns


def _number(value: Any) -> float | None:
    """A returned value as TRL's ``torch.tensor(..., dtype=float32)`` reads it (a bool is 1/0; a number, a NumPy or
    torch scalar: its value), or None when it is not a finite number."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...{text[-17:]}"


# reward=functions' default list (conf/reward/functions.yaml): math-verify's verdict as a TRL-style function
DEFAULT = ({"fn": "gdro.grading.verified:math_verified", "weight": 1.0, "name": "verified", "correctness": True,
            "timeout_s": 5.0},)


class FunctionReward:
    """The reward with a user's functions: ``base`` (math-verify, or None under ``reward=functions``) plus the
    weighted terms (module docstring). ``reward=functions`` builds it from ``functions`` alone;
    :meth:`beside` puts the functions beside a base reward."""

    reads_problems = True  # the trainer and evaluation pass each row's problem (prompts, columns) to score

    def __init__(self, functions: Sequence[Mapping[str, Any]] = DEFAULT) -> None:
        self._init(parse_functions(functions, beside_math_verify=False), None)

    @classmethod
    def beside(cls, base: Any, specs: Sequence[FunctionSpec]) -> FunctionReward:
        out = cls.__new__(cls)
        out._init(tuple(specs), base)
        return out

    def _init(self, specs: tuple[FunctionSpec, ...], base: Any) -> None:
        self.specs, self.base = specs, base
        self._fns = {s.name: load_function(s.fn) for s in specs}
        self._logged: set[tuple[str, str]] = set()
        self._timed_out = False  # whether the last call ran out of time
        marked = [s for s in specs if s.correctness] or (list(specs[:1]) if base is None else [])
        self.correctness = marked[0].name if marked else None
        self._eval: FunctionReward | None = None

    # -- scoring ---------------------------------------------------------------------------------------------------
    def score(self, completions: Sequence[str], golds: Sequence[str], finished: Sequence[bool],
              lengths: Sequence[int] | None = None, *, problems: Sequence[Problem] | None = None,
              completion_ids: Sequence[Sequence[int]] | None = None) -> RewardBatch:
        """The base reward's batch with the terms added (module docstring); ``problems``: each row's problem."""
        n = len(completions)
        if problems is not None and len(problems) != n:
            raise ValueError(f"problems must have one entry per completion, got {len(problems)} for {n}")
        prompts, chat, columns = _rows(problems, golds)
        shown = [[{"role": "assistant", "content": t}] if c else t for t, c in zip(completions, chat)]
        ids = [list(map(int, c)) for c in completion_ids] if completion_ids is not None else [[] for _ in range(n)]
        terms, errors = {}, {}
        for spec in self.specs:
            args = {**columns, "prompts": prompts, "completions": shown, "completion_ids": ids}
            terms[spec.name], errors[spec.name] = self._term(spec, args, n)
        total = np.zeros(n, dtype=np.float64)
        for spec in self.specs:
            total += np.nan_to_num(spec.weight * terms[spec.name], nan=0.0)  # TRL: nansum of the weighted terms
        if self.base is not None:
            batch = self.base.score(completions, golds, finished, lengths)
            return replace(batch, rewards=batch.rewards + total, terms=terms, term_errors=errors)
        correct = np.nan_to_num(terms[self.correctness], nan=0.0) > 0
        return RewardBatch(rewards=total, correct=correct, n_unparsable=0, n_truncated=0, n_timeout=0, n_bad_gold=0,
                           terms=terms, term_errors=errors)

    def _term(self, spec: FunctionSpec, args: dict[str, list], n: int) -> tuple[np.ndarray, int]:
        """One function's raw values over the batch (NaN: None or failed) and its failed rows."""
        out, kind = self._call(spec, args)
        if kind == "raised" and n > 1:  # again row by row: only the rows it raises on fail
            values, failed = np.full(n, np.nan), 0
            for i in range(n):
                one, bad = self._term(spec, {k: v[i : i + 1] for k, v in args.items()}, 1)
                values[i], failed = one[0], failed + bad
                if self._timed_out:  # a row that runs out of time: the rest fail too (one bound per row at most)
                    return values, failed + n - i - 1
            return values, failed
        if kind is not None:
            return np.full(n, np.nan), n
        if isinstance(out, (str, bytes, Mapping)) or not hasattr(out, "__len__") or len(out) != n:
            got = f"{type(out).__name__} of length {len(out)}" if hasattr(out, "__len__") else type(out).__name__
            self._warn(spec, "length", f"returned {got} for {n} completions")
            return np.full(n, np.nan), n
        values, failed = np.full(n, np.nan), 0
        for i, v in enumerate(out):
            if v is None:  # not applicable: NaN, not a failure (TRL)
                continue
            number = _number(v)
            if number is None:
                self._warn(spec, "value", f"returned {_short(v)} (not a finite number, nor None)")
                failed += 1
                continue
            values[i] = number
        return values, failed

    def _call(self, spec: FunctionSpec, args: dict[str, list]) -> tuple[Any, str | None]:
        """``fn(**args)`` under the deadline: (result, None), or (None, "raised" | "timeout")."""
        self._timed_out = False
        try:
            with deadline(spec.timeout_s, wall_s=WALL_FACTOR * spec.timeout_s):
                try:
                    return self._fns[spec.name](**args), None
                except Exception as exc:  # noqa: BLE001 -- a user's function must never end a run: counted, logged
                    self._warn(spec, "raised", f"raised {type(exc).__name__}: {str(exc)[:200]}")
                    return None, "raised"
        except Deadline:
            self._warn(spec, "timeout", f"ran past timeout_s={spec.timeout_s:g} s")
            self._timed_out = True
            return None, "timeout"

    def _warn(self, spec: FunctionSpec, kind: str, what: str) -> None:
        if (spec.name, kind) in self._logged:
            return
        self._logged.add((spec.name, kind))
        logger.warning("reward function %s (%s) %s: its rows score 0 for this term, counted in reward/%s/errors "
                       "(further such failures are not logged)", spec.name, spec.fn, what, spec.name)

    # -- the rest of the Reward protocol ---------------------------------------------------------------------------
    def metrics(self, batch: RewardBatch) -> dict[str, float]:
        """The base reward's metrics (or ``reward/accuracy``), and per term ``reward/<name>`` (the mean of its values
        where it applied; absent where it applied to no row) and ``reward/<name>/errors``."""
        out = self.base.metrics(batch) if self.base is not None else \
            {"reward/accuracy": float(batch.correct.sum()) / max(len(batch.rewards), 1)}
        for name, values in batch.terms.items():
            applied = values[~np.isnan(values)]
            if len(applied):
                out[f"reward/{name}"] = float(applied.mean())
            out[f"reward/{name}/errors"] = float(batch.term_errors.get(name, 0))
        return out

    def for_eval(self) -> Any:
        """Evaluation reads correctness alone: math-verify's evaluation form, or the correctness function, weight 1."""
        if self.base is not None:
            return self.base.for_eval()
        if self._eval is None:
            spec = next(s for s in self.specs if s.name == self.correctness)
            self._eval = FunctionReward.beside(None, (replace(spec, weight=1.0, correctness=True),))
        return self._eval

    def use_golds(self, table: Any) -> None:
        if self.base is not None:
            self.base.use_golds(table)


def with_functions(reward: Any) -> Any:
    """``reward`` with the functions its config names beside it (``reward.functions`` of ``reward=math-verify``), or
    ``reward`` itself when it names none (the default: nothing changes)."""
    specs = getattr(getattr(reward, "config", None), "functions", ())
    return FunctionReward.beside(reward, specs) if specs else reward
