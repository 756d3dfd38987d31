"""Sweep report, the traveling wave (issue #48): does the budget move with the frontier, or stay put?
``wave_frontier.png``, ``wave_heatmap.png`` and ``wave.md``, from the per-step per-bin tables of
gdro/report/paper_figures.py (the data share q_t(b) and the budget share s_t(b) of Fig. 7, defined there) and the
share of each bin's groups that are *mixed* (rewards not all equal, so GRPO's advantage is not zero),
``difficulty/informative/<bin>``, i_t(b). Per run and training step t:

- **mixed share** m_t(b) = q_t(b) i_t(b): the share of the step's groups that are mixed and in bin b;
- **frontier bin** f_t = argmax_b m_t(b) over the pass-rate bins: the bin with the most mixed groups (ties: the
  lowest index, the hardest); undefined at a step with no mixed group in a pass bin. The ``unseen`` bin
  (``classifier.unseen=separate``) is no pass bin and never the frontier;
- **mean bin index** Σ_b b q_t(b) (paper_figures.mean_bin: ``difficulty/batch_mean_bin`` as logged) and its
  budget-weighted twin Σ_b b s_t(b), each over the pass bins;
- **excess** e_t(b) = s_t(b) − q_t(b), the heatmap (a difference below ``TOL`` is the float residue of s = q and
  counts as 0: GRPO, or any method giving every prompt the same n, has e ≡ 0, drawn white, not blank);
- **excess bin** x_t = argmax_b e_t(b) over the pass bins (ties: the lowest), defined where that maximum is > 0
  (some pass bin gets more than its data share of the rollouts).

**The statistic** (``wave.md``), per run over T, its steps after the unseen phase (as
:meth:`SweepRun.after_first_pass`) at which f_t is defined:

- **hit rate** H = the share of T with x_t defined and |x_t − f_t| ≤ 1 (``NEAR``): the budget's peak within one
  bin of the frontier (a step where no bin gets extra budget is a miss);
- **stay-put rate** S = max over the pass bins c of the share of T with |c − f_t| ≤ 1: the hit rate of the best
  budget that stays in one bin, chosen in hindsight.

A method's budget **follows the frontier** when its mean H over runs exceeds its mean S: only a budget that moves
with the frontier can beat every budget that stays put. Why this and not a correlation over steps: a correlation is
undefined where a series is constant (GRPO's zero excess, a frontier that does not move) and is high for a budget
that moves the right way far from the frontier; H and S are defined for every run, exact (shares of integer
steps), and S says at once whether the frontier moved at all (S = 1: a fixed bin was always within one of it, and
"follows" cannot be told from "stays put"). Per method the curves and the heatmap are the mean over seeds (± 1 s.d.
for the curves); H and S are each run's, mean ± s.d. over runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gdro.common.ioerrors import atomic_write_text
from gdro.report.names import display_name
from gdro.report.paired import first_last_quarter
from gdro.report.paper_figures import (
    INFO_KEY,
    SHARE_KEYS,
    Sweep,
    Tables,
    collect,
    format_mean_sd,
    mean_bin,
    pass_index,
    pooled,
)
from gdro.report.plotting import method_colors, plot_band, pool_by_step, save_figure
from gdro.report.runs import SweepRun, ordered_groups

TOL = 1e-9  # |s − q| below this is the float residue of s = q, counted and drawn as 0
NEAR = 1  # a hit: the budget's peak within this many bins of the frontier
FILES = ("wave_frontier.png", "wave_heatmap.png", "wave.md")


def _pass(t: Tables) -> tuple[np.ndarray, np.ndarray]:
    """The pass-rate bins' columns of ``t`` (in index order: paper_figures sorts them so) and their indices."""
    cols = np.asarray([j for j, b in enumerate(t.bins) if pass_index(b) is not None], dtype=int)
    return cols, np.asarray([pass_index(t.bins[j]) for j in cols], dtype=float)


def _peak(m: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per row of ``m`` (steps × pass bins), the index of its largest entry (the first of a tie), NaN where no entry
    is > 0."""
    m = np.where(np.isfinite(m), m, -np.inf)
    if not m.shape[1]:
        return np.full(len(m), np.nan)
    return np.where(m.max(axis=1) > 0, idx[np.argmax(m, axis=1)], np.nan)


def frontier(t: Tables) -> np.ndarray:
    """f_t per step: the pass bin with the most mixed groups (NaN: none mixed, or the run logs no INFO_KEY)."""
    cols, idx = _pass(t)
    return _peak(t.mix[:, cols], idx)


def excess(t: Tables) -> np.ndarray:
    """e_t(b) = s_t(b) − q_t(b), steps × bins (NaN where the bin's share is not logged; |e| < TOL is 0)."""
    with np.errstate(invalid="ignore"):
        e = t.budget() - t.q
    return np.where(np.abs(e) < TOL, 0.0, e)


def excess_bin(t: Tables) -> np.ndarray:
    """x_t per step: the pass bin whose budget share most exceeds its data share (NaN: none exceeds it)."""
    cols, idx = _pass(t)
    return _peak(excess(t)[:, cols], idx)


def after_unseen(t: Tables) -> np.ndarray:
    """The steps after the unseen phase, as :meth:`SweepRun.after_first_pass` takes them: after the first pass over
    the pool, or (no pool size in the config) from the first step whose batch holds no never-seen prompt."""
    epoch = t.run.first_epoch()
    if epoch is not None:
        return t.steps > epoch
    j = t.col("unseen")
    clear = np.ones(len(t.steps), bool) if j is None else ~(np.nan_to_num(t.q[:, j]) > 0)
    return np.cumsum(clear) > 0


def run_wave(t: Tables) -> dict | None:
    """One run's statistic: ``steps`` (|T|), ``hit`` (H), ``stay`` (S), ``excess_steps`` (steps of T with some bin
    over its data share), ``frontier`` (f's mean over the first and the last quarter of T, None under 4 steps);
    None when T is empty."""
    f, x = frontier(t), excess_bin(t)
    keep = after_unseen(t) & np.isfinite(f)
    if not keep.any():
        return None
    f, x = f[keep], x[keep]
    hit = np.isfinite(x) & (np.abs(np.nan_to_num(x) - f) <= NEAR)
    stay = max(float(np.mean(np.abs(c - f) <= NEAR)) for c in _pass(t)[1])
    return {"steps": int(keep.sum()), "hit": float(hit.mean()), "stay": stay,
            "excess_steps": int(np.isfinite(x).sum()), "frontier": first_last_quarter(list(f))}


def verdict(waves: list[dict]) -> str:
    """Whether the method's budget follows the frontier (module docstring), from its runs' statistics."""
    hit, stay = np.mean([w["hit"] for w in waves]), np.mean([w["stay"] for w in waves])
    if not any(w["excess_steps"] for w in waves):
        return "no: budget share = data share at every step (no bin gets extra rollouts)"
    if stay >= 1.0:
        return "cannot tell: the frontier never left the reach of one fixed bin (S = 100%)"
    return "yes: H > S" if hit > stay else "no: H ≤ S (a budget that stayed put would do as well)"


def wave_markdown(sw: Sweep) -> str:
    """wave.md's table: per method with a frontier, its runs' statistic and the verdict."""
    lines = [(f"Does the budget follow the frontier? (gdro/report/wave.py gives every definition.) Frontier bin f_t: "
              f"the pass-rate bin with the most mixed groups ({INFO_KEY}<bin> × its data share). Excess bin x_t: the "
              f"pass bin whose budget share most exceeds its data share. Over each run's steps after the unseen phase "
              f"with a frontier: hit rate H = share of steps with |x_t − f_t| ≤ {NEAR}; stay-put rate S = the best "
              f"share any one fixed bin c reaches (|c − f_t| ≤ {NEAR}). The budget follows the frontier when mean H > "
              f"mean S over the method's runs: only a budget that moves with the frontier beats every budget that "
              f"stays put. Mean ± s.d. over runs."), "",
             ("| Method | runs | steps | frontier bin, first → last quarter | steps with excess (%) | hit rate H (%) "
              "| stay-put S (%) | follows the frontier? |"), "|---|---:|---:|---|---:|---:|---:|---|"]
    missing = []
    for m, ts in sw.groups.items():
        if not any(np.isfinite(frontier(t)).any() for t in ts):
            missing.append(display_name(m))
            continue
        waves = [w for t in ts if (w := run_wave(t)) is not None]
        if not waves:
            lines.append(f"| {display_name(m)} | 0 | 0 | – | – | – | – | – (no step after the unseen phase) |")
            continue
        quarters = [w["frontier"] for w in waves if w["frontier"] is not None]
        move = (f"{np.mean([a for a, _ in quarters]):.2f} → {np.mean([b for _, b in quarters]):.2f}"
                if quarters else "–")
        lines.append(f"| {display_name(m)} | {len(waves)} | {format_mean_sd([w['steps'] for w in waves], 1)} | "
                     f"{move} | {format_mean_sd([w['excess_steps'] / w['steps'] for w in waves], 1, True)} | "
                     f"{format_mean_sd([w['hit'] for w in waves], 1, True)} | "
                     f"{format_mean_sd([w['stay'] for w in waves], 1, True)} | {verdict(waves)} |")
    if missing:
        lines += ["", f"No {INFO_KEY}<bin> in the logs (no frontier): {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def _rows(sw: Sweep, values: np.ndarray) -> np.ndarray:
    """Pass-bin indices (NaN allowed) as heatmap rows: the row of bin b is its position in ``sw.bins``."""
    idx = [(pass_index(b), i) for i, b in enumerate(sw.bins) if pass_index(b) is not None]
    return np.interp(values, [a for a, _ in idx], [i for _, i in idx])


def _seeds(sw: Sweep, method: str) -> str:
    n = len(sw.groups[method])
    return f"mean over {n} seed{'s' if n != 1 else ''}"


def fig_frontier(sw: Sweep, colors, path) -> bool:
    """Per method (rows): the mean bin index (data-weighted, solid; budget-weighted, dashed) and the frontier bin
    (black, as over the heatmap)."""
    import matplotlib.pyplot as plt

    methods = [m for m, ts in sw.groups.items() if any(np.isfinite(frontier(t)).any() for t in ts)]
    if not methods:
        return False
    fig, axes = plt.subplots(len(methods), 1, figsize=(9, 0.6 + 2.4 * len(methods)), squeeze=False, sharex=True)
    for ax, m in zip(axes[:, 0], methods):
        plot_band(ax, sw.series(m, mean_bin), colors[m], "mean bin (data share)")
        plot_band(ax, sw.series(m, lambda t: mean_bin(t, budget=True)), colors[m], "mean bin (budget share)", "--", False)
        plot_band(ax, sw.series(m, frontier), "k", "frontier bin (most mixed groups)")
        same = "" if m in sw.allocating() else " (budget = data share: no allocator)"
        ax.set(ylabel="bin (0 = hardest)", title=f"{display_name(m)}{same}: {_seeds(sw, m)}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("step")
    return save_figure(fig, path)


def heat(ts: list[Tables]) -> tuple[np.ndarray, np.ndarray]:
    """The heatmap of a method: steps and the (bins × steps) mean over its seeds of e_t(b)."""
    steps, e = pooled(ts, excess)
    return steps, e.T


def fig_heatmap(sw: Sweep, path) -> bool:
    """Per method (rows): bins × steps of budget share − data share, a diverging scale centred at 0, one for all
    methods; the frontier bin (mean over seeds, solid) and the mean bin index (dashed) drawn over it."""
    import matplotlib.pyplot as plt

    if not sw.groups:
        return False
    maps = {m: heat(ts) for m, ts in sw.groups.items()}
    v = max((float(np.nanmax(np.abs(e))) for _, e in maps.values() if np.isfinite(e).any()), default=0.0) or 0.05
    fig, axes = plt.subplots(len(maps), 1, figsize=(10, 0.6 + (0.8 + 0.25 * len(sw.bins)) * len(maps)),
                             squeeze=False, sharex=True, sharey=True)  # the same rows (sw.bins) and steps in each
    for ax, (m, (steps, e)) in zip(axes[:, 0], maps.items()):
        extent = (steps[0] - 0.5, steps[-1] + 0.5, len(sw.bins) - 0.5, -0.5)
        im = ax.imshow(np.ma.masked_invalid(e), aspect="auto", interpolation="nearest", cmap="RdBu_r", vmin=-v,
                       vmax=v, extent=extent)
        for fn, style, label in ((frontier, "-", "frontier bin"), (mean_bin, "--", "mean bin (data)")):
            s, mean, _ = pool_by_step(sw.series(m, fn))
            if len(s):
                ax.plot(s, _rows(sw, mean), color="k", ls=style, lw=1.2, label=label)
        ax.set_yticks(range(len(sw.bins)))
        ax.set_yticklabels(sw.bins, fontsize=7)
        ax.set_ylabel("bin (0 = hardest)")
        same = "" if m in sw.allocating() else " (0: no allocator, budget = data share)"
        ax.set_title(f"{display_name(m)}: budget share − data share{same}, {_seeds(sw, m)}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
        fig.colorbar(im, ax=ax, pad=0.01)
    span = (min(st[0] for st, _ in maps.values()) - 0.5, max(st[-1] for st, _ in maps.values()) + 0.5)
    axes[-1, 0].set(xlabel="step", xlim=span)
    return save_figure(fig, path)


def write_wave(runs: list[SweepRun], out_dir: str | Path, figures: bool = True) -> tuple[list[Path], list[str]]:
    """``wave_frontier.png``, ``wave_heatmap.png`` and ``wave.md`` in ``out_dir`` (``figures`` False: wave.md
    alone): (the files written, one line per file skipped, saying why)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sw = collect(runs)
    no_share = f"no run logs {' / '.join(SHARE_KEYS)}<bin>"
    no_info = no_share if not sw.groups else f"no run logs {INFO_KEY}<bin> (no frontier)"
    made, skipped = [], []
    jobs = []
    if figures:
        import matplotlib

        matplotlib.use("Agg")
        jobs = [("wave_frontier.png", lambda p: fig_frontier(sw, method_colors(list(ordered_groups(runs))), p),
                 no_info), ("wave_heatmap.png", lambda p: fig_heatmap(sw, p), no_share)]
    for name, job, why in jobs:
        if job(out_dir / name):
            made.append(out_dir / name)
        else:
            skipped.append(f"skipped {name}: {why}")
    if any(np.isfinite(frontier(t)).any() for ts in sw.groups.values() for t in ts):
        atomic_write_text(out_dir / "wave.md", "# The traveling wave (issue #48)\n\n" + wave_markdown(sw))
        made.append(out_dir / "wave.md")
    else:
        skipped.append(f"skipped wave.md: {no_info}")
    return made, skipped
