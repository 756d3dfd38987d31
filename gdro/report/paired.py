"""Sweep report, the paired table: each method against GRPO paired by seed, the hard tail, steps to a level,
rollouts spent and the drift of the batch's mean bin (paired.md)."""

from __future__ import annotations

import math

import numpy as np

from gdro.report.names import BASELINE, METRIC_KEY, display_name, method_rank, metric_label, metric_sort_key
from gdro.report.runs import SweepRun, group_by_method, row_step, select_row
from gdro.report.stats import holm, mean_ci
from gdro.report.table import format_cell, format_holm, holm_note
from gdro.report.terms import reach_cell, reach_note

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



def add_tail_metrics(runs: list[SweepRun], levels: list[int]) -> list[str]:
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



def steps_to(run: SweepRun, key: str, threshold: float) -> float | None:
    """The first evaluation step at which ``key`` reaches ``threshold`` (None: never)."""
    for row in run.eval_rows():
        v = row.get(key)
        if isinstance(v, (int, float)) and v >= threshold and row_step(row) is not None:
            return row_step(row)
    return None



def rollouts_spent(run: SweepRun) -> float:
    """Rollouts generated over the run: the sum of ``rollout/n_total`` over its steps."""
    return float(sum(r["rollout/n_total"] for r in run.rows if isinstance(r.get("rollout/n_total"), (int, float))))



def first_last_quarter(values: list[float]) -> tuple[float, float] | None:
    """The mean of the first and of the last quarter of ``values`` (None for fewer than 4)."""
    q = len(values) // 4
    return (float(np.mean(values[:q])), float(np.mean(values[-q:]))) if q else None



def mean_bin_drift(run: SweepRun, key: str = "difficulty/batch_mean_bin") -> tuple[float, float] | None:
    """The batch's mean bin averaged over the first and the last quarter of the steps after the unseen phase
    (:meth:`SweepRun.after_first_pass`: the steps after the first pass over the pool, the same for every row).
    None when the run does not log ``key`` or has fewer than 4 steps after that phase."""
    return first_last_quarter([r[key] for r in run.after_first_pass(key)])



def learned(run: SweepRun, key: str, which: str = "final") -> float | None:
    """What the run learned on ``key``: its ``which`` evaluation row minus its first one (step 0 when the run
    evaluates at the start); None without two evaluation rows that log it."""
    rows = run.eval_rows()
    end = select_row(run, which)
    if len(rows) < 2 or end is None or not all(isinstance(r.get(key), (int, float)) for r in (rows[0], end)):
        return None
    return float(end[key] - rows[0][key])



def paired_comparison(runs: list[SweepRun], keys: list[str], *, tail_key: str | None = None,
                      which: str = "final") -> tuple[list[dict], dict]:
    """Each method against GRPO, paired by seed (a seed gives both the same pool, initial weights and test set).

    Per method: ``gain`` ((mean, ci, n) over its runs of what each learned on ``keys[0]``: :func:`learned`),
    ``pairs`` (seeds that both have), ``delta`` ({key: (mean, ci, n)} of method − GRPO per seed, the plain 95%
    interval), ``diffs`` ({key: those differences}), ``holm`` ({key: :class:`gdro.report.stats.HolmCell`}: the
    paired t-test Holm-adjusted over the non-GRPO rows of the key's column, with its Holm-consistent interval),
    ``recovery`` (its mean Δ``tail_key`` ÷ the oracle control's, when both exist and the oracle's is > 0),
    ``steps`` (per run, the first evaluation step reaching the threshold, None = never), ``rollouts``
    ((mean, ci, n) of rollouts spent) and ``drift`` (per run (first, last) quarter's mean bin, or None).
    GRPO itself is a row with its own ``steps``, ``rollouts`` and ``drift`` and no ``delta``. The threshold
    (returned in the second value, with the key) is GRPO's final ``tail_key`` averaged over its runs."""
    groups = group_by_method(runs)
    base = {str(r.seed): r for r in groups.get(BASELINE, [])}
    info: dict = {"tail_key": tail_key, "threshold": None}
    if tail_key and base:
        finals = [(select_row(r, which) or {}).get(tail_key) for r in base.values()]
        finals = [v for v in finals if isinstance(v, (int, float))]
        info["threshold"] = float(np.mean(finals)) if finals else None
    out = []
    for method in sorted(groups, key=method_rank):
        rs = groups[method]
        row: dict = {"method": method, "name": display_name(method), "n": len(rs), "delta": {}, "diffs": {},
                     "holm": {}, "pairs": 0}
        if method != BASELINE and base:
            paired = [(select_row(r, which) or {}, select_row(base[str(r.seed)], which) or {})
                      for r in rs if str(r.seed) in base]
            row["pairs"] = len(paired)
            for key in keys:
                diffs = [a[key] - z[key] for a, z in paired
                         if isinstance(a.get(key), (int, float)) and isinstance(z.get(key), (int, float))]
                row["delta"][key], row["diffs"][key] = mean_ci(diffs), diffs
        row["steps"] = ([steps_to(r, tail_key, info["threshold"]) for r in rs]
                        if tail_key and info["threshold"] is not None else [])
        row["rollouts"] = mean_ci([rollouts_spent(r) for r in rs])
        row["gain"] = mean_ci([g for g in (learned(r, keys[0], which) for r in rs) if g is not None]) if keys else None
        row["drift"] = [mean_bin_drift(r) for r in rs]
        out.append(row)
    others = [r for r in out if r["method"] != BASELINE] if base else []
    for key in keys:  # the family: the rows of the key's column
        for r, cell in zip(others, holm([r["diffs"][key] for r in others])):
            r["holm"][key] = cell
    oracle = next((r for r in out if r["method"] == ORACLE), None)
    gain = oracle["delta"].get(tail_key, (math.nan,))[0] if oracle and tail_key else math.nan
    for row in out:
        d = row["delta"].get(tail_key, (math.nan,))[0] if tail_key else math.nan
        row["recovery"] = d / gain if math.isfinite(gain) and gain > 0 and math.isfinite(d) else None
    return out, info



def format_steps(steps: list[float | None]) -> str:
    """Median step to the threshold over the runs that reach it (reached/runs; "at start": gdro/report/terms.py)."""
    return reach_cell(steps, lambda x: f"{x:.0f}", np.median)



def _fmt_drift(drift: list[tuple[float, float] | None]) -> str:
    d = [x for x in drift if x is not None]
    if not d:
        return "–"
    first, last = mean_ci([a for a, _ in d]), mean_ci([b for _, b in d])
    delta = mean_ci([b - a for a, b in d])
    moved = sum(b - a >= 1.0 for a, b in d)
    return f"{first[0]:.2f} → {last[0]:.2f} ({format_cell(*delta, digits=2)}; ≥ 1 bin in {moved}/{len(d)})"



def paired_markdown(rows: list[dict], keys: list[str], info: dict) -> str:
    """The paired table, after a line on its Holm adjustment: Δ vs GRPO per key (mean ± the Holm-consistent CI over
    seeds, and the Holm-adjusted p; :func:`gdro.report.stats.holm`), recovery of the oracle's gain, steps to the
    threshold (median over the runs that reach it; reached/runs; "at start" for a run whose step-0 evaluation
    reaches it, a sentence under the table says so), rollouts spent, the batch's mean-bin drift (first → last quarter
    after the unseen phase)."""
    tail = info.get("tail_key")
    header = ["Method", "pairs"] + ([f"{metric_label(keys[0])} learned (from step 0)"] if keys else [])
    header += [f"Δ{metric_label(k)}" for k in keys]
    if tail:
        header.append(f"recovery of the oracle's Δ{metric_label(tail)}")
    if info.get("threshold") is not None:
        header.append(f"steps to {metric_label(tail)} ≥ {info['threshold']:.1f}")
    header += ["rollouts spent", "batch mean bin: first → last quarter (Δ)"]
    sizes = [sum(math.isfinite(r["holm"][k].p_holm) for r in rows if k in r["holm"]) for k in keys]
    lines = [holm_note(sizes), ""] if keys else []
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for r in rows:
        base = r["method"] == BASELINE
        cells = [r["name"], "–" if base else str(r["pairs"])]
        if keys:
            cells.append(format_cell(*r["gain"]) if r.get("gain") else "–")
        cells += ["–" if base or k not in r["holm"] else format_holm(r["holm"][k]) for k in keys]
        if tail:
            cells.append("–" if r["recovery"] is None or r["method"] == ORACLE else f"{r['recovery']:.2f}")
        if info.get("threshold") is not None:
            cells.append(format_steps(r["steps"]))
        cells.append(format_cell(*r["rollouts"], digits=0))
        cells.append(_fmt_drift(r["drift"]))
        lines.append("| " + " | ".join(cells) + " |")
    if info.get("threshold") is not None and any(x == 0 for r in rows for x in r["steps"]):
        lines += ["", reach_note(f"“{header[-3]}”", "median")]
    return "\n".join(lines) + "\n"
