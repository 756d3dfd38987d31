"""Sweep report, the mechanism table (mechanism.md): *why* a row did what it did, measured on its training steps.

Per method, mean ± 95% CI over its runs (Student t), each run first averaged over its steps after the unseen phase
(:meth:`gdro.report.runs.SweepRun.after_first_pass`: the steps after one pass over the pool, the same steps for every
row; :func:`gdro.report.paired.mean_bin_drift` uses the same):

- **groups with gradient**: ``difficulty/informative``, the share of the batch's groups that are neither all correct
  nor all wrong (GRPO's group-relative advantage is zero for the others), overall and in the first and last quarter
  of those steps; and per bin (``difficulty/informative/<bin>``, over the steps where the bin was in the batch);
- **rollouts trained ÷ generated**: Σ (``compute/rollouts`` − ``compute/discarded_rollouts``) ÷ Σ ``compute/rollouts``
  over those steps (the compute ledger; 100% without a filter): dynamic sampling trains only on groups with gradient,
  and this is what that costs in rollouts it generated and threw away;
- **rollouts per prompt per bin**: ``compute/rollouts_per_prompt/<bin>`` (the compute ledger: every generated group);
- **weighted standard error against uniform**, named ``WSE (batch σ)`` (gdro/report/terms.py):
  ``difficulty/wse_ratio``, the batch's Σ q_b σ_b / √n_b as allocated over the same batch at its mean group size (1
  for a fixed allocation; the square-root allocator's claim is that it is below 1), with the share of runs whose mean
  ratio is below 1. Its σ_b is the batch's own at each step, so it is
  not the paper's Eq. 33 proxy, whose σ̂_b is estimated once, offline: that one, ``WSE (Eq. 33, the paper's)``, is
  paper_mechanism.md / ``wse_ratio.png`` (gdro/report/paper_figures.py); the markdown says so under its table;
- **the batch's mean bin** (first → last quarter) is in paired.md; here its per-step curve is ``mean_bin.png``;
- **lead–lag Δμ** (Eq. 32, ``gdro/lead_lag``; Prompt-GDRO only): the weights' mean bin minus the batch's, first →
  last quarter (negative: the weights sit at harder bins than the data).
"""

from __future__ import annotations

import math

import numpy as np

from gdro.report.names import bin_sort_key, display_name, method_rank
from gdro.report.paired import first_last_quarter
from gdro.report.runs import SweepRun, group_by_method
from gdro.report.table import format_cell, mean_ci
from gdro.report.terms import WSE_BATCH, WSE_BATCH_NOTE


def _mean(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return float(np.mean(vals)) if vals else math.nan


def _quarters(rows: list[dict], key: str) -> tuple[float, float]:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return first_last_quarter(vals) or (math.nan, math.nan)


def _kept(rows: list[dict]) -> float:
    """The share of the rollouts generated over ``rows`` that were trained on (NaN without the compute ledger)."""
    gen = [(r["compute/rollouts"], r.get("compute/discarded_rollouts", 0.0)) for r in rows
           if isinstance(r.get("compute/rollouts"), (int, float))]
    total = sum(g for g, _ in gen)
    return (total - sum(d for _, d in gen)) / total if total > 0 else math.nan


def mechanism_rows(runs: list[SweepRun]) -> tuple[list[dict], list[str]]:
    """Per method: the run-level means (see the module docstring) pooled over runs; and the bins seen anywhere."""
    out, bins = [], set()
    for method in sorted(group_by_method(runs), key=method_rank):
        per_run = [r.after_first_pass("difficulty/informative") for r in group_by_method(runs)[method]]
        per_run = [rows for rows in per_run if rows]
        if not per_run:
            continue
        row = {"method": method, "name": display_name(method), "n": len(per_run)}
        row["informative"] = mean_ci([_mean(rows, "difficulty/informative") for rows in per_run])
        q = [_quarters(rows, "difficulty/informative") for rows in per_run]
        row["informative_first"], row["informative_last"] = mean_ci([a for a, _ in q]), mean_ci([b for _, b in q])
        row["kept"] = mean_ci([_kept(rows) for rows in per_run])
        ratios = [_mean(rows, "difficulty/wse_ratio") for rows in per_run]
        row["wse_ratio"] = mean_ci(ratios)
        row["wse_below_1"] = (sum(r < 1 - 1e-12 for r in ratios if math.isfinite(r)),
                              sum(math.isfinite(r) for r in ratios))
        lag = [_quarters(rows, "gdro/lead_lag") for rows in per_run]
        row["lead_lag"] = (mean_ci([a for a, _ in lag]), mean_ci([b for _, b in lag]))
        for name, prefix in (("per_bin", "difficulty/informative/"), ("rollouts", "compute/rollouts_per_prompt/")):
            per_bin: dict[str, list[float]] = {}
            for rows in per_run:
                for key in {k for r in rows for k in r if k.startswith(prefix)}:
                    per_bin.setdefault(key.rsplit("/", 1)[1], []).append(_mean(rows, key))
            row[name] = {b: mean_ci(v) for b, v in per_bin.items()}
            bins.update(per_bin)
        out.append(row)
    return out, sorted(bins, key=bin_sort_key)


def mechanism_markdown(rows: list[dict], bins: list[str]) -> str:
    """Two tables: the overall mechanism columns per method, then groups with gradient per bin."""
    head = ["Method", "runs", "groups with gradient", "first → last quarter", f"{WSE_BATCH} ÷ uniform (runs < 1)",
            "lead–lag Δμ, first → last quarter", "rollouts trained ÷ generated"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in rows:
        below, counted = r["wse_below_1"]
        lag_first, lag_last = r["lead_lag"]
        lag = ("–" if not lag_first[2] else
               f"{format_cell(*lag_first, digits=2)} → {format_cell(*lag_last, digits=2)}")
        lines.append("| " + " | ".join([
            r["name"], str(r["n"]), format_cell(*_pct(r["informative"])),
            f"{format_cell(*_pct(r['informative_first']))} → {format_cell(*_pct(r['informative_last']))}",
            f"{format_cell(*r['wse_ratio'], digits=3)} ({below}/{counted})", lag,
            format_cell(*_pct(r["kept"])) if r["kept"][2] else "–"]) + " |")
    lines += ["", WSE_BATCH_NOTE]
    lines += ["", "Groups with gradient per bin (%, steps where the bin was in the batch; bin 0 = hardest):", "",
              "| Method | " + " | ".join(bins) + " |", "|" + "|".join(["---"] + ["---:"] * len(bins)) + "|"]
    for r in rows:
        cells = [format_cell(*_pct(r["per_bin"][b]), digits=0) if b in r["per_bin"] else "–" for b in bins]
        lines.append("| " + " | ".join([r["name"], *cells]) + " |")
    if any(r["rollouts"] for r in rows):  # the compute ledger's compute/rollouts_per_prompt/<bin> (every generated group)
        lines += ["", "Rollouts per prompt per bin (every generated group, discarded ones included; bin 0 = hardest):",
                  "", "| Method | " + " | ".join(bins) + " |", "|" + "|".join(["---"] + ["---:"] * len(bins)) + "|"]
        for r in rows:
            cells = [format_cell(*r["rollouts"][b]) if b in r["rollouts"] else "–" for b in bins]
            lines.append("| " + " | ".join([r["name"], *cells]) + " |")
    return "\n".join(lines) + "\n"


def _pct(cell: tuple[float, float, int]) -> tuple[float, float, int]:
    m, h, n = cell
    return 100 * m, 100 * h, n
