"""The paper's training set and evaluation benchmarks as ``list[Problem]`` (spec §6.1).

``load_benchmark("math500")`` reads ``HuggingFaceH4/MATH-500`` from the hub; ``load_benchmark("math500",
data_files="math500.jsonl")`` reads a local copy with the same schema (``.json``/``.jsonl``, ``.parquet`` or
``.csv``). Either way every row becomes a :class:`~gdro.interfaces.Problem`:

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

Column names: question and answer columns are *candidate lists* tried in order (the first column present in
the row with a non-null value wins), like the official ``_extract_question``/``_extract_answer_text``; a dotted
name reaches into a struct (``reward_model.ground_truth``, where verl's DAPO release keeps the gold).

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

Golds are prepared once at load (:func:`gdro.grading.golds.prepare_golds`, no time bound): the report counts those read
by gdro's rules and names those math-verify cannot read (compared as normalised text), and
:meth:`gdro.grading.rewards.MathVerifyReward.use_golds` takes the table, so scoring never re-parses a gold. Every
field of a :class:`BenchmarkSpec` can be overridden per call: ``load_benchmark("amc23",
question_keys=("problem",))``. Column names confirmed and unconfirmed are listed per entry in
:data:`BENCHMARKS`.

Malformed rows never raise: they are skipped and counted in :class:`LoadReport` by reason. So are malformed
lines of a local JSON-lines file (not JSON, not a JSON object, truncated, not UTF-8): it is read line by
line, the bad lines are counted per file (the first few by line number) and the good rows become the
``Dataset`` (``datasets.Dataset.from_list``). A file that cannot give a single row (missing, empty, no valid
line, a parquet/csv file ``datasets`` cannot read) and a hub dataset that cannot be reached raise
:class:`DataFileError`, whose message is one line naming the file or dataset.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gdro.grading.golds import ALT_SEP, BOXED, GoldTable, prepare_golds
from gdro.grading.rewards import last_boxed
from gdro.interfaces import Problem

MATH_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."
GPQA_TEMPLATE = (
    "{question}\n\n"
    "A: {A}\n"
    "B: {B}\n"
    "C: {C}\n"
    "D: {D}\n\n"
    "Please reason step by step, and put your final answer within \\boxed{{}}.\n"
    "Please only provide the letter of the answer in the box."
)
GPQA_LETTERS = "ABCD"

Kind = Literal["math", "gpqa"]
ListAnswers = Literal["auto", "all", "any"]


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark lives and how its rows map to problems.

    ``question_keys``/``answer_keys`` are candidate columns tried in order; for ``kind="gpqa"``
    ``answer_keys`` is ``(correct, incorrect_1, incorrect_2, incorrect_3)`` -- all four are required.
    ``id_key`` is a column (a dotted path reaches into a struct: ``"extra_info.index"``) or ``None``.
    ``chat_role``, ``solution_key``, ``list_answers`` and ``multiple_answer_key``: see the module docstring.
    """

    name: str
    hf_id: str
    config: str | None
    split: str
    question_keys: tuple[str, ...]
    answer_keys: tuple[str, ...]
    kind: Kind = "math"
    id_key: str | None = None
    chat_role: str = "user"  # a chat-format question: the content of its last message with this role
    solution_key: str | None = None  # no answer column: the gold is this column's last \boxed{}
    list_answers: ListAnswers = "auto"  # a list gold: parts of one answer ("all") or alternatives ("any")
    multiple_answer_key: str | None = "is_multiple_answer"  # "auto": this row flag says parts (true) or alternatives

    def __post_init__(self) -> None:
        if self.kind not in ("math", "gpqa"):
            raise ValueError(f"kind must be 'math' or 'gpqa', got {self.kind!r}")
        if self.list_answers not in ("auto", "all", "any"):
            raise ValueError(f"list_answers must be 'auto', 'all' or 'any', got {self.list_answers!r}")
        if not self.question_keys or not self.answer_keys:
            raise ValueError("question_keys and answer_keys must be non-empty")
        if self.kind == "gpqa" and len(self.answer_keys) != 4:
            raise ValueError(
                "a gpqa spec needs answer_keys = (correct, incorrect 1, incorrect 2, incorrect 3)"
            )


BENCHMARKS: dict[str, BenchmarkSpec] = {
    spec.name: spec
    for spec in (
        # Confirmed: create_dataset.py of the dataset repo (prompt = source_prompt[0].content, solution =
        # reward_model.ground_truth; columns prompt, solution, data_source, source_prompt, ability,
        # reward_model, extra_info{index}); split "train", config "en" from the official preprocessing script.
        # The original release / verl format (prompt = chat messages, gold under reward_model.ground_truth or
        # label) loads with the same spec (tested on real rows of both).
        BenchmarkSpec(
            "dapo_math",
            "open-r1/DAPO-Math-17k-Processed",
            "en",
            "train",
            ("prompt",),
            ("solution", "reward_model.ground_truth", "label"),
            id_key="extra_info.index",
        ),
        # Fields from the dataset card as given in the brief (problem, solution, answer, subject, level,
        # unique_id); "answer" (not the full solution) is the gold, as in the official _extract_answer_text.
        BenchmarkSpec(
            "math500",
            "HuggingFaceH4/MATH-500",
            None,
            "test",
            ("problem",),
            ("answer",),
            id_key="unique_id",
        ),
        # Confirmed (dataset card): id int64, problem, solution, answer (string), url, year; split "train".
        BenchmarkSpec(
            "aime2024",
            "HuggingFaceH4/aime_2024",
            None,
            "train",
            ("problem",),
            ("answer",),
            id_key="id",
        ),
        # Inferred from the sibling MathArena cards (aime_2023_II, aime_2024_I/II, aime_2026): problem_idx
        # int64, problem, answer (int64 there); split "train". Not read from aime_2025's own card.
        BenchmarkSpec(
            "aime2025",
            "MathArena/aime_2025",
            None,
            "train",
            ("problem",),
            ("answer",),
            id_key="problem_idx",
        ),
        # math-ai/amc23 / minervamath / olympiadbench: single "test" split (repo file listings: test parquet
        # / test.jsonl); columns question + answer from third-party loaders, not the cards themselves.
        # Fallback candidates mirror the official extractor's order.
        BenchmarkSpec(
            "amc23",
            "math-ai/amc23",
            None,
            "test",
            ("question", "problem"),
            ("answer", "final_answer"),
            id_key="id",
        ),
        BenchmarkSpec(
            "minerva",
            "math-ai/minervamath",
            None,
            "test",
            ("question", "problem"),
            ("answer", "final_answer"),
        ),
        BenchmarkSpec(
            "olympiadbench",
            "math-ai/olympiadbench",
            None,
            "test",
            ("question", "problem"),
            ("final_answer", "answer"),
            id_key="id",
        ),
        # Confirmed (several loaders): config gpqa_diamond, split "train", columns "Question",
        # "Correct Answer", "Incorrect Answer 1..3". "Record ID" is from the original GPQA CSV (unconfirmed
        # on the hub copy; rows without it fall back to the row index).
        BenchmarkSpec(
            "gpqa_diamond",
            "Idavidrein/gpqa",
            "gpqa_diamond",
            "train",
            ("Question",),
            ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"),
            kind="gpqa",
            id_key="Record ID",
        ),
    )
}


@dataclass
class LoadReport:
    """What :func:`load_benchmark` read: rows read, problems kept, rows skipped (by reason and by index)."""

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
            f"; {path}: {n} malformed line{'s' if n > 1 else ''} skipped ({_lines_at(first, n)})"
            for path, (n, first) in self.malformed_lines.items()
        )
        return (
            f"{self.name} ({self.source}, {self.split}): read {self.rows_read}, kept {self.kept}, "
            f"skipped {self.n_skipped} ({reasons}){lines}" + (f"; {self.golds.summary()}" if self.golds.golds else "")
        )


class DataFileError(ValueError):
    """A data file or hub dataset that cannot give any row; the message is one line naming it."""


def _lines_at(first: list[int], n: int) -> str:
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

    Strings: the content of the last ``\\boxed{}`` if there is one (:func:`gdro.grading.rewards.last_boxed`, as the reward
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


# ---------------------------------------------------------------------------------------------- loading

_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
MAX_LINES_REPORTED = 5  # malformed line numbers named per file


def _file_format(data_files: str | list[str]) -> str:
    files = [data_files] if isinstance(data_files, str) else list(data_files)
    if not files:
        raise ValueError("data_files is empty")
    formats = set()
    for f in files:
        suffix = Path(f).suffix.lower()
        if suffix not in _FORMATS:
            raise ValueError(f"unsupported data file {f!r}: expected one of {sorted(_FORMATS)}")
        formats.add(_FORMATS[suffix])
    if len(formats) > 1:
        raise ValueError(f"data_files mix formats {sorted(formats)}; pass files of one format")
    return formats.pop()


def _is_remote(path: str) -> bool:
    return "://" in path


def _local_files(data_files: str | list[str]) -> list[str]:
    """The files named (glob patterns expanded, sorted); :class:`DataFileError` for a missing file or a
    pattern matching none. Remote URLs pass through for ``datasets`` to fetch."""
    out: list[str] = []
    for f in [data_files] if isinstance(data_files, str) else list(data_files):
        if _is_remote(f):
            out.append(f)
        elif glob.has_magic(f):
            matches = sorted(m for m in glob.glob(f, recursive=True) if Path(m).is_file())
            if not matches:
                raise DataFileError(f"{f}: no file matches this pattern")
            out += matches
        elif Path(f).is_file():
            out.append(f)
        else:
            raise DataFileError(f"{f}: no such file" + (" (it is a directory)" if Path(f).is_dir() else ""))
    return out


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0][:300] if text else "") or type(err).__name__


def read_json_lines(path: str) -> tuple[list[dict], int, list[int]]:
    """The JSON-object rows of a JSON-lines file, the number of malformed lines and the first few of them.

    A line is malformed when it is not UTF-8, not JSON (a truncated last line included) or not a JSON object with a
    field (``{}`` is no row: a file of them would otherwise load as zero rows); blank lines are ignored. :class:`DataFileError` when the file is unreadable, empty or has no valid row.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise DataFileError(f"{path}: cannot be read ({err.strerror or err})") from err
    rows: list[dict] = []
    bad: list[int] = []
    for lineno, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            bad.append(lineno)
            continue
        if isinstance(row, dict) and row:
            rows.append(row)
        else:
            bad.append(lineno)
    if not rows:
        if not bad:
            raise DataFileError(f"{path}: empty file")
        raise DataFileError(
            f"{path}: no valid row ({len(bad)} line{'s' if len(bad) > 1 else ''} malformed, first at "
            f"{_lines_at(bad[:MAX_LINES_REPORTED], len(bad))})"
        )
    return rows, len(bad), bad[:MAX_LINES_REPORTED]


def _is_json_array(path: str) -> bool:
    """Whether a local ``.json`` file holds one JSON array (``datasets`` reads it whole), not JSON lines."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:  # read_json_lines reports it
        return False
    return head.startswith(b"[")


def _load_json_lines(files: list[str], malformed: dict[str, tuple[int, list[int]]]):
    """Local JSON-lines ``files`` as one ``Dataset`` of their good rows; bad lines go to ``malformed``."""
    import datasets

    rows: list[dict] = []
    for path in files:
        good, n_bad, first = read_json_lines(path)
        rows += good
        if n_bad:
            malformed[path] = (n_bad, first)
    # columns: the union over all rows, as the json loader has them (from_list keeps only the first row's
    # keys); a column of mixed types becomes datasets.Json, as in the json loader
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return datasets.Dataset.from_list(
        [{k: row.get(k) for k in keys} for row in rows], on_mixed_types="use_json"
    )


def _read_errors() -> tuple[type[BaseException], ...]:
    import datasets
    import pyarrow as pa

    return (datasets.exceptions.DatasetsError, pa.ArrowException, OSError, ValueError)


def _load_files(
    fmt: str, files: list[str], malformed: dict[str, tuple[int, list[int]]], cache_dir: str | None
):
    """The rows of local (or remote) ``files`` as a ``Dataset``; :class:`DataFileError` naming a file that
    cannot be read.

    Local JSON-lines files are read line by line (malformed lines counted in ``malformed``); JSON-array files,
    parquet, csv and remote files go to ``datasets.load_dataset`` whole.
    """
    import datasets

    if fmt == "json" and not any(_is_remote(f) or _is_json_array(f) for f in files):
        return _load_json_lines(files, malformed)
    for f in files:
        if not _is_remote(f) and Path(f).stat().st_size == 0:
            raise DataFileError(f"{f}: empty file")
    try:
        return datasets.load_dataset(fmt, data_files=files, split="train", cache_dir=cache_dir)
    except _read_errors() as err:
        where = files[0] if len(files) == 1 else ", ".join(files)
        raise DataFileError(f"{where}: datasets cannot read it as {fmt} ({_first_line(err)})") from err


def _load_hub(spec: BenchmarkSpec, split: str, cache_dir: str | None):
    """The hub dataset ``spec.hf_id``; :class:`DataFileError` (one line, with how to use a local copy) when it
    cannot be reached or found (offline: ``HF_DATASETS_OFFLINE=1`` and not cached)."""
    import datasets

    try:
        return datasets.load_dataset(spec.hf_id, spec.config, split=split, cache_dir=cache_dir)
    except (datasets.exceptions.DatasetsError, OSError) as err:  # offline, unreachable, not found
        dataset = spec.hf_id + (f" (config {spec.config})" if spec.config else "")
        raise DataFileError(
            f"{dataset}: could not be reached, found or read on the Hugging Face Hub ({_first_line(err)}); "
            "to read a local copy with the same columns, point data_files at it (gdro-train: "
            "data.data_files=PATH or data.test_data_files=PATH; gdro-eval: benchmarks.<i>.data_files=PATH)"
        ) from err


def get_spec(name: str, **overrides: Any) -> BenchmarkSpec:
    """The registered spec for ``name`` with ``overrides`` applied; unknown names raise ``ValueError``."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    spec = BENCHMARKS[name]
    for key in ("question_keys", "answer_keys"):
        if isinstance(overrides.get(key), str):
            overrides[key] = (overrides[key],)
        elif key in overrides:
            overrides[key] = tuple(overrides[key])
    return dataclasses.replace(spec, **overrides) if overrides else spec


def load_benchmark(
    name: str,
    *,
    data_files: str | list[str] | None = None,
    split: str | None = None,
    seed: int = 0,
    limit: int | None = None,
    cache_dir: str | None = None,
    **overrides: Any,
) -> tuple[list[Problem], LoadReport]:
    """Load benchmark ``name`` (a key of :data:`BENCHMARKS`) as problems plus a :class:`LoadReport`.

    Without ``data_files`` the hub dataset ``spec.hf_id`` (config ``spec.config``, split ``split`` or
    ``spec.split``) is read with ``datasets.load_dataset``. With ``data_files`` those local files are read
    (format from the extension; glob patterns allowed) and ``split`` only labels the uids, so a local copy of
    a split gets the same uids as the hub. Malformed lines of JSON-lines files are skipped and counted in the
    report's ``malformed_lines``; :class:`DataFileError` (one line, naming the file or dataset) when a file
    is missing, empty or has no valid row, or the hub dataset cannot be reached. ``limit`` reads only the
    first ``limit`` rows. ``seed`` fixes the GPQA option order. ``overrides`` replace :class:`BenchmarkSpec`
    fields (``question_keys=("problem",)``, ...).
    """
    spec = get_spec(name, **overrides)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    split = split or spec.split
    malformed: dict[str, tuple[int, list[int]]] = {}
    if data_files is None:
        ds = _load_hub(spec, split, cache_dir)
        source = spec.hf_id + (f":{spec.config}" if spec.config else "")
    else:
        fmt = _file_format(data_files)
        ds = _load_files(fmt, _local_files(data_files), malformed, cache_dir)
        source = ", ".join([data_files] if isinstance(data_files, str) else data_files)
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    problems, report = problems_from_rows(ds, spec, split=split, seed=seed, source=source)
    report.malformed_lines = malformed
    return problems, report


__all__ = [
    "BENCHMARKS",
    "GPQA_TEMPLATE",
    "MATH_SUFFIX",
    "BenchmarkSpec",
    "DataFileError",
    "LoadReport",
    "MalformedRow",
    "get_spec",
    "gpqa_options",
    "load_benchmark",
    "normalize_gold",
    "problems_from_rows",
    "read_json_lines",
]
