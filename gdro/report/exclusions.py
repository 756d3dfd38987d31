"""Sweep report, the runs left out: the markdown beneath ``table.md`` and the lines on stderr that name every run dir
not pooled as a completed run, and why (gdro/report/runs.py judges each run)."""

from __future__ import annotations

from pathlib import Path

from gdro.report.runs import Skipped, SweepRun


def _rel(path: Path, root: Path) -> str:
    try:
        rel = str(Path(path).relative_to(root))
    except ValueError:
        return str(path)
    return str(path) if rel == "." else rel


def exclusion_notes(runs: list[SweepRun], skipped: list[Skipped], root: str | Path, *,
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


__all__ = ["exclusion_notes"]
