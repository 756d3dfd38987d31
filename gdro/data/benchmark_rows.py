"""A benchmark's rows read by its schema (a :class:`~gdro.data.benchmark_specs.BenchmarkSpec`) as
``list[Problem]``, with a :class:`LoadReport` of what was kept and what was skipped (:func:`problems_from_rows`).

* **math** benchmarks (and the DAPO training set): ``prompt = question + MATH_SUFFIX`` (the paper's
  "Let's think step by step and output the final answer within \\boxed{}."), ``answer`` = the gold answer
  for math-verify, with a surrounding ``\\boxed{...}`` / ``$...$`` removed;
* **gpqa**: the four options are shuffled with a generator seeded from ``(seed, row index)`` (NumPy
  ``SeedSequence``; the official code used unseeded ``random``), the prompt is the General-Reasoner template
  of the official ``build_math_benchmarks.py`` and ``answer`` is the letter (``"A"``–``"D"``) of the correct
  option.

``level`` is 0 (benchmarks carry no synthetic level). ``uid`` is ``"<name>/<split>/<row id>"`` where the
schema has an id column (``id_key``) and ``"<name>/<split>/#<row index>"`` otherwise (or when a row lacks
its id), so uids do not depend on whether the data came from the hub or from a local copy of the same split.

Row shapes real copies use (each tested on a real file):

* **chat-format prompts** (the original DAPO release, verl's format): a question that is a list of
  ``{"role", "content"}`` messages gives the content of its last message whose role is ``chat_role``
  (``"user"``);
* **a gold inside a solution** (the Qwen2.5-Math harness's Minerva copy has no answer column): with
  ``solution_key`` set, a row whose answer columns are all missing takes the last ``\\boxed{}`` of that column
  (a row without a box there is skipped). The skip reason of a row with no answer names the setting that would
  load it when one of its columns holds a box;
* **list golds** (OlympiadBench's ``final_answer``): ``list_answers="auto"`` (default) reads a one-element list
  as its element and a longer one as the parts of one answer (joined ``", "``) when the row's
  ``multiple_answer_key`` column (``is_multiple_answer``) is true or absent, and as *alternatives* (any one is
  correct; joined by :data:`gdro.grading.golds.ALT_SEP`) when it is false; ``"all"`` / ``"any"`` force one reading;
* **GPQA**: a row is kept when its correct option differs from every incorrect one; two incorrect options that
  repeat each other (2 rows of GPQA-Diamond) are both shown.

Golds are prepared once here (:func:`gdro.grading.golds.prepare_golds`, no time bound): the report counts those read
by gdro's rules and names those math-verify cannot read (compared as normalised text), and
:meth:`gdro.grading.rewards.MathVerifyReward.use_golds` takes the table, so scoring never re-parses a gold.
Malformed rows never raise: they are skipped and counted in :class:`LoadReport` by reason.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from gdro.common.interfaces import Problem
from gdro.data.benchmark_specs import GPQA_LETTERS, GPQA_TEMPLATE, MATH_SUFFIX, BenchmarkSpec
from gdro.grading.answers import last_boxed
from gdro.grading.golds import ALT_SEP, BOXED, GoldTable, prepare_golds


@dataclass
class LoadReport:
    """What :func:`gdro.data.benchmarks.load_benchmark` read: rows read, problems kept, rows skipped (by reason and
    by index)."""

    name: str
    source: str
    split: str
    rows_read: int = 0
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    skipped_rows: list[tuple[int, str]] = field(default_factory=list)
    # per local JSON-lines file with malformed lines: (how many, the first few 1-based line numbers)
    malformed_lines: dict[str, tuple[int, list[int]]] = field(default_factory=dict)
    golds: GoldTable = field(default_factory=GoldTable)  # the kept problems' golds, prepared once (gdro.grading.golds)

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def n_malformed_lines(self) -> int:
        return sum(n for n, _ in self.malformed_lines.values())

    def _skip(self, index: int, reason: str) -> None:
        self.skipped[reason] += 1
        self.skipped_rows.append((index, reason))

    def summary(self) -> str:
        reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.skipped.items())) or "none"
        lines = "".join(
            f"; {path}: {n} malformed line{'s' if n > 1 else ''} skipped ({lines_at(first, n)})"
            for path, (n, first) in self.malformed_lines.items()
        )
        return (
            f"{self.name} ({self.source}, {self.split}): read {self.rows_read}, kept {self.kept}, "
            f"skipped {self.n_skipped} ({reasons}){lines}" + (f"; {self.golds.summary()}" if self.golds.golds else "")
        )


def lines_at(first: list[int], n: int) -> str:
    """``"lines 3, 7, ..."``: the first few of ``n`` line numbers (a report's malformed lines)."""
    at = ", ".join(map(str, first))
    return f"line{'s' if len(first) > 1 else ''} {at}" + (", ..." if n > len(first) else "")


class MalformedRow(ValueError):
    """A row that cannot become a problem; the message is the skip reason."""


# ---------------------------------------------------------------------------------------------- field access


def _get(row: Mapping[str, Any], path: str) -> Any:
    """``row["a"]["b"]`` for ``"a.b"`` (a column literally named ``"a.b"`` wins); ``None`` when absent."""
    if path in row:
        return row[path]
    value: Any = row
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _first(row: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = _get(row, key)
        if value is not None:
            return value
    return None


def _chat_content(messages: list, role: str) -> Any:
    """The content of the last ``{"role": role, "content": ...}`` message; :class:`MalformedRow` if none."""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == role:
            return message.get("content")
    roles = sorted({str(m.get("role")) for m in messages if isinstance(m, Mapping)})
    raise MalformedRow(f"chat question without a {role!r} message (roles: {', '.join(roles) or 'none'}; set chat_role)")


def _text(value: Any, what: str) -> str:
    """A question / option: a non-empty string, else :class:`MalformedRow`."""
    if value is None:
        raise MalformedRow(f"missing {what}")
    if not isinstance(value, str):
        raise MalformedRow(f"non-string {what}")
    value = value.strip()
    if not value:
        raise MalformedRow(f"empty {what}")
    return value


_DOLLARS = re.compile(r"^\$+(.*?)\$+$", re.DOTALL)


def normalize_gold(value: Any, list_answers: Literal["all", "any"] = "all") -> str:
    """A gold answer as a math-verify gold string, or :class:`MalformedRow`.

    Strings: the content of the last ``\\boxed{}`` if there is one (:func:`gdro.grading.answers.last_boxed`, as the reward
    reads a completion's), then surrounding ``$...$`` removed.
    Integers (MathArena stores AIME answers as int64) and finite floats (integral ones without ``.0``) are
    formatted. A list of strings (OlympiadBench ``final_answer``) is joined with ``", "`` as the parts of one
    answer (``list_answers="all"``) or with :data:`gdro.grading.golds.ALT_SEP` as alternatives (``"any"``). Anything
    else (bool, dict, NaN, ...) is malformed.
    """
    if value is None:
        raise MalformedRow("missing answer")
    if isinstance(value, bool):
        raise MalformedRow("non-string answer")
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise MalformedRow("non-finite answer")
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(v, str) for v in value):
            raise MalformedRow("non-string answer")
        parts = [normalize_gold(v) for v in value]
        return (ALT_SEP if list_answers == "any" else ", ").join(parts)
    if not isinstance(value, str):
        raise MalformedRow("non-string answer")
    text = value.strip()
    boxed = last_boxed(text)
    if boxed is not None:
        text = boxed.strip()
    match = _DOLLARS.match(text)
    if match:
        text = match.group(1).strip()
    if not text:
        raise MalformedRow("empty answer")
    return text


def _row_id(row: Mapping[str, Any], spec: BenchmarkSpec) -> str | None:
    if spec.id_key is None:
        return None
    value = _get(row, spec.id_key)
    if value is None or isinstance(value, (bool, Mapping, list, tuple)):
        return None
    text = str(value).strip()
    return text or None


# ---------------------------------------------------------------------------------------------- row parsing


def gpqa_options(row_index: int, seed: int) -> np.ndarray:
    """The option order for a GPQA row: ``order[k]`` is the source option shown as letter ``"ABCD"[k]``
    (source 0 is the correct answer). A pure function of ``(seed, row_index)``."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(row_index)]))
    return rng.permutation(4)


def _math_problem(row: Mapping[str, Any], spec: BenchmarkSpec) -> tuple[str, str]:
    question = _first(row, spec.question_keys)
    if isinstance(question, list):
        question = _chat_content(question, spec.chat_role)
    return _text(question, "question") + MATH_SUFFIX, _gold(row, spec)


def _gold(row: Mapping[str, Any], spec: BenchmarkSpec) -> str:
    """The row's gold string (module docstring: answer columns, ``solution_key``, list golds)."""
    value = _first(row, spec.answer_keys)
    if value is None and spec.solution_key is not None:
        solution = _get(row, spec.solution_key)
        boxed = last_boxed(solution) if isinstance(solution, str) else None
        if boxed is None:
            raise MalformedRow(f"no \\boxed{{}} in {spec.solution_key}")
        value = boxed
    if value is None:
        raise MalformedRow("missing answer" + _answer_hint(row, spec))
    if isinstance(value, (list, tuple)) and len(value) > 1:
        mode = spec.list_answers
        if mode == "auto":
            flag = _get(row, spec.multiple_answer_key) if spec.multiple_answer_key else None
            mode = "any" if flag is False else "all"
        return normalize_gold(value, mode)
    return normalize_gold(value)


def _answer_hint(row: Mapping[str, Any], spec: BenchmarkSpec) -> str:
    """What would load a row without an answer column: a column holding a box, or the columns there are."""
    if any(key.split(".")[0] in row for key in spec.answer_keys):
        return ""  # the column is there, empty in this row
    tried = ", ".join(spec.answer_keys)
    boxed = [k for k, v in row.items() if isinstance(v, str) and BOXED in v and k not in spec.question_keys]
    if boxed and spec.solution_key is None:
        return f" (no column {tried}; {boxed[0]!r} holds a \\boxed{{}}: solution_key={boxed[0]} takes its last one)"
    return f" (no column {tried}; columns: {', '.join(map(str, row))}; set answer_keys)"


def _gpqa_problem(row: Mapping[str, Any], spec: BenchmarkSpec, index: int, seed: int) -> tuple[str, str]:
    question = _text(_first(row, spec.question_keys), "question")
    options: list[str] = []
    for key in spec.answer_keys:
        value = _get(row, key)
        if not isinstance(value, str) or not value.strip():
            raise MalformedRow("wrong GPQA option count")
        options.append(value.strip())
    if options[0] in options[1:]:  # the correct letter must be unique; repeated incorrect options are harmless
        raise MalformedRow("correct GPQA option repeated among the incorrect ones")
    order = gpqa_options(index, seed)
    shown = dict(zip(GPQA_LETTERS, (options[i] for i in order), strict=True))
    gold = GPQA_LETTERS[int(np.flatnonzero(order == 0)[0])]
    return GPQA_TEMPLATE.format(question=question, **shown), gold


def problems_from_rows(
    rows: Iterable[Mapping[str, Any]],
    spec: BenchmarkSpec,
    *,
    split: str | None = None,
    seed: int = 0,
    source: str = "<rows>",
) -> tuple[list[Problem], LoadReport]:
    """Turn already-loaded rows (dicts) into problems; malformed rows are skipped and reported."""
    split = split or spec.split
    report = LoadReport(spec.name, source, split)
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        report.rows_read += 1
        try:
            if not isinstance(row, Mapping):
                raise MalformedRow("row is not a mapping")
            if spec.kind == "gpqa":
                prompt, answer = _gpqa_problem(row, spec, index, seed)
            else:
                prompt, answer = _math_problem(row, spec)
            row_id = _row_id(row, spec)
            uid = f"{spec.name}/{split}/" + (row_id if row_id is not None else f"#{index:05d}")
            if uid in seen:
                raise MalformedRow("duplicate uid")
        except MalformedRow as err:
            report._skip(index, str(err))
            continue
        seen.add(uid)
        problems.append(Problem(uid=uid, prompt=prompt, answer=answer, level=0))
        report.kept += 1
    if spec.kind == "math":
        report.golds = prepare_golds(p.answer for p in problems)
    return problems, report


__all__ = ["LoadReport", "MalformedRow", "gpqa_options", "lines_at", "normalize_gold", "problems_from_rows"]
