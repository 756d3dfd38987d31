"""Sweep report, the figure kit shared by gdro/report/figures.py, paper_plots.py and wave.py: one colour per method,
a key's per-step mean and s.d. over a method's runs, that mean drawn with its ± 1 s.d. band, the line plots' axes, and
saving a figure (its long titles wrapped to fit, the file written whole or not at all)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gdro.common.ioerrors import atomic_write
from gdro.report.runs import SweepRun


def method_colors(methods: list[str]) -> dict[str, Any]:
    """One tab10 colour per method, in the order given."""
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    return {m: cmap(i % 10) for i, m in enumerate(methods)}


def _series(run: SweepRun, key: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(r["step"], r[key]) for r in run.rows if isinstance(r.get(key), (int, float)) and "step" in r]
    if not pts:
        return np.empty(0), np.empty(0)
    s, v = zip(*pts)
    return np.asarray(s, dtype=float), np.asarray(v, dtype=float)


def over_seeds(runs: list[SweepRun], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, mean over runs and s.d. over runs (0 where only one run has the step)."""
    return pool_by_step(_series(run, key) for run in runs)


def pool_by_step(series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, values) pairs, one per run, pooled: steps, mean over runs and s.d. over runs (0 where only one run
    has the step); non-finite values left out."""
    by_step: dict[float, list[float]] = {}
    for steps, vals in series:
        for s, v in zip(steps, vals):
            if np.isfinite(v):
                by_step.setdefault(float(s), []).append(float(v))
    steps = np.asarray(sorted(by_step))
    mean = np.asarray([np.mean(by_step[s]) for s in steps])
    sd = np.asarray([np.std(by_step[s], ddof=1) if len(by_step[s]) > 1 else 0.0 for s in steps])
    return steps, mean, sd


def plot_band(ax, series, color, label: str, ls: str = "-", sd_band: bool = True) -> bool:
    """Mean over seeds (± 1 s.d., shaded) of (steps, values) pairs; False when nothing is finite."""
    steps, mean, sd = pool_by_step(series)
    if not len(steps):
        return False
    ax.plot(steps, mean, color=color, ls=ls, lw=1.4, label=label)
    if sd_band:
        ax.fill_between(steps, mean - sd, mean + sd, color=color, alpha=0.15, lw=0)
    return True


def style_line_axes(ax, ylabel: str, title: str) -> None:
    """A line plot's axes: x the step, its y label and title, a light grid and the legend."""
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _fit_titles(fig) -> None:
    """Wrap every axes title wider than its axes, and a suptitle wider than the figure, onto more lines (a long title
    is never cut off at the figure's edge)."""
    import textwrap

    renderer = fig.canvas.get_renderer()
    boxes = [(t, ax.get_window_extent(renderer).width) for ax in fig.axes
             for t in (ax.title, ax._left_title, ax._right_title)]
    if fig._suptitle is not None:
        boxes.append((fig._suptitle, 0.96 * fig.bbox.width))
    for text, room in boxes:
        label = text.get_text()
        for _ in range(4):  # narrower each time until it fits (or cannot wrap further)
            wide = text.get_window_extent(renderer).width
            if not label or wide <= room:
                break
            lines = label.splitlines()
            chars = max(12, int(max(map(len, lines)) * room / wide) - 1)
            wrapped = "\n".join(w for line in lines for w in textwrap.wrap(line, chars) or [""])
            if wrapped == label:
                break
            text.set_text(label := wrapped)


def save_figure(fig, path) -> bool:
    """Write ``fig`` to ``path`` (its long titles wrapped to fit; whole or not at all) and close it; True."""
    import matplotlib.pyplot as plt

    _fit_titles(fig)
    fig.tight_layout()
    try:  # whole or not at all, a failure naming the file (gdro.common.ioerrors)
        atomic_write(path, lambda fh: fig.savefig(fh, format=Path(path).suffix[1:] or "png", dpi=110), binary=True)
    finally:
        plt.close(fig)
    return True


__all__ = ["method_colors", "over_seeds", "plot_band", "pool_by_step", "save_figure", "style_line_axes"]
