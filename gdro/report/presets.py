"""The hard tail of each toy protocol, by experiment: the levels a sweep's tail metric (``--tail-levels``) averages
when its runs come from one ``experiment=toy-*`` preset (docs/results.md fixes each protocol; the levels below 50%
mean@8 at the warm start, or the wall a moving frontier crosses).

The one table of them: ``scripts/reproduce_toy.py`` passes these to ``gdro-report``, ``gdro-report`` defaults to them
when ``--tail-levels`` is not given, and ``notebooks/curriculum.ipynb`` when ``GDRO_TAIL_LEVELS`` is unset; so the
three compare the same curve and agree on the threshold. A run's experiment is its Hydra choice (run.json
``"choices"`` → ``"experiment"``, which run summaries keep too).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gdro.report.paired import parse_levels
from gdro.report.runs import SweepRun

# experiment -> its protocol's hard tail (the "report" of scripts/reproduce_toy.py's presets)
TAIL_LEVELS: dict[str, str] = {
    "toy-curriculum": "7-8",
    "toy-frontier": "7-12",
    "toy-paper-regime": "7-12",
    "toy-moving-frontier": "8-9",
    "smollm2-frontier": "2-4",  # SmolLM2 (issue #48 item 5): every level is below 50% mean@1 at step 0 in its pilot
}


def _experiment(choices: object) -> str | None:
    value = choices.get("experiment") if isinstance(choices, dict) else None
    return value if isinstance(value, str) and value else None


def _summary_experiments(path: Path) -> dict[Path, str | None]:
    """Each run of a summaries file (``gdro-report FILE``), at the path ``load_summaries`` gives it, and its
    experiment; lines that do not parse are left out (the report refuses those itself)."""
    from gdro.report.summary import summary_lines

    found: dict[Path, str | None] = {}
    try:
        lines = summary_lines(path)
    except (OSError, ValueError):
        return found
    for raw in lines:
        try:
            s = json.loads(raw.decode("utf-8"))
            found[path / s["sweep"] / s["run"]] = _experiment(s.get("choices"))
        except (ValueError, TypeError, KeyError):
            continue
    return found


def run_experiment(run: SweepRun, summaries: dict[Path, str | None] | None = None) -> str | None:
    """The experiment ``run`` was trained under (its run.json's choice, or its summary's), None when unknown."""
    if summaries is not None and run.path in summaries:
        return summaries[run.path]
    try:
        meta = json.loads((run.path / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return _experiment(meta.get("choices")) if isinstance(meta, dict) else None


def sweep_experiment(runs: Sequence[SweepRun], source: str | Path | None = None) -> str | None:
    """The one experiment every run of ``runs`` was trained under; None when they differ, one is unknown, or there
    are none. ``source``: the summaries file the runs come from (``gdro-report FILE``), else their run dirs."""
    summaries = _summary_experiments(Path(source)) if source is not None and Path(source).is_file() else None
    found = {run_experiment(r, summaries) for r in runs}
    return found.pop() if len(found) == 1 else None


def preset_tail_levels(runs: Sequence[SweepRun], source: str | Path | None = None) -> str | None:
    """The hard tail (``"7-12"``) of the protocol of the sweep's one experiment; None when the runs are of no
    single known preset (mixed, unknown, or an experiment without a tail here)."""
    experiment = sweep_experiment(runs, source)
    return TAIL_LEVELS.get(experiment) if experiment else None


def choose_tail_levels(given: str | None, runs: Sequence[SweepRun], source: str | Path | None = None,
                       name: str = "--tail-levels") -> tuple[str | None, str]:
    """The tail levels to use (``given`` when set, else :func:`preset_tail_levels`; None: no tail metric) and one
    line that says which and why; ``name`` is how the caller sets it (``--tail-levels``, ``GDRO_TAIL_LEVELS``)."""
    if given:
        return given, f"{name} {given}: as given"
    experiment = sweep_experiment(runs, source)
    spec = TAIL_LEVELS.get(experiment) if experiment else None
    if spec is None:
        why = (f"experiment={experiment} has no preset tail" if experiment
               else "the runs are of no single known experiment")
        return None, f"{name} not given and {why}: no tail metric ({name} sets one)"
    return spec, (f"{name} {spec}: not given, the hard tail of experiment={experiment}'s protocol "
                  f"(gdro/report/presets.py; {name} sets another)")


def tail_levels_or_preset(given: str | None, parsed: list[int] | None, runs: Sequence[SweepRun],
                          source: str | Path | None = None) -> tuple[str | None, list[int] | None]:
    """``gdro-report``'s tail: ``--tail-levels`` as given (``given``, ``parsed``), else the sweep's preset tail
    (:func:`choose_tail_levels`), said in one line on stderr; ``(None, None)`` when neither."""
    if given:
        return given, parsed
    spec, line = choose_tail_levels(None, runs, source)
    if spec is None:
        return None, None
    print(f"gdro-report: {line}", file=sys.stderr)
    return spec, parse_levels(spec)


__all__ = ["TAIL_LEVELS", "choose_tail_levels", "preset_tail_levels", "run_experiment", "sweep_experiment",
           "tail_levels_or_preset"]
