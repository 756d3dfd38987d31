"""The paper's Table 1 layout from gdro-eval results, with the paper's own rows beside them for reference.

Table 1 (arXiv 2601.19280, §7.1): per method, mean@8 on MATH500, AIME (the 2024/2025 average), AMC, Minerva,
OlympiadBench and GPQA-Diamond, and one pass@8 column (most likely pooled over all prompts: gdro-eval's
``eval/pass@k``). Here a row also gets the unweighted average of the six mean@8 columns ("avg") and, for
completeness, pass@8 per benchmark. The paper's rows are printed as published (:data:`PAPER`), marked as such.
"""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = [("math500", "MATH500"), ("aime", "AIME 24/25"), ("amc23", "AMC"), ("minerva", "Minerva"),
           ("olympiadbench", "Olympiad"), ("gpqa_diamond", "GPQA")]
# Table 1 as published: mean@8 per column, then pooled pass@8
PAPER = {
    "qwen3-1.7b": {"GRPO": [50.62, 5.42, 34.69, 14.56, 23.07, 26.39, 50.74],
                   "Prompt-GDRO": [63.20, 6.88, 39.38, 14.61, 25.07, 29.29, 55.68],
                   "Rollout-GDRO": [63.98, 7.50, 36.87, 17.28, 26.71, 27.72, 56.14]},
    "qwen3-4b": {"GRPO": [72.05, 11.25, 60.94, 17.79, 30.48, 35.54, 56.31],
                 "Prompt-GDRO": [75.78, 12.92, 64.06, 26.72, 40.98, 40.88, 63.70],
                 "Rollout-GDRO": [75.20, 13.96, 67.50, 26.47, 39.28, 38.51, 62.27]},
    "qwen3-8b": {"GRPO": [73.45, 14.38, 66.56, 28.17, 36.92, 42.25, 62.04],
                 "Prompt-GDRO": [76.18, 16.04, 70.94, 32.17, 42.43, 43.81, 67.60],
                 "Rollout-GDRO": [77.88, 15.63, 66.88, 29.55, 43.62, 43.31, 67.75]},
}


def row(metrics: dict[str, float], k: int = 8) -> list[float | None]:
    """One Table 1 row (six mean@k columns, their average, pooled pass@k) from gdro-eval's metrics."""
    cols = [metrics.get(f"eval/{key}/mean@{k}") for key, _ in COLUMNS]
    present = [c for c in cols if c is not None]
    avg = sum(present) / len(present) if len(present) == len(cols) else None
    return [*cols, avg, metrics.get(f"eval/pass@{k}")]


def markdown(rows: dict[str, list[float | None]], *, k: int = 8, paper: str | None = "qwen3-1.7b") -> str:
    """Table 1 in markdown: our ``rows`` (label -> :func:`row`), then the paper's rows for model ``paper``."""
    head = [name for _, name in COLUMNS]
    lines = [f"| method | {' | '.join(head)} | avg (mean@{k}) | pass@{k} (pooled) |",
             "|---|" + "---:|" * (len(head) + 2)]
    fmt = lambda v: "—" if v is None else f"{v:.2f}"
    for label, values in rows.items():
        lines.append(f"| {label} | " + " | ".join(fmt(v) for v in values) + " |")
    for method, values in (PAPER.get(paper, {}) if paper else {}).items():
        avg = sum(values[:6]) / 6
        lines.append(f"| paper, {paper}-Base: {method} | " + " | ".join(fmt(v) for v in [*values[:6], avg, values[6]])
                     + " |")
    return "\n".join(lines) + "\n"


def from_eval_dirs(dirs: dict[str, Path], k: int = 8) -> dict[str, list[float | None]]:
    """Rows from gdro-eval output dirs (label -> dir holding ``eval.json``)."""
    return {label: row(json.loads((Path(d) / "eval.json").read_text())["metrics"], k) for label, d in dirs.items()}


__all__ = ["COLUMNS", "PAPER", "from_eval_dirs", "markdown", "row"]
