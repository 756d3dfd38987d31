"""A user's own data, ``data=custom``: a local ``.jsonl``/``.json``/``.parquet``/``.csv`` file or a hub dataset, read
with the ``datasets`` library by the column names the user gives (:class:`CustomData`).

Each row becomes a :class:`~gdro.common.interfaces.Problem`:

* **prompt** (``prompt_key``): a string, used as it is (no suffix is added: write the instruction into the prompt, e.g.
  "... put the final answer in \\boxed{}"), or a conversation, a list of ``{role, content}`` messages (TRL's
  conversational format), whose last ``user`` message is the prompt the model gets (as one user turn of its chat
  template; earlier turns and a system message are not given to the model) and which a reward function receives whole;
* **answer** (``answer_key``): the gold, read as the benchmark loaders read one
  (:func:`gdro.data.benchmark_rows.normalize_gold`: a ``\\boxed{}`` or ``$...$`` around it removed, numbers formatted,
  a list joined); ``answer_key: null`` for data without golds (``reward=functions`` whose functions need none);
* **level** (``level_key``): an integer level from that column (``3``, ``3.0``, ``"3"`` or ``"Level 3"``), which
  gives the per-level evaluation metrics (``eval/mean@k/level_L``) and the oracle sampler (``sampler=oracle-levels``)
  their levels; without it every level is 0;
* **uid** ``custom/<split>/<id>``: the ``id_key`` column's value, or ``#<row index>`` (stable while the file is);
* **columns**: the row's other columns, which a user's reward functions receive as keyword arguments (TRL's
  convention; gdro.grading.functions).

The held-out split (periodic evaluation) is ``test_path`` (a file or hub id; null: ``path``) at ``test_split`` (a hub
dataset's split), or, with neither set, ``test_size`` rows of the training data held out (evenly spaced through it,
never trained on). Malformed rows (no prompt, an empty or non-string one, a conversation without a user message, no
answer, a bad level, a repeated id) and malformed JSON lines are skipped and counted, and each split says what it
read in one line (``[gdro.data] train: custom (...): read 12, kept 9, skipped 3 (...)``); a file that gives no row
at all, a missing file or an unreachable hub dataset is a one-line ``config error: data: ...`` before the model loads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gdro.common.interfaces import Problem
from gdro.data.benchmark_rows import LoadReport, MalformedRow, _chat_content, _get, _text, normalize_gold
from gdro.data.benchmarks import _FORMATS, DataFileError, _file_format, _first_line, _load_files, _local_files

__all__ = ["CustomData", "check_golds", "problems_from_custom_rows"]

log = logging.getLogger(__name__)

_LEVEL = re.compile(r"^\D*?(-?\d+)\D*$")  # "3", "Level 3", "level-3": one integer in the text


def _is_file(path: str) -> bool:
    """Whether ``path`` names a data file by its extension (else it is a hub dataset id or a dataset dir)."""
    return Path(path).suffix.lower() in _FORMATS


def _level(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        raise MalformedRow("missing level" if value is None else "bad level")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and (m := _LEVEL.match(value.strip())):
        return int(m.group(1))
    raise MalformedRow("bad level")


def _column(row: Mapping[str, Any], key: str, setting: str) -> Any:
    """``row[key]`` (a dotted key reaches into a struct); a row without that column at all is malformed, its reason
    naming the setting (a whole file of them says: wrong column name)."""
    if key not in row and key.split(".")[0] not in row:
        raise MalformedRow(f"no column {key!r} (set data.{setting})")
    return _get(row, key)


def _prompt(value: Any) -> tuple[str, tuple[dict, ...] | None]:
    """The prompt text and, for a conversation, its messages."""
    if isinstance(value, (list, tuple)):
        messages = tuple(dict(m) for m in value if isinstance(m, Mapping))
        if len(messages) != len(value):
            raise MalformedRow("conversation with a message that is not a {role, content} mapping")
        return _text(_chat_content(list(messages), "user"), "user message"), messages
    return _text(value, "prompt"), None


def problems_from_custom_rows(rows, *, prompt_key: str, answer_key: str | None, level_key: str | None,
                              id_key: str | None, split: str, source: str) -> tuple[list[Problem], LoadReport]:
    """Rows (mappings) as problems by the user's column names; malformed rows skipped and counted by reason."""
    report = LoadReport("custom", source, split)
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        report.rows_read += 1
        try:
            if not isinstance(row, Mapping):
                raise MalformedRow("row is not a mapping")
            prompt, messages = _prompt(_column(row, prompt_key, "prompt_key"))
            answer = normalize_gold(_column(row, answer_key, "answer_key")) if answer_key is not None else ""
            level = _level(_column(row, level_key, "level_key")) if level_key is not None else 0
            row_id = _get(row, id_key) if id_key is not None else None
            if row_id is None or isinstance(row_id, (bool, Mapping, list, tuple)) or not str(row_id).strip():
                row_id = f"#{index:05d}"
            uid = f"custom/{split}/{str(row_id).strip()}"
            if uid in seen:
                raise MalformedRow("duplicate id" if id_key is not None else "duplicate uid")
        except MalformedRow as err:
            report._skip(index, str(err))
            continue
        seen.add(uid)
        columns = {k: v for k, v in row.items() if k != prompt_key}
        problems.append(Problem(uid=uid, prompt=prompt, answer=answer, level=level, columns=columns,
                                messages=messages))
        report.kept += 1
    return problems, report


@dataclass
class CustomData:
    """Your own data (module docstring). Hydra-instantiable with plain kwargs (conf/data/custom.yaml)."""

    path: str | None = None  # a .jsonl/.json/.parquet/.csv file (or a glob of them), or a hub dataset id; required
    split: str = "train"  # the hub dataset's split to train on (a file: "train")
    prompt_key: str = "prompt"  # the prompt's column: a string, or a list of {role, content} messages
    answer_key: str | None = "answer"  # the gold's column (null: no golds, for reward=functions)
    level_key: str | None = None  # a column of integer levels (per-level metrics, the oracle sampler); null: all 0
    id_key: str | None = None  # a column of row ids for the uids (null: the row index)
    test_path: str | None = None  # the held-out file or hub id (null: path)
    test_split: str | None = None  # the hub dataset's held-out split (with test_path a hub id, or path's)
    test_size: int = 0  # with no test_path/test_split: this many training rows held out for evaluation

    def __post_init__(self) -> None:
        for key in ("path", "test_path"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{key} must be a data file (.jsonl/.json/.parquet/.csv) or a hub dataset id, "
                                 f"got {value!r}")
            if value is not None and Path(value).suffix and not _is_file(value) and Path(value).exists():
                raise ValueError(f"{key} must be a .jsonl/.json/.parquet/.csv file or a hub dataset id, got {value!r}")
        for key in ("split", "prompt_key"):
            if not getattr(self, key).strip():
                raise ValueError(f"{key} must be a non-empty string, got {getattr(self, key)!r}")
        for key in ("answer_key", "level_key", "id_key", "test_split"):
            value = getattr(self, key)
            if value is not None and not value.strip():
                raise ValueError(f"{key} must be a non-empty string or null, got {value!r}")
        if self.path is not None and _is_file(self.path) and self.split != "train":
            raise ValueError(f"split must be 'train' for a data file (a file has no splits; the held-out one is "
                             f"test_path), got {self.split!r}")
        if isinstance(self.test_size, bool) or not isinstance(self.test_size, int) or self.test_size < 0:
            raise ValueError(f"test_size must be an integer >= 0, got {self.test_size!r}")
        if self.test_size and (self.test_path is not None or self.test_split is not None):
            raise ValueError(f"test_size must be 0 when test_path or test_split names the held-out data, "
                             f"got {self.test_size}")
        test = self.test_path or self.path
        if self.test_split is not None and test is not None and _is_file(test):
            raise ValueError(f"test_split must be null for a held-out data file ({test}: a file has no splits), "
                             f"got {self.test_split!r}")
        if self.prompt_key in (self.answer_key, self.level_key):
            raise ValueError(f"prompt_key must differ from answer_key and level_key, got {self.prompt_key!r}")
        self._cache: dict[str, list[Problem]] = {}

    # -- loading ---------------------------------------------------------------------------------------------------
    def _rows(self, where: str, split: str):
        """The rows of a file (glob) or a hub dataset's split, and the report's malformed JSON lines."""
        malformed: dict[str, tuple[int, list[int]]] = {}
        if _is_file(where):
            return _load_files(_file_format(where), _local_files(where), malformed, None), malformed
        import datasets

        try:
            return datasets.load_dataset(where, split=split), malformed
        except (datasets.exceptions.DatasetsError, OSError, ValueError) as err:
            raise DataFileError(f"{where} (split {split}): could not be read as a local dataset dir or found on the "
                                f"Hugging Face Hub ({_first_line(err)})") from err

    def _load(self, which: str, where: str, split: str) -> list[Problem]:
        ds, malformed = self._rows(where, split)
        problems, report = problems_from_custom_rows(  # uids: custom/<hub split, or train|test for a file>/<id>
            ds, prompt_key=self.prompt_key, answer_key=self.answer_key, level_key=self.level_key, id_key=self.id_key,
            split=which if _is_file(where) else split, source=where)
        report.malformed_lines = malformed
        log.info("%s split: %s", which, report.summary())
        print(f"[gdro.data] {which}: {report.summary()}")
        if not problems:
            raise DataFileError(f"{which} split {where!r} has no usable problems ({report.summary()})")
        return problems

    def _splits(self) -> dict[str, list[Problem]]:
        if self._cache:
            return self._cache
        if self.path is None:
            raise DataFileError("data.path=null: name your data (a .jsonl/.json/.parquet/.csv file or a hub dataset "
                                "id; README: your own data)")
        if self.test_path is None and self.test_split is None and not self.test_size:
            raise DataFileError("data.test_size=0: no held-out data for evaluation; set data.test_path (a file or hub "
                                "id), data.test_split (a split of data.path) or data.test_size (rows held out)")
        train = self._load("train", self.path, self.split)
        if self.test_size:
            if self.test_size >= len(train):
                raise DataFileError(f"data.test_size={self.test_size}: must be < the {len(train)} usable rows of "
                                    f"{self.path}")
            held = set(np.unique(np.linspace(0, len(train) - 1, self.test_size).round().astype(np.int64)).tolist())
            test = [p for i, p in enumerate(train) if i in held]
            train = [p for i, p in enumerate(train) if i not in held]
            print(f"[gdro.data] test: {len(test)} rows of {self.path} held out (data.test_size), never trained on")
        else:
            test = self._load("test", self.test_path or self.path, self.test_split or "train")
        self._cache = {"train": train, "test": test}
        return self._cache

    def train(self) -> list[Problem]:
        return list(self._splits()["train"])

    def test(self) -> list[Problem]:
        return list(self._splits()["test"])


def check_golds(data: Any, reward: Any) -> None:
    """``data.answer_key: null`` (no golds) with a reward that reads golds (math-verify, also with functions beside
    it): a ValueError naming the key, before anything loads."""
    from gdro.grading.rewards import MathVerifyReward

    if isinstance(data, CustomData) and data.answer_key is None and \
            isinstance(getattr(reward, "base", None) or reward, MathVerifyReward):
        raise ValueError("data.answer_key=null: the data has no golds, and reward=math-verify reads them; name the "
                         "gold's column, or use reward=functions with functions that need none")
