"""Sweep report, the runs: reading run dirs (run.json, metrics.jsonl), the method a run dir names, which runs are
complete, a run's evaluation row, and the runs per method (the runs left out of a report: gdro/report/exclusions.py)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gdro.report.names import METRIC_KEY, display_name, is_headline, method_rank, metric_sort_key


def _kebab(class_name: str, suffixes: tuple[str, ...]) -> str:
    for suf in suffixes:
        if class_name.endswith(suf) and class_name != suf:
            class_name = class_name[: -len(suf)]
            break
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", class_name).lower()



def _component(run_json: dict, group: str, default: str, suffixes: tuple[str, ...]) -> str:
    choices, config = run_json.get("choices"), run_json.get("config")
    choice = choices.get(group) if isinstance(choices, dict) else None
    if choice:
        return str(choice)
    node = config.get(group) if isinstance(config, dict) else None
    target = node.get("_target_") if isinstance(node, dict) else None
    if target:
        return _kebab(str(target).rsplit(".", 1)[-1], suffixes)
    return default



STATUSES = ("running", "completed", "interrupted", "failed")



_MAX_BAD_LINES = 5  # bad metrics lines named one by one in a reason



@dataclass
class SweepRun:
    """One run dir: its method, seed, config and metrics rows (malformed lines dropped).

    ``problems`` says why the run is not a *completed* run (empty when it is): a ``status`` other than
    ``"completed"``, a last logged step short of ``config["steps"]``, or malformed ``metrics.jsonl`` lines.
    """

    path: Path
    method: str
    seed: Any
    config: dict = field(repr=False)
    rows: list[dict] = field(repr=False)
    status: str | None = None  # run.json "status"; None for a run written before the trainer recorded it
    problems: list[str] = field(default_factory=list)
    # gdro-eval's record (its "k" and "metrics") when the run comes from a run summary (gdro/report/summary.py);
    # None: gdro.report.table1 reads it from the run dir
    evaluation: dict | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return display_name(self.method)

    @property
    def complete(self) -> bool:
        return not self.problems

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.seed}"

    # eval_rows' answer, for the rows list it was computed from at its length (the report asks it thousands of times
    # per run, and a training row holds ~270 keys); replacing or extending ``rows`` recomputes it
    _eval: tuple[list[dict], int, list[dict]] | None = field(default=None, init=False, repr=False, compare=False)

    def eval_rows(self) -> list[dict]:
        """The rows that log a held-out ``eval/...(mean|pass)@k`` metric, in order."""
        if self._eval is None or self._eval[0] is not self.rows or self._eval[1] != len(self.rows):
            self._eval = (self.rows, len(self.rows), [r for r in self.rows if any(METRIC_KEY.match(k) for k in r)])
        return list(self._eval[2])

    def has(self, prefix: str) -> bool:
        return any(k.startswith(prefix) for r in self.rows for k in r)

    def first_epoch(self) -> int | None:
        """The steps one pass over the training pool takes at the run's batch size, ceil(train_size /
        prompts_per_step) (None when the config does not say: a run from a dataset file)."""
        size = (self.config.get("data") or {}).get("train_size") if isinstance(self.config, dict) else None
        per_step = self.config.get("prompts_per_step") if isinstance(self.config, dict) else None
        if isinstance(size, int) and isinstance(per_step, int) and size > 0 and per_step > 0:
            return -(-size // per_step)
        return None

    def after_first_pass(self, key: str) -> list[dict]:
        """The training rows logging ``key`` after the unseen phase: the steps after the first epoch
        (:meth:`first_epoch`; the same steps for every row of a sweep, whatever its sampler), or, when the config
        does not give the pool size, from the first step whose batch holds no never-seen prompt."""
        rows = [r for r in self.rows if isinstance(r.get("step"), int) and isinstance(r.get(key), (int, float))]
        epoch = self.first_epoch()
        if epoch is not None:
            return [r for r in rows if r["step"] > epoch]
        start = next((i for i, r in enumerate(rows) if not r.get("difficulty/batch/unseen", 0.0)), None)
        return rows[start:] if start is not None else []



class UnusableRun(ValueError):
    """A run dir whose files cannot give a result (corrupt run.json, empty metrics, two runs in one file)."""



@dataclass(frozen=True)
class Skipped:
    """A run dir left out of the report, and why."""

    path: Path
    reason: str



def row_step(row: dict) -> float | None:
    """A metrics row's ``step`` as a float (None when it has no numeric step)."""
    s = row.get("step")
    return float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else None



def _fmt_step(s: Any) -> str:
    return str(int(s)) if isinstance(s, float) and s.is_integer() else str(s)



def read_metrics(path: Path) -> tuple[list[dict], list[tuple[int, str]], int]:
    """The JSON-object rows of a ``metrics.jsonl``, its malformed lines as (1-based line number, what is
    wrong) and the number of its last non-blank line.

    Raises :class:`UnusableRun` when the file is unreadable or empty, has no valid row, or holds more than one
    run (the step goes backwards: a second run appended to a re-used run dir).
    """
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UnusableRun(f"{path.name} is unreadable ({err.strerror or err})") from err
    rows: list[dict] = []
    bad: list[tuple[int, str]] = []
    prev: tuple[float, int] | None = None
    last_line = 0
    for lineno, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        last_line = lineno
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            bad.append((lineno, "is not valid UTF-8"))
            continue
        except json.JSONDecodeError:
            bad.append((lineno, "is not valid JSON (truncated?)"))
            continue
        if not isinstance(row, dict):
            bad.append((lineno, "is not a JSON object"))
            continue
        step = row_step(row)
        if step is not None:
            if prev is not None and step < prev[0]:
                raise UnusableRun(
                    f"{path.name} holds more than one run: the step goes back from {_fmt_step(prev[0])} "
                    f"(line {prev[1]}) to {_fmt_step(step)} (line {lineno}), so a second run was appended "
                    "to a re-used run dir; its rows are not pooled"
                )
            prev = (step, lineno)
        rows.append(row)
    if not rows:
        raise UnusableRun(f"{path.name} is empty" if not bad else f"{path.name} has no valid row "
                          f"({len(bad)} lines malformed: {_bad_lines(bad, None)})")
    return rows, bad, last_line



def _bad_lines(bad: list[tuple[int, str]], last_line: int | None) -> str:
    """``"line 17 is not valid JSON (truncated?); line 20 (the last) ..."`` for the first few bad lines."""
    parts = [f"line {n}{' (the last)' if n == last_line else ''} {what}" for n, what in bad[:_MAX_BAD_LINES]]
    if len(bad) > _MAX_BAD_LINES:
        parts.append(f"and {len(bad) - _MAX_BAD_LINES} more")
    return "; ".join(parts)



def read_run_json(path: Path) -> dict:
    """A run dir's ``run.json``, the JSON object; :class:`UnusableRun` saying why when it cannot be read as one."""
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as err:
        raise UnusableRun(f"run.json is unreadable ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        where = f"{err.reason} at byte {err.start}"
        raise UnusableRun(f"corrupt run.json: {path}: not valid UTF-8 ({where})") from err
    except json.JSONDecodeError as err:
        raise UnusableRun(f"corrupt run.json: {path}: {err}") from err
    if not isinstance(meta, dict):
        raise UnusableRun(f"corrupt run.json: {path}: not a JSON object")
    return meta



def _completion_problems(meta: dict, config: dict, rows: list[dict]) -> list[str]:
    """Why the run did not finish (empty when it did): the status, and the steps logged against the target."""
    target = config.get("steps")
    target = target if isinstance(target, int) and not isinstance(target, bool) else None
    steps = [s for s in map(row_step, rows) if s is not None]
    logged = _fmt_step(steps[-1]) if steps else None
    of = f" of {target}" if target is not None else " of ? (run.json has no config.steps)"
    if "status" not in meta:  # written before the trainer recorded its status: judge by the steps alone
        if target is not None and steps and steps[-1] == target:
            return []
        return [f"no status; last step {logged}{of}"]
    status, last = meta["status"], meta.get("last_step")
    if status not in STATUSES:
        return [f"unknown status {status!r} (expected one of {', '.join(STATUSES)})"]
    if status != "completed":
        by = f" ({meta['interrupted_by']})" if status == "interrupted" and meta.get("interrupted_by") else ""
        also = f" (run.json last_step {last!r})" if last != (steps[-1] if steps else None) else ""
        error = str(meta.get("error") or "").strip().splitlines()
        return [f"status {status}{by} at step {logged}{of}{also}" + (f": {error[0]}" if error else "")]
    reached = target is not None and steps and steps[-1] == target
    consistent = isinstance(last, (int, float)) and not isinstance(last, bool) and steps and last == steps[-1]
    if reached and consistent:
        return []
    return [f"status completed (last_step {last!r}) but metrics.jsonl ends at step {logged}{of}"]



def read_overrides(run_dir: Path) -> list | None:
    """The command line's overrides that Hydra recorded (``.hydra/overrides.yaml``), None without them."""
    try:
        overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return overrides if isinstance(overrides, list) else None



SETTING_GROUPS = ("sampler", "allocator", "skip", "filter")  # the groups whose keys make a row what it is


def method_of(meta: dict, config: dict, overrides: list | None) -> str:
    """A run's row key: its own ``label=`` (set on the command line or by ``method=``), else its
    sampler+allocator(+filter)(+skip). The keys of those groups set on the command line (``allocator.consumption=
    realized`` say: settings beyond the options' or the method's defaults) are part of the key unless ``label=`` was
    given there, ``uniform+rollout-gdro [allocator.consumption=realized]``, so that such a run is a row of its own and
    its name says what it ran."""
    label = config.get("label")
    if isinstance(label, str) and label.strip():
        key = label
    else:
        sampler = _component(meta, "sampler", "uniform", ("Sampler",))
        allocator = _component(meta, "allocator", "fixed", ("Allocator",))
        extra = [c for g, suf in (("filter", ("Filter",)), ("skip", ("Skip",)))
                 if (c := _component(meta, g, "none", suf)) not in ("none", "no")]  # non-default options only
        key = "+".join([sampler, allocator, *extra])
    given = [str(o) for o in overrides or []]
    if any(o.lstrip("+~").startswith("label=") for o in given):
        return key
    keys = [(o.lstrip("+"), o.lstrip("+").split("=", 1)[0]) for o in given if "=" in o]
    settings = [o for o, key in keys if "." in key and key.split(".", 1)[0] in SETTING_GROUPS]
    return f"{key} [{', '.join(settings)}]" if settings else key



def load_run(run_dir: Path) -> SweepRun:
    """The run in ``run_dir``; :class:`UnusableRun` when its files cannot give a result at all.

    A run that loads but did not finish cleanly has ``problems`` (see :class:`SweepRun`).
    """
    run_dir = Path(run_dir)
    meta = read_run_json(run_dir / "run.json")
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    rows, bad, last_line = read_metrics(run_dir / "metrics.jsonl")
    problems = []
    if bad:
        msg = "metrics.jsonl: " + _bad_lines(bad, last_line)
        if bad[-1][0] == last_line:
            msg += ": the last line is malformed, and the final evaluation may be that row"
        problems.append(msg)
    problems += _completion_problems(meta, config, rows)
    return SweepRun(
        path=run_dir,
        method=method_of(meta, config, read_overrides(run_dir)),
        seed=config.get("seed"),
        config=config,
        rows=rows,
        status=meta.get("status") if isinstance(meta.get("status"), str) else None,
        problems=problems,
    )



def scan_runs(sweep_dir: str | Path) -> tuple[list[SweepRun], list[Skipped]]:
    """Every run dir (``run.json`` + ``metrics.jsonl``) at or under ``sweep_dir``: the runs that load
    (complete or not; method order, then seed) and the dirs that cannot give a result, with the reason."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        return [], []
    dirs = sorted({p.parent for p in sweep_dir.rglob("metrics.jsonl") if (p.parent / "run.json").is_file()})
    runs, skipped = [], []
    for d in dirs:
        try:
            runs.append(load_run(d))
        except UnusableRun as err:
            skipped.append(Skipped(d, str(err)))
    runs.sort(key=lambda r: (method_rank(r.method), str(r.seed), str(r.path)))
    return runs, skipped



def find_runs(sweep_dir: str | Path, *, include_incomplete: bool = False) -> list[SweepRun]:
    """The completed runs at or under ``sweep_dir`` (plus the incomplete ones that load, if asked)."""
    runs, _ = scan_runs(sweep_dir)
    return [r for r in runs if include_incomplete or r.complete]



def select_row(run: SweepRun, which: str) -> dict | None:
    """The run's ``which`` evaluation row: the last one (``"final"``) or the one with the best first headline metric
    (``"best"``); None without an evaluation row."""
    rows = run.eval_rows()
    if not rows:
        return None
    if which == "final":
        return rows[-1]
    if which == "best":
        head = sorted((k for k in rows[-1] if is_headline(k)), key=metric_sort_key)
        return max(rows, key=lambda r: r.get(head[0], -math.inf)) if head else rows[-1]
    raise ValueError(f"which must be 'final' or 'best', got {which!r}")



def group_by_method(runs: list[SweepRun]) -> dict[str, list[SweepRun]]:
    """The runs per method, methods and runs in the order given."""
    out: dict[str, list[SweepRun]] = {}
    for r in runs:
        out.setdefault(r.method, []).append(r)
    return out


def ordered_groups(runs: list[SweepRun]) -> dict[str, list[SweepRun]]:
    """The runs per method, methods in the report's order and each method's runs by seed (stable colours and
    legends across figures)."""
    return group_by_method(sorted(runs, key=lambda r: (method_rank(r.method), str(r.seed), str(r.path))))
