"""Sweep report: a results table (mean ± 95% CI over seeds) and diagnostic figures for a set of runs.

    gdro-report SWEEP_DIR [--out DIR] [--which final|best] [--include-incomplete] [--tail-levels 7-12]

Every directory under ``SWEEP_DIR`` holding both ``run.json`` and ``metrics.jsonl`` is a run. A run's method is
``"<sampler>+<allocator>"`` from the Hydra group choices in ``run.json`` (or, when those are absent, from the
``_target_`` class names of the resolved config); runs of one method are pooled over seeds.

Only *completed* runs are pooled: ``run.json`` ``"status"`` is ``"completed"``, its ``"last_step"`` is the
last step in ``metrics.jsonl``, that step is ``config["steps"]`` and every metrics line is a valid JSON
object. A run written before the trainer recorded a status counts as completed when its last logged step is
``config["steps"]``. Every other run dir is named with the reason on stderr and beneath the table in
``table.md``; nothing aborts the report. ``--include-incomplete`` pools the incomplete runs that load (their
malformed lines dropped), marked; dirs that cannot give a result (a corrupt ``run.json``, an empty
``metrics.jsonl``, or one holding two runs because a run dir was re-used: the step goes backwards) are always
left out.

Table: for each method, the final (or best) evaluation row's ``eval/...mean@k`` / ``eval/...pass@k`` metrics,
overall and per level (``eval/mean@k/level_L``) or per benchmark (``eval/<bench>/pass@k``), as mean ± the
Student-t 95% half-width over seeds, plus the relative pass@k gain of the method's mean over GRPO's mean
(``100 * (m - m_GRPO) / m_GRPO``). Written as ``table.md`` and ``table.csv``.

Paired table (``paired.md``, when GRPO and another method are present): per method, the difference to GRPO
of each headline metric paired by seed (mean ± 95% CI over the seeds both have), the rollouts each run spent, and
the batch's mean difficulty bin in the first and last quarter of the steps after the unseen phase. With
``--tail-levels 7-12`` the table gains ``eval/...@k/levels_7-12`` (the mean of those levels, the *hard tail*), and
the paired table the recovery of the oracle control's tail gain (a method's mean Δ ÷ the oracle's) and the first
evaluation step at which each run's tail mean@k reaches GRPO's final one (median over the runs that reach it).

Figures (each skipped when no run logs its keys): ``eval_curves.png``, ``bin_share_heatmap.png``,
``weights_heatmap.png``, ``rollouts_heatmap.png``, ``lead_lag.png``, ``wse.png``, ``mean_bin.png``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

DISPLAY_NAMES = {
    "uniform+fixed": "GRPO",
    "prompt-gdro+fixed": "Prompt-GDRO",
    "uniform+rollout-gdro": "Rollout-GDRO",
    "prompt-gdro+rollout-gdro": "Prompt+Rollout-GDRO",
    "uniform+sqrt": "Square-root",
    "oracle-levels+fixed": "Oracle: uniform over levels (control)",
}
METHOD_ORDER = list(DISPLAY_NAMES)
BASELINE = "uniform+fixed"

# eval/[<bench>/](mean|pass)@k[/<sub>]   e.g. eval/pass@8, eval/mean@8/level_3, eval/aime24/pass@16
METRIC_KEY = re.compile(r"^eval/(?:(?P<prefix>.+?)/)?(?P<kind>mean|pass)@(?P<k>\d+)(?:/(?P<sub>.+))?$")

# Two-sided 95% Student t quantiles t_{0.975, df}, df = 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_T975_LARGE = ((120, 1.980), (60, 2.000), (40, 2.021), (30, 2.042))


def t975(df: int) -> float:
    """t_{0.975, df}: exact table for df 1-30, the nearest smaller tabulated df up to 120 (conservative), 1.96 beyond."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df <= 30:
        return _T975[df - 1]
    if df > 120:
        return 1.96
    return next(t for d, t in _T975_LARGE if df >= d)


def mean_ci(values: list[float]) -> tuple[float, float, int]:
    """(mean, 95% CI half-width, n); the half-width is NaN when n < 2."""
    vals = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = len(vals)
    if n == 0:
        return math.nan, math.nan, 0
    m = float(vals.mean())
    if n == 1:
        return m, math.nan, 1
    return m, t975(n - 1) * float(vals.std(ddof=1)) / math.sqrt(n), n


def _natural(s: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", s) if p)


def bin_sort_key(label: str) -> tuple:
    """Numeric bin labels ascending, then non-numeric ones (e.g. ``unseen``) alphabetically."""
    try:
        return (0, float(label), "")
    except ValueError:
        return (1, 0.0, label)


def metric_sort_key(key: str) -> tuple:
    m = METRIC_KEY.match(key)
    if m is None:
        return (2, _natural(key))
    return (
        m["sub"] is not None,
        _natural(m["prefix"] or ""),
        _natural(m["sub"] or "") if m["sub"] else (),
        m["kind"] != "mean",
        int(m["k"]),
    )


def is_headline(key: str) -> bool:
    """An overall metric (``eval/pass@8`` or ``eval/<bench>/pass@8``), not a per-level breakdown."""
    m = METRIC_KEY.match(key)
    return m is not None and m["sub"] is None


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


def display_name(method: str) -> str:
    return DISPLAY_NAMES.get(method, method)


def _method_rank(method: str) -> tuple:
    return (METHOD_ORDER.index(method), "") if method in METHOD_ORDER else (len(METHOD_ORDER), method)


STATUSES = ("running", "completed", "interrupted", "failed")
_MAX_BAD_LINES = 5  # bad metrics lines named one by one in a reason


@dataclass
class Run:
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

    @property
    def name(self) -> str:
        return display_name(self.method)

    @property
    def complete(self) -> bool:
        return not self.problems

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.seed}"

    def eval_rows(self) -> list[dict]:
        return [r for r in self.rows if any(METRIC_KEY.match(k) for k in r)]

    def has(self, prefix: str) -> bool:
        return any(k.startswith(prefix) for r in self.rows for k in r)


class UnusableRun(ValueError):
    """A run dir whose files cannot give a result (corrupt run.json, empty metrics, two runs in one file)."""


@dataclass(frozen=True)
class Skipped:
    """A run dir left out of the report, and why."""

    path: Path
    reason: str


def _step(row: dict) -> float | None:
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
        step = _step(row)
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


def _read_meta(path: Path) -> dict:
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
    steps = [s for s in map(_step, rows) if s is not None]
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


def load_run(run_dir: Path) -> Run:
    """The run in ``run_dir``; :class:`UnusableRun` when its files cannot give a result at all.

    A run that loads but did not finish cleanly has ``problems`` (see :class:`Run`).
    """
    run_dir = Path(run_dir)
    meta = _read_meta(run_dir / "run.json")
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    rows, bad, last_line = read_metrics(run_dir / "metrics.jsonl")
    problems = []
    if bad:
        msg = "metrics.jsonl: " + _bad_lines(bad, last_line)
        if bad[-1][0] == last_line:
            msg += ": the last line is malformed, and the final evaluation may be that row"
        problems.append(msg)
    problems += _completion_problems(meta, config, rows)
    sampler = _component(meta, "sampler", "uniform", ("Sampler",))
    allocator = _component(meta, "allocator", "fixed", ("Allocator",))
    label = config.get("label")  # the run's own row name (label=...), else its sampler+allocator
    return Run(
        path=run_dir,
        method=label if isinstance(label, str) and label.strip() else f"{sampler}+{allocator}",
        seed=config.get("seed"),
        config=config,
        rows=rows,
        status=meta.get("status") if isinstance(meta.get("status"), str) else None,
        problems=problems,
    )


def scan_runs(sweep_dir: str | Path) -> tuple[list[Run], list[Skipped]]:
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
    runs.sort(key=lambda r: (_method_rank(r.method), str(r.seed), str(r.path)))
    return runs, skipped


def find_runs(sweep_dir: str | Path, *, include_incomplete: bool = False) -> list[Run]:
    """The completed runs at or under ``sweep_dir`` (plus the incomplete ones that load, if asked)."""
    runs, _ = scan_runs(sweep_dir)
    return [r for r in runs if include_incomplete or r.complete]


def _select_row(run: Run, which: str) -> dict | None:
    rows = run.eval_rows()
    if not rows:
        return None
    if which == "final":
        return rows[-1]
    if which == "best":
        head = sorted((k for k in rows[-1] if is_headline(k)), key=metric_sort_key)
        return max(rows, key=lambda r: r.get(head[0], -math.inf)) if head else rows[-1]
    raise ValueError(f"which must be 'final' or 'best', got {which!r}")


def aggregate(runs: list[Run], *, which: str = "final") -> list[dict]:
    """One row per method (GRPO first) over its runs' final (or best-mean@k) evaluation rows.

    Each row: ``method``, ``name``, ``n`` (runs with an eval row), ``seeds``, ``incomplete`` (how many of
    those runs are not completed runs: only when such runs are passed in), ``metrics`` ({key: (mean, ci, n)},
    ci NaN when n < 2, keys in display order) and ``gain`` ({headline pass@k key: % over GRPO's mean, or None}).
    """
    by_method: dict[str, list[dict]] = {}
    seeds: dict[str, list] = {}
    incomplete: dict[str, int] = {}
    for run in runs:
        row = _select_row(run, which)
        if row is None:
            continue
        by_method.setdefault(run.method, []).append(row)
        seeds.setdefault(run.method, []).append(run.seed)
        incomplete[run.method] = incomplete.get(run.method, 0) + (not run.complete)
    out = []
    for method in sorted(by_method, key=_method_rank):
        rows = by_method[method]
        keys = sorted(
            {k for r in rows for k, v in r.items() if METRIC_KEY.match(k) and isinstance(v, (int, float))},
            key=metric_sort_key,
        )
        metrics = {k: mean_ci([r[k] for r in rows if isinstance(r.get(k), (int, float))]) for k in keys}
        out.append({"method": method, "name": display_name(method), "n": len(rows), "seeds": seeds[method],
                    "incomplete": incomplete[method], "metrics": metrics, "gain": {}})
    base = next((r for r in out if r["method"] == BASELINE), None)
    for r in out:
        for key, (m, _, _) in r["metrics"].items():
            if not (is_headline(key) and METRIC_KEY.match(key)["kind"] == "pass"):
                continue
            g = base["metrics"].get(key, (math.nan,))[0] if base else math.nan
            r["gain"][key] = 100.0 * (m - g) / g if math.isfinite(g) and g != 0 and math.isfinite(m) else None
    return out


def _columns(rows: list[dict]) -> list[str]:
    return sorted({k for r in rows for k in r["metrics"]}, key=metric_sort_key)


def _label(key: str) -> str:
    return key.removeprefix("eval/")


def format_cell(mean: float, ci: float, n: int, digits: int = 1) -> str:
    if n == 0 or not math.isfinite(mean):
        return "–"
    if n == 1:
        return f"{mean:.{digits}f} (n=1)"
    return f"{mean:.{digits}f} ± {ci:.{digits}f}"


def format_gain(g: float | None) -> str:
    return "–" if g is None else f"{g:+.1f}%"


def to_markdown(rows: list[dict]) -> str:
    cols = _columns(rows)
    header = ["Method", "n"]
    for k in cols:
        header.append(_label(k))
        if k in {g for r in rows for g in r["gain"]}:
            header.append(f"Δ{_label(k)} vs GRPO")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    gain_keys = {g for r in rows for g in r["gain"]}
    for r in rows:
        cells = [r["name"], str(r["n"]) + (f" ({r['incomplete']} incomplete)" if r.get("incomplete") else "")]
        for k in cols:
            cells.append(format_cell(*r["metrics"].get(k, (math.nan, math.nan, 0))))
            if k in gain_keys:
                cells.append("–" if r["method"] == BASELINE else format_gain(r["gain"].get(k)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table(rows: list[dict], out_dir: str | Path, *, notes: str = "") -> tuple[Path, Path]:
    """Write ``table.md`` (the table, then ``notes``) and ``table.csv`` (``n_incomplete``, ``<metric>_mean``,
    ``_ci``, ``_n``, ``<pass key>_gain_pct``)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "table.md"
    md.write_text(to_markdown(rows) + (f"\n{notes}" if notes else ""), encoding="utf-8")
    cols = _columns(rows)
    gain_keys = sorted({g for r in rows for g in r["gain"]}, key=metric_sort_key)
    header = ["method", "name", "n_seeds", "seeds", "n_incomplete"]
    for k in cols:
        header += [f"{_label(k)}_mean", f"{_label(k)}_ci", f"{_label(k)}_n"]
    header += [f"{_label(k)}_gain_pct" for k in gain_keys]

    def num(x: float | None) -> str:
        return "" if x is None or not math.isfinite(x) else repr(float(x))

    path = out_dir / "table.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for r in rows:
            line = [r["method"], r["name"], r["n"], " ".join(str(s) for s in r["seeds"]),
                    r.get("incomplete", 0)]
            for k in cols:
                m, ci, n = r["metrics"].get(k, (math.nan, math.nan, 0))
                line += [num(m), num(ci), n]
            line += [num(r["gain"].get(k)) for k in gain_keys]
            w.writerow(line)
    return md, path


# ---------------------------------------------------------------- paired comparison against GRPO

ORACLE = "oracle-levels+fixed"


def parse_levels(spec: str) -> list[int]:
    """``"7-12"`` → [7, ..., 12]; ``"3,5,8"`` → [3, 5, 8]. Raises ValueError naming the spec otherwise."""
    try:
        levels: set[int] = set()
        for part in spec.split(","):
            lo, dash, hi = part.strip().partition("-")
            a, b = int(lo), int(hi) if dash else int(lo)
            if a < 1 or b < a:
                raise ValueError
            levels.update(range(a, b + 1))
    except ValueError:
        raise ValueError(f"levels must look like '7-12' or '3,5,8' (levels >= 1), got {spec!r}") from None
    return sorted(levels)


def tail_name(levels: list[int]) -> str:
    """The sub-metric name of a set of levels: ``levels_7-12`` (a range) or ``levels_3,5,8``."""
    if levels == list(range(levels[0], levels[-1] + 1)):
        return f"levels_{levels[0]}-{levels[-1]}"
    return "levels_" + ",".join(map(str, levels))


def add_tail_metrics(runs: list[Run], levels: list[int]) -> list[str]:
    """Add to every evaluation row, for each ``eval/[<bench>/](mean|pass)@k`` family that logs every level in
    ``levels``, the mean of those levels: ``eval/...@k/levels_7-12`` (levels weighted equally, as the held-out
    set holds the same number of problems per level). Returns the keys added (sorted); rows missing a level get
    none."""
    sub = tail_name(levels)
    added: set[str] = set()
    for run in runs:
        for row in run.eval_rows():
            heads = [k for k in row if (m := METRIC_KEY.match(k)) and m["sub"] is None]
            for head in heads:
                vals = [row.get(f"{head}/level_{lv}") for lv in levels]
                if all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
                    row[f"{head}/{sub}"] = float(np.mean(vals))
                    added.add(f"{head}/{sub}")
    return sorted(added, key=metric_sort_key)


def steps_to(run: Run, key: str, threshold: float) -> float | None:
    """The first evaluation step at which ``key`` reaches ``threshold`` (None: never)."""
    for row in run.eval_rows():
        v = row.get(key)
        if isinstance(v, (int, float)) and v >= threshold and _step(row) is not None:
            return _step(row)
    return None


def rollouts_spent(run: Run) -> float:
    """Rollouts generated over the run: the sum of ``rollout/n_total`` over its steps."""
    return float(sum(r["rollout/n_total"] for r in run.rows if isinstance(r.get("rollout/n_total"), (int, float))))


def mean_bin_drift(run: Run, key: str = "difficulty/batch_mean_bin",
                   unseen_key: str = "difficulty/batch/unseen") -> tuple[float, float] | None:
    """The batch's mean bin averaged over the first and the last quarter of the steps after the unseen phase
    (which ends at the first step whose batch holds no unseen prompt; at step 1 when that is not logged).
    None when the run does not log ``key`` or has fewer than 4 steps after that phase."""
    pts = [(r["step"], r[key], r.get(unseen_key, 0.0)) for r in run.rows
           if isinstance(r.get(key), (int, float)) and isinstance(r.get("step"), int)]
    start = next((s for s, _, u in pts if not u), None)
    if start is None:
        return None
    vals = [v for s, v, _ in pts if s >= start]
    q = len(vals) // 4
    if q == 0:
        return None
    return float(np.mean(vals[:q])), float(np.mean(vals[-q:]))


def paired_comparison(runs: list[Run], keys: list[str], *, tail_key: str | None = None,
                      which: str = "final") -> tuple[list[dict], dict]:
    """Each method against GRPO, paired by seed (a seed gives both the same pool, initial weights and test set).

    Per method: ``pairs`` (seeds that both have), ``delta`` ({key: (mean, ci, n)} of method − GRPO per seed),
    ``recovery`` (its mean Δ``tail_key`` ÷ the oracle control's, when both exist and the oracle's is > 0),
    ``steps`` (per run, the first evaluation step reaching the threshold, None = never), ``rollouts``
    ((mean, ci, n) of rollouts spent) and ``drift`` (per run (first, last) quarter's mean bin, or None).
    GRPO itself is a row with its own ``steps``, ``rollouts`` and ``drift`` and no ``delta``. The threshold
    (returned in the second value, with the key) is GRPO's final ``tail_key`` averaged over its runs."""
    groups = _groups(runs)
    base = {str(r.seed): r for r in groups.get(BASELINE, [])}
    info: dict = {"tail_key": tail_key, "threshold": None}
    if tail_key and base:
        finals = [(_select_row(r, which) or {}).get(tail_key) for r in base.values()]
        finals = [v for v in finals if isinstance(v, (int, float))]
        info["threshold"] = float(np.mean(finals)) if finals else None
    out = []
    for method in sorted(groups, key=_method_rank):
        rs = groups[method]
        row: dict = {"method": method, "name": display_name(method), "n": len(rs), "delta": {}, "pairs": 0}
        if method != BASELINE and base:
            paired = [(_select_row(r, which) or {}, _select_row(base[str(r.seed)], which) or {})
                      for r in rs if str(r.seed) in base]
            row["pairs"] = len(paired)
            for key in keys:
                diffs = [a[key] - z[key] for a, z in paired
                         if isinstance(a.get(key), (int, float)) and isinstance(z.get(key), (int, float))]
                row["delta"][key] = mean_ci(diffs)
        row["steps"] = ([steps_to(r, tail_key, info["threshold"]) for r in rs]
                        if tail_key and info["threshold"] is not None else [])
        row["rollouts"] = mean_ci([rollouts_spent(r) for r in rs])
        row["drift"] = [mean_bin_drift(r) for r in rs]
        out.append(row)
    oracle = next((r for r in out if r["method"] == ORACLE), None)
    gain = oracle["delta"].get(tail_key, (math.nan,))[0] if oracle and tail_key else math.nan
    for row in out:
        d = row["delta"].get(tail_key, (math.nan,))[0] if tail_key else math.nan
        row["recovery"] = d / gain if math.isfinite(gain) and gain > 0 and math.isfinite(d) else None
    return out, info


def _fmt_steps(steps: list[float | None]) -> str:
    reached = sorted(s for s in steps if s is not None)
    if not steps:
        return "–"
    if not reached:
        return f"never (0/{len(steps)})"
    return f"{float(np.median(reached)):.0f} ({len(reached)}/{len(steps)})"


def _fmt_drift(drift: list[tuple[float, float] | None]) -> str:
    d = [x for x in drift if x is not None]
    if not d:
        return "–"
    first, last = mean_ci([a for a, _ in d]), mean_ci([b for _, b in d])
    delta = mean_ci([b - a for a, b in d])
    moved = sum(b - a >= 1.0 for a, b in d)
    return f"{first[0]:.2f} → {last[0]:.2f} ({format_cell(*delta, digits=2)}; ≥ 1 bin in {moved}/{len(d)})"


def paired_markdown(rows: list[dict], keys: list[str], info: dict) -> str:
    """The paired table: Δ vs GRPO per key (mean ± 95% CI over seeds), recovery of the oracle's gain, steps to
    the threshold (median over the runs that reach it; reached/runs), rollouts spent, the batch's mean-bin
    drift (first → last quarter after the unseen phase)."""
    tail = info.get("tail_key")
    header = ["Method", "pairs"] + [f"Δ{_label(k)}" for k in keys]
    if tail:
        header.append(f"recovery of the oracle's Δ{_label(tail)}")
    if info.get("threshold") is not None:
        header.append(f"steps to {_label(tail)} ≥ {info['threshold']:.1f}")
    header += ["rollouts spent", "batch mean bin: first → last quarter (Δ)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for r in rows:
        base = r["method"] == BASELINE
        cells = [r["name"], "–" if base else str(r["pairs"])]
        cells += ["–" if base else format_cell(*r["delta"].get(k, (math.nan, math.nan, 0))) for k in keys]
        if tail:
            cells.append("–" if r["recovery"] is None or r["method"] == ORACLE else f"{r['recovery']:.2f}")
        if info.get("threshold") is not None:
            cells.append(_fmt_steps(r["steps"]))
        cells.append(format_cell(*r["rollouts"], digits=0))
        cells.append(_fmt_drift(r["drift"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- figures


def _series(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(r["step"], r[key]) for r in run.rows if isinstance(r.get(key), (int, float)) and "step" in r]
    if not pts:
        return np.empty(0), np.empty(0)
    s, v = zip(*pts)
    return np.asarray(s, dtype=float), np.asarray(v, dtype=float)


def _over_seeds(runs: list[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, mean over runs and s.d. over runs (0 where only one run has the step)."""
    by_step: dict[float, list[float]] = {}
    for run in runs:
        for s, v in zip(*_series(run, key)):
            by_step.setdefault(s, []).append(v)
    steps = np.asarray(sorted(by_step))
    mean = np.asarray([np.mean(by_step[s]) for s in steps])
    sd = np.asarray([np.std(by_step[s], ddof=1) if len(by_step[s]) > 1 else 0.0 for s in steps])
    return steps, mean, sd


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or len(y) < window:
        return y
    kernel = np.ones(window) / window
    pad = np.pad(y, (window // 2, window - 1 - window // 2), mode="edge")
    return np.convolve(pad, kernel, mode="valid")


def _groups(runs: list[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(r.method, []).append(r)
    return out


def _colors(methods: list[str]) -> dict[str, Any]:
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    return {m: cmap(i % 10) for i, m in enumerate(methods)}


def _headline_key(runs: list[Run], kind: str) -> str | None:
    keys = sorted(
        {k for r in runs for row in r.eval_rows() for k in row
         if is_headline(k) and METRIC_KEY.match(k)["kind"] == kind},
        key=metric_sort_key,
    )
    return keys[0] if keys else None



def _style_line_axes(ax, ylabel: str, title: str) -> None:
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _save(fig, path) -> bool:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True

def _fig_eval_curves(runs, groups, colors, path) -> bool:
    import matplotlib.pyplot as plt

    keys = [k for k in (_headline_key(runs, "mean"), _headline_key(runs, "pass")) if k]
    if not keys:
        return False
    fig, axes = plt.subplots(1, len(keys), figsize=(6 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for method, rs in groups.items():
            steps, mean, sd = _over_seeds(rs, key)
            if len(steps) == 0:
                continue
            ax.plot(steps, mean, marker="o", ms=3, color=colors[method], label=f"{display_name(method)} (n={len(rs)})")
            ax.fill_between(steps, mean - sd, mean + sd, color=colors[method], alpha=0.2, lw=0)
        _style_line_axes(ax, f"{_label(key)} (%)", f"{_label(key)}: mean over seeds ± 1 s.d.")
    return _save(fig, path)


def _fig_heatmap(runs, groups, kind: str, title: str, path) -> bool:
    """One heatmap (bin × step) per method, its first seed, of the keys ``gdro/<kind>/<bin>`` (or of ``kind``
    itself when it is a key prefix ending in "/")."""
    import matplotlib.pyplot as plt

    prefix = kind if kind.endswith("/") else f"gdro/{kind}/"
    # the first seed (that logs the keys) of each method
    firsts = [next(r for r in rs if r.has(prefix)) for rs in groups.values() if any(r.has(prefix) for r in rs)]
    if not firsts:
        return False
    fig, axes = plt.subplots(len(firsts), 1, figsize=(10, 0.4 + 2.6 * len(firsts)), squeeze=False)
    for ax, run in zip(axes[:, 0], firsts):
        bins = sorted({k[len(prefix):] for r in run.rows for k in r if k.startswith(prefix)}, key=bin_sort_key)
        train = [r for r in run.rows if any(k.startswith(prefix) for k in r) and "step" in r]
        steps = [r["step"] for r in train]
        mat = np.full((len(bins), len(train)), np.nan)
        for j, r in enumerate(train):
            for i, b in enumerate(bins):
                v = r.get(prefix + b)
                if isinstance(v, (int, float)):
                    mat[i, j] = v
        extent = (steps[0] - 0.5, steps[-1] + 0.5, len(bins) - 0.5, -0.5)
        im = ax.imshow(np.ma.masked_invalid(mat), aspect="auto", interpolation="nearest", cmap="viridis", extent=extent)
        ax.set_yticks(range(len(bins)))
        ax.set_yticklabels(bins, fontsize=8)
        ax.set_ylabel("bin")
        ax.set_title(f"{display_name(run.method)} (seed {run.seed}, {run.path.parent.name}/{run.path.name}): {title}", fontsize=10)
        fig.colorbar(im, ax=ax, pad=0.01)
    axes[-1, 0].set_xlabel("step")
    return _save(fig, path)


def _fig_lines(groups, colors, keys: list[tuple[str, str]], ylabel: str, title: str, path) -> bool:
    """Per method: mean over seeds of each (key, linestyle), faint raw and a moving average."""
    import matplotlib.pyplot as plt

    if not any(r.has(k) for rs in groups.values() for r in rs for k, _ in keys):
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    for method, rs in groups.items():
        for key, style in keys:
            have = [r for r in rs if r.has(key)]
            if not have:
                continue
            steps, mean, _ = _over_seeds(have, key)
            ax.plot(steps, mean, color=colors[method], ls=style, alpha=0.2, lw=0.8)
            ax.plot(steps, _smooth(mean, max(1, len(steps) // 15)), color=colors[method], ls=style, lw=1.6,
                    label=f"{display_name(method)} {key.split('/')[-1]} (n={len(have)})")
    _style_line_axes(ax, ylabel, title)
    return _save(fig, path)


def make_figures(runs: list[Run], out_dir: str | Path) -> list[Path]:
    """Write the figures whose keys some run logs; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = _groups(sorted(runs, key=lambda r: (_method_rank(r.method), str(r.seed), str(r.path))))
    colors = _colors(list(groups))
    made = []
    jobs = [
        ("eval_curves.png", lambda p: _fig_eval_curves(runs, groups, colors, p)),
        # every sampler's batch (logged by the classifier); runs from before that key: Prompt-GDRO's own
        ("bin_share_heatmap.png", lambda p: _fig_heatmap(
            runs, groups, "difficulty/batch/" if any(r.has("difficulty/batch/") for r in runs) else "share",
            "share of the batch per difficulty bin", p)),
        ("mean_bin.png", lambda p: _fig_lines(groups, colors, [("difficulty/batch_mean_bin", "-")],
                                              "mean bin of the batch (0 = hardest)",
                                              "difficulty/batch_mean_bin: the batch's mean pass-rate bin", p)),
        ("weights_heatmap.png", lambda p: _fig_heatmap(runs, groups, "weight", "GDRO weight", p)),
        ("rollouts_heatmap.png", lambda p: _fig_heatmap(runs, groups, "rollouts", "rollouts per prompt", p)),
        ("lead_lag.png", lambda p: _fig_lines(groups, colors, [("gdro/lead_lag", "-")], "lead-lag",
                                              "gdro/lead_lag (mean over seeds; bold = moving average)", p)),
        ("wse.png", lambda p: _fig_lines(groups, colors, [("gdro/wse", "-"), ("gdro/wse_uniform", "--")], "WSE",
                                         "gdro/wse (solid) vs gdro/wse_uniform (dashed)", p)),
    ]
    for name, job in jobs:
        if job(out_dir / name):
            made.append(out_dir / name)
    return made


# ---------------------------------------------------------------- CLI


def _rel(path: Path, root: Path) -> str:
    try:
        rel = str(Path(path).relative_to(root))
    except ValueError:
        return str(path)
    return str(path) if rel == "." else rel


def exclusion_notes(runs: list[Run], skipped: list[Skipped], root: str | Path, *,
                    include_incomplete: bool) -> tuple[str, list[str]]:
    """Markdown sections naming every run dir not pooled as a completed run, with the reason, and the same as
    one line per run dir (for stderr). Both empty when every run completed and has an evaluation row."""
    root = Path(root)
    left, included = [], []
    for run in runs:
        if not run.complete:
            (included if include_incomplete else left).append(f"`{_rel(run.path, root)}`: {run.label}: "
                                                              + "; ".join(run.problems))
    for sk in skipped:
        left.append(f"`{_rel(sk.path, root)}`: {sk.reason}")
    for run in runs:
        if (run.complete or include_incomplete) and not run.eval_rows():
            left.append(f"`{_rel(run.path, root)}`: {run.label}: no evaluation row in metrics.jsonl")
    sections, lines = [], []
    if left:
        hint = "" if include_incomplete else " (`--include-incomplete` adds the incomplete runs that load)"
        sections.append(f"## Runs left out of the table\n\nOnly completed runs are pooled{hint}.\n\n"
                        + "".join(f"- {x}\n" for x in left))
        lines += [f"left out: {x}" for x in left]
    if included:
        sections.append("## Incomplete runs in the table (`--include-incomplete`)\n\n"
                        + "".join(f"- {x}\n" for x in included))
        lines += [f"included although incomplete: {x}" for x in included]
    return "\n".join(sections), lines


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (its own print the usage block first)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    """Console script ``gdro-report``: a usage error is one line (status 2), an unwritable ``--out`` or a full disk
    one line naming the path (status 74); ``HYDRA_FULL_ERROR=1`` shows the traceback, as in gdro-train."""
    from gdro.ioerrors import is_environment_error, one_line

    try:
        return _main(argv)
    except OSError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or not is_environment_error(err):
            raise
        print(f"gdro-report: {one_line(err)}", file=sys.stderr)
        return 74


def _parser() -> _Parser:
    ap = _Parser(prog="gdro-report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="output dir (default: SWEEP_DIR/report)")
    ap.add_argument("--which", choices=("final", "best"), default="final",
                    help="eval row per run: the last one, or the one with the best overall mean@k")
    ap.add_argument("--include-incomplete", action="store_true",
                    help="also pool runs that did not complete (interrupted, failed, running, short or with "
                         "malformed metrics lines), marked in the table; unreadable runs are still left out")
    ap.add_argument("--tail-levels", default=None, metavar="LEVELS",
                    help="the hard tail, e.g. 7-12: adds eval/...@k/levels_7-12 (the mean of those levels) to the "
                         "table, and to paired.md the oracle-gain recovery and steps to GRPO's final tail mean@k")
    return ap


def _main(argv: list[str] | None) -> int:
    from gdro.ioerrors import check_creatable

    ap = _parser()
    args = ap.parse_args(argv)
    try:
        tail_levels = parse_levels(args.tail_levels) if args.tail_levels else None
    except ValueError as e:
        ap.error(f"--tail-levels: {e}")
    out = args.out or args.sweep_dir / "report"
    if args.out is not None:  # before the scan lists what it leaves out: a bad --out is the only line
        if out.exists() and not out.is_dir():
            ap.error(f"--out {out}: is a file; the report goes into a directory")
        check_creatable(out)
    found, skipped = scan_runs(args.sweep_dir)
    runs = [r for r in found if r.complete or args.include_incomplete]
    notes, lines = exclusion_notes(found, skipped, args.sweep_dir, include_incomplete=args.include_incomplete)
    for line in lines:
        print(f"gdro-report: {line}", file=sys.stderr)
    if not runs:
        what = "runs" if args.include_incomplete else "completed runs"
        print(f"gdro-report: no {what} (dirs with run.json + metrics.jsonl) found under {args.sweep_dir}"
              + (f"; {len(lines)} left out (above)" if lines else ""), file=sys.stderr)
        return 2
    for method, rs in _groups(runs).items():
        seeds = [r.seed for r in rs]
        if len(set(map(str, seeds))) < len(seeds):
            print(f"gdro-report: warning: {display_name(method)} has repeated seeds {seeds}; "
                  "its runs are pooled as independent samples", file=sys.stderr)
    tail_keys = add_tail_metrics(runs, tail_levels) if tail_levels else []
    if tail_levels and not tail_keys:
        print(f"gdro-report: --tail-levels {args.tail_levels}: no run logs eval/...@k/level_L for every one of "
              f"levels {tail_levels}; no tail metric", file=sys.stderr)
    rows = aggregate(runs, which=args.which)
    md, csv_path = write_table(rows, out, notes=notes)
    figs = make_figures(runs, out)
    paired_md = None
    if any(r.method == BASELINE for r in runs) and len(_groups(runs)) > 1:
        heads = sorted({k for r in rows for k in r["metrics"] if is_headline(k)}, key=metric_sort_key)
        keys = heads + tail_keys
        mean_tail = next((k for k in tail_keys if METRIC_KEY.match(k)["kind"] == "mean"), None)
        prows, info = paired_comparison(runs, keys, tail_key=mean_tail, which=args.which)
        paired_md = out / "paired.md"
        text = paired_markdown(prows, keys, info)
        paired_md.write_text(
            f"Each method minus GRPO, paired by seed ({args.which} evaluation row); mean ± 95% CI (Student t).\n\n"
            + text, encoding="utf-8")
    n_left = sum(line.startswith("left out") for line in lines)
    print(f"{len(runs)} runs, {len(rows)} methods ({args.which} eval row)"
          + (f"; {n_left} run dirs left out (listed above and in {md.name})" if n_left else "") + "\n")
    print(to_markdown(rows))
    if paired_md is not None:
        print(f"paired against GRPO:\n\n{text}")
    print(f"wrote {md}, {csv_path}" + (f", {paired_md.name}" if paired_md else "")
          + "".join(f", {p.name}" for p in figs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
