"""Sweep report, the plots of the paper's mechanism figures (definitions: gdro/report/paper_figures.py):
``wse_ratio.png`` (Fig. 6 right), ``budget_vs_data_<method>.png`` (Fig. 7), ``budget_snapshots.png`` (Fig. 9),
``macro_dynamics.png`` (Figs. 4 and 8) and ``lead_lag.png`` (Fig. 6 left); :func:`write_paper_figures` writes them with
``paper_mechanism.md``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from gdro.common.ioerrors import atomic_write_text
from gdro.report.names import display_name
from gdro.report.paper_figures import (
    MASS_BIN,
    SHARE_KEYS,
    Sweep,
    collect,
    mass_at_least,
    mass_in,
    mean_bin,
    paper_markdown,
    pooled,
    snapshot_steps,
    wse_ratio,
)
from gdro.report.plotting import method_colors, over_seeds, plot_band, save_figure, style_line_axes
from gdro.report.runs import SweepRun, ordered_groups
from gdro.report.terms import BUDGET_SHARE, DATA_SHARE, ROLLOUTS, WSE_PAPER


def fig_wse(sw: Sweep, colors, path) -> bool:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    drawn = False
    for m, ts in sw.groups.items():
        drawn |= plot_band(ax, sw.series(m, lambda t: wse_ratio(t, sw.sigma)), colors[m],
                       f"{display_name(m)} (n={len(ts)})")
    if not drawn:
        plt.close(fig)
        return False
    ax.axhline(1.0, color="k", ls="--", lw=0.8, label="uniform n̄")
    style_line_axes(ax, "WSE ÷ uniform", f"{WSE_PAPER} ÷ uniform (offline σ̂_b; not mechanism.md's batch σ): "
                     "mean over seeds ± 1 s.d.")
    return save_figure(fig, path)


def _arm_range(ts, n: np.ndarray) -> tuple[float, float]:
    alloc = ts[0].run.config.get("allocator") if isinstance(ts[0].run.config.get("allocator"), dict) else {}
    lo, hi = alloc.get("n_min"), alloc.get("n_max")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and hi > lo:
        return float(lo), float(hi)
    finite = n[np.isfinite(n)]
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)


def fig_budget_vs_data(sw: Sweep, method: str, path) -> bool:
    """Fig. 7: data share, budget share (one colour scale for both) and rollouts per prompt (the arm range), bins ×
    steps, mean over the method's seeds; the three panels share their rows and steps."""
    import matplotlib.pyplot as plt

    ts = sw.groups[method]
    steps, q = pooled(ts, "q")
    _, s = pooled(ts, "budget")
    _, n = pooled(ts, "n")
    if not len(steps):
        return False
    fig, axes = plt.subplots(1, 3, figsize=(16, 0.8 + 0.32 * len(sw.bins) + 1.5), sharex=True, sharey=True)
    extent = (steps[0] - 0.5, steps[-1] + 0.5, len(sw.bins) - 0.5, -0.5)
    lo, hi = _arm_range(ts, n)
    top = max((float(np.nanmax(m)) for m in (q, s) if np.isfinite(m).any()), default=1.0) or 1.0
    for ax, mat, title, kw in ((axes[0], q, DATA_SHARE, {"vmin": 0.0, "vmax": top}),
                               (axes[1], s, BUDGET_SHARE, {"vmin": 0.0, "vmax": top}),
                               (axes[2], n, ROLLOUTS, {"vmin": lo, "vmax": hi})):
        im = ax.imshow(np.ma.masked_invalid(mat.T), aspect="auto", interpolation="nearest", cmap="viridis",
                       extent=extent, **kw)
        ax.set(title=title, xlabel="step")
        fig.colorbar(im, ax=ax, pad=0.01)
    axes[0].set_yticks(range(len(sw.bins)))
    axes[0].set_yticklabels(sw.bins, fontsize=8)
    axes[0].set_ylabel("bin (0 = hardest)")
    fig.suptitle(f"{display_name(method)}: {DATA_SHARE}, {BUDGET_SHARE} and {ROLLOUTS} per bin "
                 f"(mean over {len(ts)} seeds)", fontsize=10)
    return save_figure(fig, path)


def fig_snapshots(sw: Sweep, path) -> bool:
    """Fig. 9: per method (rows) and snapshot (columns), data share vs budget share per bin, bars."""
    import matplotlib.pyplot as plt

    methods = sw.allocating()
    if not methods:
        return False
    fig, axes = plt.subplots(len(methods), 4, figsize=(15, 0.6 + 2.4 * len(methods)), squeeze=False, sharey=True)
    x = np.arange(len(sw.bins))
    for row, m in zip(axes, methods):
        steps, q = pooled(sw.groups[m], "q")
        _, s = pooled(sw.groups[m], "budget")
        for ax, (name, step) in zip(row, snapshot_steps(steps)):
            i = int(np.searchsorted(steps, step))
            ax.bar(x - 0.2, np.nan_to_num(q[i]), 0.4, label="data share", color="tab:blue")
            ax.bar(x + 0.2, np.nan_to_num(s[i]), 0.4, label="budget share", color="tab:orange")
            ax.set_title(f"{display_name(m)}: {name} (step {step:g})", fontsize=9)
            ax.set_xticks(x)
            ax.set_xticklabels(sw.bins, fontsize=7)
            ax.grid(alpha=0.3, axis="y")
    axes[0, 0].legend(fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("bin (0 = hardest)")
    return save_figure(fig, path)


def fig_macro(sw: Sweep, colors, path, mass_bin: int = MASS_BIN) -> bool:
    """Figs. 4 / 8: mean bin index; share of the batch in bins ≥ 3 (``mass_bin``, solid) and in the high bins
    (dashed); budget share of the high bins (gdro/report/terms.py's one rule, stated in the figure's title)."""
    import matplotlib.pyplot as plt

    high, rule = sw.high_bins(), sw.high_rule()
    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    drawn = False
    for m, ts in sw.groups.items():
        name = f"{display_name(m)} (n={len(ts)})"
        drawn |= plot_band(axes[0], sw.series(m, mean_bin), colors[m], name)
        plot_band(axes[1], sw.series(m, lambda t: mass_at_least(t, mass_bin)), colors[m], name, "-", sd_band=False)
        plot_band(axes[1], sw.series(m, lambda t: mass_in(t, high)), colors[m], "_nolegend_", "--", sd_band=False)
        plot_band(axes[2], sw.series(m, lambda t: mass_in(t, high, budget=True)), colors[m], name)
    if not drawn:
        plt.close(fig)
        return False
    style_line_axes(axes[0], "mean bin index", "mean pass-rate bin of the batch (unseen bin left out)")
    style_line_axes(axes[1], "share of the batch", f"{DATA_SHARE} of bins ≥ {mass_bin} (solid) and of the high bins "
                     "(dashed)")
    style_line_axes(axes[2], BUDGET_SHARE, f"{BUDGET_SHARE} of the high bins")
    fig.suptitle(f"{rule[0].upper()}{rule[1:]}", fontsize=10)
    for ax in axes[:2]:
        ax.set_xlabel("")
    return save_figure(fig, path)


def fig_lead_lag(runs: list[SweepRun], colors, path) -> bool:
    """Fig. 6 left: ``gdro/lead_lag`` (Eq. 32) per Prompt-GDRO method, mean over seeds ± 1 s.d."""
    import matplotlib.pyplot as plt

    groups = {m: [r for r in rs if r.has("gdro/lead_lag")] for m, rs in ordered_groups(runs).items()}
    groups = {m: rs for m, rs in groups.items() if rs}
    if not groups:
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    for m, rs in groups.items():
        steps, mean, sd = over_seeds(rs, "gdro/lead_lag")
        ax.plot(steps, mean, color=colors[m], lw=1.4, label=f"{display_name(m)} (n={len(rs)})")
        ax.fill_between(steps, mean - sd, mean + sd, color=colors[m], alpha=0.15, lw=0)
    ax.axhline(0.0, color="k", ls="--", lw=0.8)
    style_line_axes(ax, "Δμ = μ_weight − μ_data", "Lead–lag Δμ (Eq. 32): mean over seeds ± 1 s.d.")
    return save_figure(fig, path)


def method_file(method: str) -> str:
    return "budget_vs_data_" + re.sub(r"[^A-Za-z0-9._-]+", "_", method) + ".png"


def make_paper_plots(runs: list[SweepRun], sw: Sweep, out_dir: Path) -> tuple[list[Path], list[str]]:
    """The PNGs whose keys some run logs, and one line per figure skipped."""
    import matplotlib

    matplotlib.use("Agg")
    colors = method_colors(list(ordered_groups(runs)))
    none = "no run logs difficulty/batch/<bin> (or gdro/share/<bin>)"
    same = "no method gives some bins more rollouts per prompt than others (budget share = data share)"
    jobs = [("wse_ratio.png", lambda p: fig_wse(sw, colors, p), none),
            *[(method_file(m), lambda p, m=m: fig_budget_vs_data(sw, m, p), none) for m in sw.allocating()],
            ("budget_snapshots.png", lambda p: fig_snapshots(sw, p), none if not sw.groups else same),
            ("macro_dynamics.png", lambda p: fig_macro(sw, colors, p), none),
            ("lead_lag.png", lambda p: fig_lead_lag(runs, colors, p), "no run logs gdro/lead_lag (Prompt-GDRO)")]
    made, skipped = [], []
    for name, job, why in jobs:
        if job(out_dir / name):
            made.append(out_dir / name)
        else:
            skipped.append(f"skipped {name}: {why}")
    if not sw.allocating():
        skipped.insert(1, "skipped budget_vs_data_<method>.png: " + (none if not sw.groups else same))
    return made, skipped


def write_paper_figures(runs: list[SweepRun], out_dir: str | Path) -> tuple[Path | None, list[Path], list[str]]:
    """``paper_mechanism.md`` and the figures (gdro/report/paper_plots.py) in ``out_dir``: (the markdown, or None
    when no run logs a data share; the PNGs written; one line per figure or table skipped)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sw = collect(runs)
    made, skipped = make_paper_plots(runs, sw, out_dir)
    if not sw.groups:
        skipped.insert(0, f"paper_mechanism.md: no run logs {' / '.join(SHARE_KEYS)}<bin>")
        return None, made, skipped
    sw.notes += skipped
    md = out_dir / "paper_mechanism.md"
    atomic_write_text(md, "The paper's mechanism figures and their numbers (§7.4; gdro/report/paper_figures.py).\n\n"
                      + paper_markdown(sw))
    return md, made, skipped
