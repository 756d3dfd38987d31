"""Run summaries: one JSON object per run holding everything gdro-report reads from that run, so that a report can
be rebuilt, and its data committed, without the run dirs (which live in the git-ignored ``outputs/``; issue #47).

    gdro-report SWEEP_DIR --summaries results.jsonl   # the report, and one line per run it pooled
    gdro-report results.jsonl                         # the same tables and figures, from the file alone

``gdro-report FILE`` writes the same ``table.md``, ``table.csv``, ``paired.md``, ``compute.md``, ``mechanism.md``,
``paper_mechanism.md``, ``table1.md`` and figures as on the sweep dir, to the byte (given the same options), except
the list of run dirs left out (the file holds only the runs pooled) and, when SWEEP_DIR is itself one run dir, the
figure titles (they name the dir's parent).

A summary (schema ``gdro.run-summary/1``) holds: ``run`` (the run dir's path below the sweep dir) and ``sweep`` (the
sweep dir's name: reports name the run ``<sweep>/<run>``, as from the dirs), ``method``, ``label``, ``seed``,
``status`` and ``problems`` (why it is not a completed run, as gdro/report/runs.py judged it), ``last_step``,
``choices`` (run.json's Hydra group choices) and ``overrides`` (``.hydra/overrides.yaml``; None without one),
``commit``, ``dirty``, ``versions``, ``machine`` (the CPU and ``cpu_capability``, the ISA torch dispatches to),
``world_size`` and ``data`` (run.json's), ``config`` (the whole resolved config, ~3 KB), ``evaluation`` (``k`` and
``metrics`` of gdro-eval's ``<run>/eval/eval.json`` for Table 1; None without one) and ``metrics``: the
metrics.jsonl rows (malformed lines dropped, as the report drops them) restricted to the keys the report reads
(:data:`METRIC_KEYS`), as a table: ``keys`` (each key once), ``shapes`` (each distinct key list of a row, as indices
into ``keys``, in the row's order) and ``rows`` (``[shape, value, ...]`` per row, in the file's order). Values are
written as ``json`` writes them: a float as its repr (read back exactly), NaN as ``NaN`` (as metrics.jsonl has it).

Size (measured): 6-7 KB a run of ``experiment=smoke`` (3 steps; 3.2 KB of it the config), 68-70 KB a 250-step run
of ``experiment=toy-curriculum`` (its metrics.jsonl: 760 KB); a path ending in ``.gz`` is written gzip'd (12.5 KB for
that run; no timestamp in it: the same summaries give the same bytes) and read back as such.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

from gdro.common.ioerrors import atomic_write, atomic_write_text
from gdro.report.names import method_rank
from gdro.report.runs import Skipped, SweepRun, UnusableRun, read_overrides, read_run_json
from gdro.report.table1 import eval_record

SCHEMA = "gdro.run-summary/1"
# The metric keys the report reads (gdro/report/*.py): a row's key is kept when it starts with one of these.
# tests/test_report_summary.py checks that every metric-key string in gdro/report/ falls under one.
METRIC_KEYS = ("step", "eval/", "rollout/n_total", "rollout/len_mean", "compute/tokens_cum", "compute/rollouts",
               "compute/discarded_rollouts", "difficulty/batch", "difficulty/informative", "difficulty/wse_ratio",
               "difficulty/pool/", "gdro/")  # difficulty/pool/: the pool's bins, for pilots' criteria (issue #48)


def metrics_table(rows: list[dict]) -> dict[str, list]:
    """The rows' kept keys as ``{"keys", "shapes", "rows"}`` (see the module docstring); exact, key order kept."""
    keys: dict[str, int] = {}
    shapes: dict[tuple[int, ...], int] = {}
    out = []
    for row in rows:
        kept = [(k, v) for k, v in row.items() if k.startswith(METRIC_KEYS)]
        shape = tuple(keys.setdefault(k, len(keys)) for k, _ in kept)
        out.append([shapes.setdefault(shape, len(shapes)), *(v for _, v in kept)])
    return {"keys": list(keys), "shapes": [list(s) for s in shapes], "rows": out}


def metrics_rows(table: Any) -> list[dict]:
    """The rows of a :func:`metrics_table`; ``ValueError`` saying what is wrong when it is not one."""
    if not isinstance(table, dict) or not all(isinstance(table.get(k), list) for k in ("keys", "shapes", "rows")):
        raise ValueError("'metrics' is not an object of lists 'keys', 'shapes', 'rows'")
    keys, shapes = table["keys"], table["shapes"]
    if not all(isinstance(k, str) for k in keys):
        raise ValueError("'metrics': a key is not a string")
    for i, shape in enumerate(shapes):
        if not isinstance(shape, list) or not all(type(j) is int and 0 <= j < len(keys) for j in shape):
            raise ValueError(f"'metrics': shape {i} is not a list of indices into its {len(keys)} keys")
    rows = []
    for i, row in enumerate(table["rows"]):
        shape = row[0] if isinstance(row, list) and row else None
        if type(shape) is not int or not 0 <= shape < len(shapes) or len(row) != 1 + len(shapes[shape]):
            raise ValueError(f"'metrics': row {i} is not [shape, one value per key of the shape]")
        rows.append({keys[j]: v for j, v in zip(shapes[shape], row[1:])})
    return rows


def home_as_tilde(obj: Any, home: str | None = None) -> Any:
    """``obj`` with every string that names a path under the user's home directory written from ``~`` (a resolved
    config holds ``${oc.env:HOME}``'s value, e.g. model.fallback): summaries are committed and shared, and speak of no
    machine's home."""
    home = (home if home is not None else os.path.expanduser("~")).rstrip("/")
    if not home:  # no home, or "/" (a root user's home on some systems): nothing to rewrite
        return obj
    if isinstance(obj, str):
        return "~" + obj[len(home):] if obj == home or obj.startswith(home + "/") else obj
    if isinstance(obj, dict):
        return {k: home_as_tilde(v, home) for k, v in obj.items()}
    if isinstance(obj, list):
        return [home_as_tilde(v, home) for v in obj]
    return obj


def summarize(run: SweepRun, root: str | Path | None = None) -> dict[str, Any]:
    """The summary of ``run`` (a run dir that loads; see the module docstring), named by its path below ``root``
    (the sweep dir; default: the run dir's parent), paths under the home directory written from ``~``
    (:func:`home_as_tilde`). :class:`UnusableRun` when its run.json cannot be read now."""
    root = Path(root) if root is not None else run.path.parent
    try:
        rel = run.path.relative_to(root).as_posix()
    except ValueError:
        rel, root = run.path.name, run.path.parent
    meta = read_run_json(run.path / "run.json")
    git = meta.get("git") if isinstance(meta.get("git"), dict) else {}
    record = eval_record(run)
    summary = home_as_tilde({
        "schema": SCHEMA, "run": rel, "sweep": Path(os.path.abspath(root)).name, "method": run.method,
        "label": run.label, "seed": run.seed, "status": run.status, "problems": run.problems,
        "last_step": meta.get("last_step"), "choices": meta.get("choices"), "overrides": read_overrides(run.path),
        "commit": git.get("commit"), "dirty": git.get("dirty"), "versions": meta.get("versions"),
        "machine": meta.get("machine"), "world_size": meta.get("world_size"), "data": meta.get("data"),
        "config": run.config,
        "evaluation": {k: record[k] for k in ("k", "metrics") if k in record} if isinstance(record, dict) else None,
    })
    summary["metrics"] = metrics_table(run.rows)  # numbers only: not walked for paths
    return summary


def _order(run: SweepRun) -> tuple:
    return method_rank(run.method), str(run.seed), str(run.path)  # scan_runs' order


def write_summaries(runs: list[SweepRun], path: str | Path, root: str | Path | None = None) -> Path:
    """Write the summaries of ``runs`` (method order, then seed) to ``path``, one JSON object a line, whole or not
    at all (gdro.common.ioerrors.atomic_write); gzip'd when ``path`` ends in ``.gz``. Returns ``path``."""
    path = Path(path)
    text = "".join(json.dumps(summarize(r, root), separators=(",", ":")) + "\n" for r in sorted(runs, key=_order))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        data = gzip.compress(text.encode("utf-8"), mtime=0)
        return atomic_write(path, lambda fh: fh.write(data), binary=True)
    return atomic_write_text(path, text)


def _field(summary: dict, key: str, types: tuple[type, ...], what: str) -> Any:
    value = summary.get(key)
    if not isinstance(value, types):
        raise TypeError(f"'{key}' is {'missing' if key not in summary else type(value).__name__}, not {what}")
    return value


def _run(summary: Any, path: Path) -> SweepRun:
    """The :class:`SweepRun` of one summary line; ``ValueError`` or ``TypeError`` naming what is wrong."""
    if not isinstance(summary, dict):
        raise TypeError("is not a JSON object")
    if summary.get("schema") != SCHEMA:
        raise ValueError(f"schema {summary.get('schema')!r}, not {SCHEMA!r}: not a gdro run summary of this version")
    run, sweep = _field(summary, "run", (str,), "a path"), _field(summary, "sweep", (str,), "a name")
    if Path(run).is_absolute() or ".." in Path(run).parts or "/" in sweep or sweep in (".", ".."):
        raise ValueError(f"run {run!r} of sweep {sweep!r} is not a path below a sweep dir")
    problems = _field(summary, "problems", (list,), "a list")
    if not all(isinstance(p, str) for p in problems):
        raise ValueError("'problems' is not a list of strings")
    return SweepRun(
        path=path / sweep / run,
        method=_field(summary, "method", (str,), "a string"),
        seed=summary.get("seed"),
        config=_field(summary, "config", (dict,), "an object"),
        rows=metrics_rows(summary.get("metrics")),
        status=_field(summary, "status", (str, type(None)), "a string or null"),
        problems=problems,
        evaluation=_field(summary, "evaluation", (dict, type(None)), "an object or null"),
    )


def summary_lines(path: Path) -> list[bytes]:
    """The raw lines of a summaries file, gunzipped when it is gzip'd; :class:`UnusableRun` when it is not a whole
    gzip file (an ``OSError`` when it cannot be read)."""
    try:
        data = path.read_bytes()
        return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).splitlines()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise UnusableRun(f"{path}: not a whole gzip file ({err})") from err


def load_summaries(path: str | Path) -> tuple[list[SweepRun], list[Skipped]]:
    """The runs of a summaries file (``write_summaries``; gzip'd or not), each at ``path/<sweep>/<run>`` (no real
    dir: reports name it ``<sweep>/<run>``), in scan_runs' order; and its unusable lines, each a :class:`Skipped`
    at ``path`` whose reason names the line. :class:`UnusableRun` when the file is not a whole gzip file; an
    ``OSError`` when it cannot be read."""
    path = Path(path)
    runs, skipped, seen = [], [], {}
    for lineno, raw in enumerate(summary_lines(path), start=1):
        if not raw.strip():
            continue
        try:
            run = _run(json.loads(raw.decode("utf-8")), path)
        except UnicodeDecodeError:
            skipped.append(Skipped(path, f"line {lineno}: is not valid UTF-8"))
        except json.JSONDecodeError:
            skipped.append(Skipped(path, f"line {lineno}: is not valid JSON (truncated?)"))
        except (TypeError, ValueError) as err:
            skipped.append(Skipped(path, f"line {lineno}: {err}"))
        else:
            if run.path in seen:
                skipped.append(Skipped(path, f"line {lineno}: run {run.path.relative_to(path).as_posix()} again "
                                             f"(line {seen[run.path]}); a run counts once"))
                continue
            seen[run.path] = lineno
            runs.append(run)
    return sorted(runs, key=_order), skipped


def read_summaries(path: str | Path) -> tuple[list[SweepRun], Path]:
    """``gdro-report FILE``'s runs: those of :func:`load_summaries`, and the root the report names them from
    (``path/<sweep>`` when they share one sweep, else ``path``). :class:`UnusableRun` with a one-line message naming
    the file and its first unusable line when any line is unusable: a report from part of a file would be wrong."""
    path = Path(path)
    runs, skipped = load_summaries(path)
    if skipped:
        more = f" (and {len(skipped) - 1} more unusable lines)" if len(skipped) > 1 else ""
        raise UnusableRun(f"{path}: {skipped[0].reason}{more}")
    sweeps = {r.path.relative_to(path).parts[:1] for r in runs}
    return runs, path.joinpath(*sweeps.pop()) if len(sweeps) == 1 else path


__all__ = ["METRIC_KEYS", "SCHEMA", "load_summaries", "metrics_rows", "metrics_table", "read_summaries", "summarize",
           "summary_lines", "write_summaries"]
