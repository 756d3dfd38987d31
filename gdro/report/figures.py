"""Sweep report, the figures: eval curves, bin-share / weight / rollout heatmaps, WSE, mean bin, and the mechanism
curves (groups with gradient overall and per bin, the realised weighted SE against uniform). The paper's mechanism
figures (lead-lag, Eq. 33's WSE ratio, budget against data share) are gdro/report/paper_figures.py's; the plotting
kit they share is gdro/report/plotting.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from gdro.report.names import (
    METRIC_KEY,
    bin_sort_key,
    display_name,
    is_headline,
    metric_label,
    metric_sort_key,
)
from gdro.report.plotting import method_colors, over_seeds, save_figure, style_line_axes
from gdro.report.runs import SweepRun, ordered_groups
from gdro.report.terms import WSE_BATCH


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or len(y) < window:
        return y
    kernel = np.ones(window) / window
    pad = np.pad(y, (window // 2, window - 1 - window // 2), mode="edge")
    return np.convolve(pad, kernel, mode="valid")



def _headline_key(runs: list[SweepRun], kind: str) -> str | None:
    keys = sorted(
        {k for r in runs for row in r.eval_rows() for k in row
         if is_headline(k) and METRIC_KEY.match(k)["kind"] == kind},
        key=metric_sort_key,
    )
    return keys[0] if keys else None



def _fig_eval_curves(runs, groups, colors, path) -> bool:
    import matplotlib.pyplot as plt

    keys = [k for k in (_headline_key(runs, "mean"), _headline_key(runs, "pass")) if k]
    if not keys:
        return False
    fig, axes = plt.subplots(1, len(keys), figsize=(6 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for method, rs in groups.items():
            steps, mean, sd = over_seeds(rs, key)
            if len(steps) == 0:
                continue
            ax.plot(steps, mean, marker="o", ms=3, color=colors[method], label=f"{display_name(method)} (n={len(rs)})")
            ax.fill_between(steps, mean - sd, mean + sd, color=colors[method], alpha=0.2, lw=0)
        style_line_axes(ax, f"{metric_label(key)} (%)", f"{metric_label(key)}: mean over seeds ± 1 s.d.")
    return save_figure(fig, path)



def _fig_heatmap(runs, groups, kind: str, title: str, path) -> bool:
    """One heatmap (bin × step) per method, its first seed, of the keys ``gdro/<kind>/<bin>`` (or of ``kind``
    itself when it is a key prefix ending in "/"). Every panel has the rows of every bin any panel logs, in one order
    (a bin a run does not log is a blank row), and the panels share their rows and steps."""
    import matplotlib.pyplot as plt

    prefix = kind if kind.endswith("/") else f"gdro/{kind}/"
    # the first seed (that logs the keys) of each method
    firsts = [next(r for r in rs if r.has(prefix)) for rs in groups.values() if any(r.has(prefix) for r in rs)]
    if not firsts:
        return False
    bins = sorted({k[len(prefix):] for run in firsts for r in run.rows for k in r if k.startswith(prefix)},
                  key=bin_sort_key)
    fig, axes = plt.subplots(len(firsts), 1, figsize=(10, 0.4 + 2.6 * len(firsts)), squeeze=False, sharex=True,
                             sharey=True)
    span = [math.inf, -math.inf]
    for ax, run in zip(axes[:, 0], firsts):
        train = [r for r in run.rows if any(k.startswith(prefix) for k in r) and "step" in r]
        steps = [r["step"] for r in train]
        span = [min(span[0], steps[0] - 0.5), max(span[1], steps[-1] + 0.5)]
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
        ax.set_title(f"{display_name(run.method)} (seed {run.seed}, {run.path.parent.name}/{run.path.name}): {title}",
                     fontsize=10)
        fig.colorbar(im, ax=ax, pad=0.01)
    axes[-1, 0].set(xlabel="step", xlim=span)  # shared: every panel over every panel's steps
    return save_figure(fig, path)



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
            steps, mean, _ = over_seeds(have, key)
            ax.plot(steps, mean, color=colors[method], ls=style, alpha=0.2, lw=0.8)
            ax.plot(steps, _smooth(mean, max(1, len(steps) // 15)), color=colors[method], ls=style, lw=1.6,
                    label=f"{display_name(method)} {key.split('/')[-1]} (n={len(have)})")
    style_line_axes(ax, ylabel, title)
    return save_figure(fig, path)



def fig_compute_curves(runs: list[SweepRun], key: str, threshold: float | None, path) -> bool:
    """The held-out curve ``key`` against generated tokens and against steps, per method the mean over its seeds
    ± 1 s.d. where all its runs are measured, GRPO's final value (the compute table's threshold) dashed."""
    import matplotlib.pyplot as plt

    from gdro.report.compute import curve, mean_curve

    groups = ordered_groups(runs)
    colors = method_colors(list(groups))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    drawn = False
    for ax, axis, scale, xlabel in ((axes[0], "tokens", 1e3, "generated tokens (k)"), (axes[1], "steps", 1.0, "step")):
        ends = [curve(r, key, axis)[0] for r in runs]
        x_max = max((e[-1] for e in ends if len(e)), default=0.0)
        if x_max <= 0:
            continue
        grid = np.linspace(0.0, x_max, 200)
        for method, rs in groups.items():
            mean, sd = mean_curve(rs, key, axis, grid)
            if np.isnan(mean).all():
                continue
            drawn = True
            ax.plot(grid / scale, mean, color=colors[method], lw=1.6, label=f"{display_name(method)} (n={len(rs)})")
            ax.fill_between(grid / scale, mean - sd, mean + sd, color=colors[method], alpha=0.12, lw=0)
        if threshold is not None:
            ax.axhline(threshold, color="k", ls="--", lw=0.8, label=f"GRPO's final ({threshold:.1f})")
        ax.set(xlabel=xlabel, ylabel=f"{metric_label(key)} (%)",
               title=f"{metric_label(key)} vs {xlabel.split(' (')[0]}: mean over seeds ± 1 s.d.")
        ax.grid(alpha=0.3)
    if not drawn:
        plt.close(fig)
        return False
    axes[1].legend(fontsize=7)
    return save_figure(fig, path)



def make_figures(runs: list[SweepRun], out_dir: str | Path) -> list[Path]:
    """Write the figures whose keys some run logs; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = ordered_groups(runs)
    colors = method_colors(list(groups))
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
        ("wse.png", lambda p: _fig_lines(groups, colors, [("gdro/wse", "-"), ("gdro/wse_uniform", "--")], "WSE",
                                         "gdro/wse (solid) vs gdro/wse_uniform (dashed)", p)),
        # the mechanism columns (gdro/report/mechanism.py), per step, every row
        ("informative.png", lambda p: _fig_lines(groups, colors, [("difficulty/informative", "-")],
                                                 "groups with gradient (share)",
                                                 "difficulty/informative: groups neither all correct nor all wrong", p)),
        ("informative_heatmap.png", lambda p: _fig_heatmap(runs, groups, "difficulty/informative/",
                                                           "share of the bin's groups with gradient", p)),
        # the batch's own sigma per step, not Eq. 33's offline one (the paper's: wse_ratio.png, paper_figures.py)
        ("wse_ratio_batch.png", lambda p: _fig_lines(groups, colors, [("difficulty/wse_ratio", "-")],
                                                     "WSE ÷ uniform", f"{WSE_BATCH} ÷ uniform (difficulty/wse_ratio; "
                                                     "not Eq. 33: that is wse_ratio.png)", p)),
    ]
    for name, job in jobs:
        if job(out_dir / name):
            made.append(out_dir / name)
    return made
