"""Sweep report, the results table: mean ± Student-t 95% CI over seeds per method, as table.md and table.csv;
and the cells of the paired tables' Holm-adjusted comparisons (gdro/report/stats.py)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from gdro.common.ioerrors import atomic_write, atomic_write_text
from gdro.report.names import (
    BASELINE,
    METRIC_KEY,
    display_name,
    is_headline,
    method_rank,
    metric_label,
    metric_sort_key,
)
from gdro.report.runs import SweepRun, select_row
from gdro.report.stats import ALPHA, HolmCell, mean_ci


def aggregate(runs: list[SweepRun], *, which: str = "final") -> list[dict]:
    """One row per method (GRPO first) over its runs' final (or best-mean@k) evaluation rows.

    Each row: ``method``, ``name``, ``n`` (runs with an eval row), ``seeds``, ``incomplete`` (how many of
    those runs are not completed runs: only when such runs are passed in), ``metrics`` ({key: (mean, ci, n)},
    ci NaN when n < 2, keys in display order) and ``gain`` ({headline pass@k key: % over GRPO's mean, or None}).
    """
    by_method: dict[str, list[dict]] = {}
    seeds: dict[str, list] = {}
    incomplete: dict[str, int] = {}
    for run in runs:
        row = select_row(run, which)
        if row is None:
            continue
        by_method.setdefault(run.method, []).append(row)
        seeds.setdefault(run.method, []).append(run.seed)
        incomplete[run.method] = incomplete.get(run.method, 0) + (not run.complete)
    out = []
    for method in sorted(by_method, key=method_rank):
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



def format_cell(mean: float, ci: float, n: int, digits: int = 1) -> str:
    if n == 0 or not math.isfinite(mean):
        return "–"
    if n == 1:
        return f"{mean:.{digits}f} (n=1)"
    return f"{mean:.{digits}f} ± {ci:.{digits}f}"



def format_p(p: float) -> str:
    """A p-value in a few characters: '–' (none), '<0.001', 0.004, 0.03."""
    if not math.isfinite(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def format_holm(cell: HolmCell, digits: int = 1, scale: float = 1.0) -> str:
    """A comparison against GRPO: ``+4.0 ± 4.4 (p_H 0.06)``, the mean (÷ ``scale``) ± its Holm-consistent
    half-width and the Holm-adjusted p; ``+4.0 (n=1)`` or ``+0.0 ± 0.0 (p_H –)`` when left out of the family."""
    if cell.n == 0 or not math.isfinite(cell.mean):
        return "–"
    if cell.n == 1:
        return f"{cell.mean / scale:+.{digits}f} (n=1)"
    return f"{cell.mean / scale:+.{digits}f} ± {cell.half_width / scale:.{digits}f} (p_H {format_p(cell.p_holm)})"


def holm_note(sizes: list[int], alpha: float = ALPHA) -> str:
    """The header line of a table of Holm-adjusted columns; ``sizes``: each column's family size, left to right."""
    if not any(sizes):
        return "Δ columns: mean ± 95% CI (Student t); no comparison has ≥ 2 pairs with a p-value, so no test."
    over = (f"the {sizes[0]} rows of each column" if len(set(sizes)) == 1
            else f"the rows of each column ({', '.join(map(str, sizes))} from left to right)")
    return (f"Δ columns: mean ± the Holm-consistent CI (Student t; it excludes 0 exactly when Holm rejects at "
            f"{alpha:.0%}) and p_H, the two-sided paired t-test's p-value, Holm-adjusted over {over}: every "
            "non-GRPO method with ≥ 2 pairs (gdro/report/stats.py); '(n=1)' or p_H –: left out of the family.")


def format_gain(g: float | None) -> str:
    return "–" if g is None else f"{g:+.1f}%"



def to_markdown(rows: list[dict]) -> str:
    cols = _columns(rows)
    header = ["Method", "n"]
    for k in cols:
        header.append(metric_label(k))
        if k in {g for r in rows for g in r["gain"]}:
            header.append(f"Δ{metric_label(k)} vs GRPO")
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
    atomic_write_text(md, to_markdown(rows) + (f"\n{notes}" if notes else ""))
    cols = _columns(rows)
    gain_keys = sorted({g for r in rows for g in r["gain"]}, key=metric_sort_key)
    header = ["method", "name", "n_seeds", "seeds", "n_incomplete"]
    for k in cols:
        header += [f"{metric_label(k)}_mean", f"{metric_label(k)}_ci", f"{metric_label(k)}_n"]
    header += [f"{metric_label(k)}_gain_pct" for k in gain_keys]

    def num(x: float | None) -> str:
        return "" if x is None or not math.isfinite(x) else repr(float(x))

    def write_csv(fh) -> None:
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

    path = atomic_write(out_dir / "table.csv", write_csv, newline="")
    return md, path
