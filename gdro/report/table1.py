"""The paper's Table 1 from the gdro-eval results kept in run dirs, and the report into the sweep's W&B group.

``gdro-eval checkpoint=<run>/checkpoint out=<run>/eval`` leaves ``eval.json`` in the run dir; gdro-report then lays
those out as Table 1 (:mod:`gdro.report.paper_table`: six mean@8 columns, their average, pooled pass@8), one row per method
(the mean over its seeds), with the paper's rows for the nearest Qwen3 size beside them (``table1.md``).

``--wandb`` logs the report to W&B as a run of ``job_type="report"`` in the sweep's group (the group gdro-train
gives every run of a multirun: the sweep dir's name), in the runs' W&B project: the results table, Table 1 and every
figure. Offline unless W&B is configured, like the runs (``wandb sync`` uploads it later).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from gdro.common.ioerrors import atomic_write_text
from gdro.report import paper_table
from gdro.report.runs import SweepRun, group_by_method

EVAL_GLOB = ("eval/eval.json", "eval*/eval.json")


def eval_record(run: SweepRun) -> dict[str, Any] | None:
    """The gdro-eval result kept in ``run``'s dir (``eval/eval.json``), or carried by its run summary; or None."""
    if run.evaluation is not None:
        return run.evaluation
    for pattern in EVAL_GLOB:
        for path in sorted(run.path.glob(pattern)):
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
    return None


def paper_size(runs: list[SweepRun]) -> str:
    """The Qwen3 size whose published rows stand beside ours: the runs' model choice when it is one (qwen3-4b ...),
    1.7B otherwise (the rehearsal models have its shape or are smaller)."""
    for run in runs:
        choice = str(run.config.get("model", {}).get("name_or_path", "")).lower()
        for size in ("8b", "4b", "1.7b"):
            if f"qwen3-{size}" in choice:
                return f"qwen3-{size}"
    return "qwen3-1.7b"


def write_table1(runs: list[SweepRun], out: Path) -> Path | None:
    """``table1.md`` from the runs' gdro-eval results (None when no run has one)."""
    rows = {}
    for rs in group_by_method(runs).values():
        records = [r for r in (eval_record(run) for run in rs) if r is not None]
        if not records:
            continue
        k = int(records[0].get("k", 8))
        per_seed = [paper_table.row(rec["metrics"], k) for rec in records]
        rows[f"{rs[0].name} ({len(records)} seed{'s' if len(records) > 1 else ''})"] = [
            None if any(v is None for v in col) else float(np.mean(col)) for col in zip(*per_seed)]
    if not rows:
        return None
    out.mkdir(parents=True, exist_ok=True)
    path = out / "table1.md"
    size = paper_size(runs)
    atomic_write_text(path, "Table 1 layout (gdro-eval of each run's final checkpoint, mean over seeds); the paper's "
                      f"rows ({size}-Base, as published) for reference.\n\n" + paper_table.markdown(rows, paper=size))
    return path


def log_to_wandb(sweep_dir: Path, out: Path, runs: list[SweepRun], files: list[Path]) -> str:
    """Log the report (tables and figures in ``files``) to the sweep's W&B group; returns the offline run's dir or
    URL."""
    import wandb

    from gdro.algorithm.tracking import resolve_wandb_mode

    logger_cfg = runs[0].config.get("logger", {}) if runs else {}
    group = logger_cfg.get("group") or Path(sweep_dir).resolve().name
    mode = resolve_wandb_mode(str(logger_cfg.get("wandb_mode", "auto")))
    run = wandb.init(project=logger_cfg.get("project") or "gdro", entity=logger_cfg.get("entity"), group=group,
                     job_type="report", name=f"report-{group}", dir=str(out), mode="offline" if mode == "disabled"
                     else mode, settings=wandb.Settings(console="off", silent=True), reinit="finish_previous")
    payload: dict[str, Any] = {}
    for path in files:
        if path.suffix == ".png":
            payload[f"figures/{path.stem}"] = wandb.Image(str(path))
        elif path.suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as fh:
                table = list(csv.reader(fh))
            payload[f"tables/{path.stem}"] = wandb.Table(columns=table[0], data=table[1:])
        elif path.suffix == ".md":
            payload[f"tables/{path.stem}_md"] = wandb.Html(f"<pre>{path.read_text(encoding='utf-8')}</pre>")
    run.log(payload)
    where = run.url or str(Path(run.dir).parent)
    run.finish()
    return where


__all__ = ["eval_record", "log_to_wandb", "paper_size", "write_table1"]
