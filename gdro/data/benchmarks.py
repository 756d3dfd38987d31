"""The paper's training set and evaluation benchmarks loaded as ``list[Problem]`` (spec §6.1), from the hub or from
local files.

``load_benchmark("math500")`` reads ``HuggingFaceH4/MATH-500`` from the hub; ``load_benchmark("math500",
data_files="math500.jsonl")`` reads a local copy with the same schema (``.json``/``.jsonl``, ``.parquet`` or
``.csv``). Either way every row becomes a :class:`~gdro.common.interfaces.Problem` by its benchmark's schema
(:mod:`gdro.data.benchmark_specs` names the benchmarks, :mod:`gdro.data.benchmark_rows` reads their rows).

Malformed lines of a local JSON-lines file (not JSON, not a JSON object, truncated, not UTF-8) never raise: it is
read line by line, the bad lines are counted per file in the :class:`~gdro.data.benchmark_rows.LoadReport` (the
first few by line number) and the good rows become the ``Dataset`` (``datasets.Dataset.from_list``). A file that
cannot give a single row (missing, empty, no valid line, a parquet/csv file ``datasets`` cannot read) and a hub
dataset that cannot be reached raise :class:`DataFileError`, whose message is one line naming the file or dataset.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

from gdro.common.interfaces import Problem
from gdro.data.benchmark_rows import LoadReport, lines_at, problems_from_rows
from gdro.data.benchmark_specs import BenchmarkSpec, get_spec


class DataFileError(ValueError):
    """A data file or hub dataset that cannot give any row; the message is one line naming it."""


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
            f"{lines_at(bad[:MAX_LINES_REPORTED], len(bad))})"
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


__all__ = ["DataFileError", "load_benchmark", "read_json_lines"]
