"""Sweep report, the paper's mechanism figures (paper §5.2 / §7.4, Figs. 4 and 6–9) from the logs of any sweep:
``paper_mechanism.md`` and ``wse_ratio.png``, ``budget_vs_data_<method>.png``, ``budget_snapshots.png``,
``macro_dynamics.png``, ``lead_lag.png`` (the plots: gdro/report/paper_plots.py).

The per-step per-bin tables every run logs (GRPO included) are its batch's **data share** q_t(b)
(``difficulty/batch/<bin>``, else Prompt-GDRO's ``gdro/share/<bin>``) and its **rollouts per prompt** n_b(t)
(``compute/rollouts_per_prompt/<bin>``, every generated group; else an allocator's ``gdro/rollouts/<bin>``; a run
with neither key is taken at n_b ≡ n̄: budget share = data share, WSE ratio 1), and where logged the share of the
bin's groups that are mixed (``difficulty/informative/<bin>``: the frontier of gdro/report/wave.py). From them:

- **budget share** s_t(b) = q_t(b) n_b(t) / Σ_b' q_t(b') n_b'(t) (a bin in the batch without generated rollouts,
  e.g. skipped, gets 0);
- **WSE ratio**, named ``WSE (Eq. 33, the paper's)`` in every output (gdro/report/terms.py; Fig. 6 right): WSE(t) = Σ_b q_t(b) σ̂_b / √n_b(t) over WSE with n_b ≡ n̄(t) = Σ_b q_t(b)
  n_b(t), the step's mean rollouts per prompt. σ̂_b is *offline*, one value per bin for the whole sweep: σ̂_b =
  √(p̄_b(1 − p̄_b)), p̄_b the per-rollout success rate of bin b pooled over every step of every run of the sweep that
  logs a per-bin accuracy (``gdro/passrate/<bin>``: Prompt-GDRO's realised accuracy of the bin's rollouts), each
  step weighted by the bin's share of that batch. Pooled over the sweep, not per run, so that every method is
  measured against one σ̂ profile (the ratio depends on σ̂'s profile over bins only, not on its scale), and once, as
  the paper's "estimated once from the training logs". No run but Prompt-GDRO logs a per-bin accuracy; a bin no run
  logs it for takes the midpoint m of its pass-rate interval from the classifier's edges (run.json; the classifier's
  ``unseen_p`` for the unseen bin), turned into the per-rollout rate p = 1 − (1 − m)^(1/k) whose pass@k is m (k the
  classifier's ``k`` for ``unbiased_passk``, n̄ for the released code's any-of-n ``any_correct``; p = m for pass@1). ``paper_mechanism.md`` lists σ̂_b and its source per bin. The per-step ``difficulty/wse_ratio`` the
  runs log (the batch's own σ_b of that step, ``wse_ratio_batch.png``, mechanism.md), named ``WSE (batch σ)``, is
  *not* Eq. 33; each markdown names the other and says why they differ;
- **mean bin index** (Figs. 4, 8) Σ_b b q_t(b) over the pass-rate bins, renormalised over them (the ``unseen`` bin of
  ``classifier.unseen=separate`` is no pass bin and is left out; with ``unseen=hardest`` unseen prompts are in bin 0,
  as in the paper); **mass**: the batch's share in bins ≥ 3 (``MASS_BIN``) and in the high bins (of the whole batch,
  unseen prompts in the denominator); **high-bin budget share**: Σ_{b high} s_t(b). The **high bins** are one rule
  for every output (gdro/report/terms.py: pass-rate lower edge ≥ ``HIGH_EDGE`` = 0.5, accbin_5+ of the paper's ten
  bins), stated where used: the paper's Figs. 4 and 8 draw bins ≥ 8 there, we draw the high bins of its Fig. 9;
- **snapshots** (Figs. 7, 9) at Start / Early / Mid / Late (``SNAPSHOTS``: fractions of the logged training steps),
  per method pooled over seeds: data and budget share per bin (the unseen bin is a bar of its own), and in the
  markdown the high bins' budget share against their data share (the paper: "> 80% of the budget to accbin_5+, which hold < 20% of the data");
- **lead–lag Δμ** (Eq. 32, Fig. 6 left): ``gdro/lead_lag`` as logged by Prompt-GDRO, μ_weight − μ_data with
  μ_weight = Σ_b b ŵ_t(b) (the normalised weights) and μ_data = Σ_b b q_t(b) over the pass-rate bins, each
  renormalised over them: Eq. 32 as written; it differs only in leaving the unseen bin out (unseen=separate).

Per method the curves are mean ± 1 s.d. over seeds; a bin a method never logs is NaN (blank), not 0. A figure whose
keys no run logs is skipped with a one-line note in the markdown.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from gdro.report.names import bin_sort_key, display_name
from gdro.report.runs import SweepRun, ordered_groups
from gdro.report.terms import HIGH_EDGE, WSE_PAPER, WSE_PAPER_NOTE, high_bins, high_rule

SNAPSHOTS = (("Start", 0.0), ("Early", 1 / 3), ("Mid", 2 / 3), ("Late", 1.0))
MASS_BIN = 3  # Fig. 4's solid line: the batch's share in bins >= 3 (dashed: the high bins, gdro/report/terms.py)
SHARE_KEYS = ("difficulty/batch/", "gdro/share/")
ROLLOUT_KEYS = ("compute/rollouts_per_prompt/", "gdro/rollouts/")
ACC_KEY = "gdro/passrate/"
INFO_KEY = "difficulty/informative/"  # the share of the bin's groups that are mixed (rewards not all equal)


def pass_index(label: str) -> int | None:
    """The pass-rate bin's index (0 = hardest), None for a label that is no pass bin (``unseen``)."""
    try:
        f = float(label)
    except ValueError:
        return None
    return int(f) if f.is_integer() and f >= 0 else None


@dataclass
class Tables:
    """One run's per-step per-bin tables: rows its training steps, columns ``bins`` (NaN where not logged)."""

    run: SweepRun
    steps: np.ndarray
    bins: list[str]
    q: np.ndarray  # data share
    n: np.ndarray  # rollouts per prompt (NaN: no group of the bin generated, or not logged)
    acc: np.ndarray  # the bin's realised per-rollout accuracy (NaN where not logged)
    uniform: bool  # no rollouts-per-prompt key: n_b = n̄ assumed
    mix: np.ndarray  # the share of the step's groups that are mixed and in the bin: q · INFO_KEY (NaN: not logged)

    def budget(self) -> np.ndarray:
        qn = self.q * np.nan_to_num(self.n, nan=0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return qn / np.nansum(qn, axis=1, keepdims=True)

    def col(self, b: str) -> int | None:
        return self.bins.index(b) if b in self.bins else None


def _matrix(rows: list[dict], prefix: str | None, bins: list[str]) -> np.ndarray:
    out = np.full((len(rows), len(bins)), np.nan)
    if prefix is None:
        return out
    for i, r in enumerate(rows):
        for j, b in enumerate(bins):
            v = r.get(prefix + b)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[i, j] = v
    return out


def tables(run: SweepRun) -> Tables | None:
    """The run's tables over every bin it logs a share for; None without a data-share key."""
    share = next((p for p in SHARE_KEYS if run.has(p)), None)
    if share is None:
        return None
    rows = [r for r in run.rows if isinstance(r.get("step"), int) and any(k.startswith(share) for k in r)]
    bins = sorted({k[len(share):] for r in rows for k in r if k.startswith(share)}, key=bin_sort_key)
    roll = next((p for p in ROLLOUT_KEYS if run.has(p)), None)
    q = _matrix(rows, share, bins)
    n = _matrix(rows, roll, bins) if roll else np.where(q > 0, 1.0, np.nan)
    return Tables(run, np.asarray([r["step"] for r in rows], dtype=float), bins, q, n,
                  _matrix(rows, ACC_KEY if run.has(ACC_KEY) else None, bins), roll is None,
                  q * _matrix(rows, INFO_KEY if run.has(INFO_KEY) else None, bins))


def _over_bins(t: Tables, bins: list[str]) -> Tables:
    """``t`` with its columns over ``bins`` (NaN for a bin it does not log)."""
    cols = [t.col(b) for b in bins]

    def spread(m: np.ndarray) -> np.ndarray:
        return np.stack([m[:, j] if j is not None else np.full(len(m), np.nan) for j in cols], axis=1)

    return Tables(t.run, t.steps, bins, spread(t.q), spread(t.n), spread(t.acc), t.uniform, spread(t.mix))


def _full_edges(config: dict, n_pass: int) -> np.ndarray:
    cls = config.get("classifier") if isinstance(config.get("classifier"), dict) else {}
    edges, num = cls.get("edges"), cls.get("num_bins")
    if isinstance(edges, list) and edges:
        return np.asarray([0.0, *map(float, edges), 1.0])
    return np.linspace(0.0, 1.0, (num if isinstance(num, int) and num > 0 else n_pass) + 1)


def bin_edges(config: dict, bins: list[str]) -> dict[str, tuple[float, float]]:
    """Each pass bin's pass-rate interval [lower, upper) from the classifier config (equal width over the bins
    logged when the config has none); the unseen bin gets (unseen_p, unseen_p)."""
    n_pass = max((i + 1 for b in bins if (i := pass_index(b)) is not None), default=0)
    full = _full_edges(config, n_pass)
    cls = config.get("classifier") if isinstance(config.get("classifier"), dict) else {}
    unseen_p = float(cls.get("unseen_p", 0.5))
    out = {}
    for b in bins:
        i = pass_index(b)
        out[b] = (float(full[i]), float(full[i + 1])) if i is not None and i + 1 < len(full) else (unseen_p, unseen_p)
    return out


def sigma_hat(all_tables: list[Tables], bins: list[str]) -> dict[str, tuple[float, str]]:
    """σ̂_b = √(p̄_b(1 − p̄_b)), one per bin for the sweep, and its source (see the module docstring)."""
    num, den = np.zeros(len(bins)), np.zeros(len(bins))
    for t in all_tables:
        idx = [bins.index(b) for b in t.bins]
        ok = np.isfinite(t.acc) & np.isfinite(t.q) & (t.q > 0)
        np.add.at(num, idx, np.where(ok, t.acc * t.q, 0.0).sum(axis=0))
        np.add.at(den, idx, np.where(ok, t.q, 0.0).sum(axis=0))
    edges = bin_edges(all_tables[0].run.config if all_tables else {}, bins)
    out = {}
    for j, b in enumerate(bins):
        if den[j] > 0:
            p, src = num[j] / den[j], f"{ACC_KEY}{b}, pooled"
        elif pass_index(b) is None:
            p, src = edges[b][0], "unseen_p"
        else:
            k = _pass_k(all_tables[0].run.config if all_tables else {})
            p = 1 - (1 - sum(edges[b]) / 2) ** (1 / k)  # the per-rollout rate whose pass@k is the bin's midpoint
            src = "midpoint of its pass-rate interval" + (f", as a per-rollout rate (pass@{k})" if k > 1 else "")
        out[b] = (math.sqrt(max(p * (1 - p), 0.0)), src)
    return out


def _pass_k(config: dict) -> int:
    """The k of the classifier's pass-rate: ``k`` for ``unbiased_passk``, n̄ for ``any_correct`` (any of a visit's
    rollouts, the released code's pass@n), 1 when the config does not say."""
    cls = config.get("classifier") if isinstance(config.get("classifier"), dict) else {}
    if cls.get("estimator") == "unbiased_passk":
        return max(int(cls.get("k", 1)), 1)
    if cls.get("estimator") == "any_correct":
        return max(int(config.get("rollouts_per_prompt", 1)), 1)
    return 1


def wse_ratio(t: Tables, sigma: dict[str, tuple[float, str]]) -> np.ndarray:
    """Eq. 33 per step: Σ_b q σ̂_b / √n_b over Σ_b q σ̂_b / √n̄ (bins with q > 0, n_b > 0 and a σ̂_b)."""
    s = np.asarray([sigma.get(b, (math.nan, ""))[0] for b in t.bins])
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (t.q > 0) & (t.n > 0) & np.isfinite(s)
        q, n = np.where(ok, t.q, 0.0), np.where(ok, t.n, 1.0)
        nbar = (q * n).sum(axis=1) / q.sum(axis=1)
        num = (q * np.nan_to_num(s) / np.sqrt(n)).sum(axis=1)
        den = (q * np.nan_to_num(s)).sum(axis=1) / np.sqrt(nbar)
        return np.where(den > 0, num / den, np.nan)


def _pass_cols(t: Tables, at_least: int = 0) -> np.ndarray:
    return np.asarray([(i := pass_index(b)) is not None and i >= at_least for b in t.bins], dtype=bool)


def mean_bin(t: Tables, budget: bool = False) -> np.ndarray:
    """Σ_b b q_t(b) / Σ_b q_t(b) over the pass-rate bins (the unseen bin left out); with ``budget`` the same over the
    budget share s_t(b)."""
    cols = _pass_cols(t)
    idx = np.asarray([pass_index(b) for b in np.asarray(t.bins)[cols]], dtype=float)
    q = np.nan_to_num((t.budget() if budget else t.q)[:, cols])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(q.sum(axis=1) > 0, q @ idx / q.sum(axis=1), np.nan)


def mass_at_least(t: Tables, k: int, budget: bool = False) -> np.ndarray:
    """The share of the batch (or of its budget) in pass bins ≥ k, of the whole batch (unseen in the total)."""
    return _mass(t, _pass_cols(t, k), budget)


def mass_in(t: Tables, bins: list[str], budget: bool = False) -> np.ndarray:
    """The share of the batch (or of its budget) in the bins ``bins`` (labels; e.g. the high bins), of the whole
    batch (unseen in the total)."""
    return _mass(t, np.isin(np.asarray(t.bins), list(bins)), budget)


def _mass(t: Tables, cols: np.ndarray, budget: bool) -> np.ndarray:
    m = t.budget() if budget else t.q
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nansum(m[:, cols], axis=1) / np.nansum(m, axis=1)


def pooled(ts: list[Tables], which) -> tuple[np.ndarray, np.ndarray]:
    """Steps and the (steps × bins) mean over seeds of ``which`` (``q``, ``n``, ``budget``, or a function of a
    run's tables giving its steps × bins matrix); NaN where no seed logs the bin at the step."""
    steps = np.asarray(sorted({s for t in ts for s in t.steps}))
    stack = np.full((len(ts), len(steps), len(ts[0].bins)), np.nan)
    for i, t in enumerate(ts):
        stack[i, np.searchsorted(steps, t.steps)] = (which(t) if callable(which) else t.budget()
                                                     if which == "budget" else getattr(t, which))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices stay NaN
        return steps, np.nanmean(stack, axis=0)


def snapshot_steps(steps: np.ndarray) -> list[tuple[str, float]]:
    """The logged step nearest to each of ``SNAPSHOTS``' fractions of the horizon."""
    first, last = steps[0], steps[-1]
    return [(name, float(steps[np.argmin(np.abs(steps - (first + f * (last - first))))])) for name, f in SNAPSHOTS]


@dataclass
class Sweep:
    """What the figures and the markdown read: per method its runs' tables over the sweep's bins, σ̂, notes."""

    groups: dict[str, list[Tables]]
    bins: list[str]
    sigma: dict[str, tuple[float, str]]
    edges: dict[str, tuple[float, float]]
    notes: list[str]

    def high_bins(self, edge: float = HIGH_EDGE) -> list[str]:
        """The high bins of the sweep (gdro/report/terms.py's one rule)."""
        return high_bins(self.bins, self.edges, edge)

    def high_rule(self, edge: float = HIGH_EDGE) -> str:
        return high_rule(self.high_bins(edge), edge)

    def series(self, method: str, fn) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(t.steps, fn(t)) for t in self.groups[method]]

    def allocating(self) -> list[str]:
        """The methods that give some bins more rollouts per prompt than others at some step (Figs. 7 and 9 are
        theirs: elsewhere the budget share is the data share, shown by bin_share_heatmap.png)."""
        def varies(t: Tables) -> bool:
            n = np.where(t.q > 0, t.n, np.nan)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return bool(np.nanmax(n - np.nanmin(n, axis=1, keepdims=True), initial=0.0) > 1e-9)

        return [m for m, ts in self.groups.items() if any(varies(t) for t in ts)]


def collect(runs: list[SweepRun]) -> Sweep:
    """The sweep's tables (every run with a data-share key), pooled σ̂ and the notes on what is missing."""
    raw = {m: [t for r in rs if (t := tables(r)) is not None] for m, rs in ordered_groups(runs).items()}
    bins = sorted({b for ts in raw.values() for t in ts for b in t.bins}, key=bin_sort_key)
    groups = {m: [_over_bins(t, bins) for t in ts] for m, ts in raw.items() if ts}
    flat = [t for ts in groups.values() for t in ts]
    notes = [f"{display_name(m)}: no {' / '.join(SHARE_KEYS)}<bin> in its logs; left out" for m, ts in raw.items()
             if not ts]
    notes += [f"{display_name(m)}: no {' / '.join(ROLLOUT_KEYS)}<bin>: n_b = n̄ assumed (budget share = data share)"
              for m, ts in groups.items() if all(t.uniform for t in ts)]
    edges = bin_edges(flat[0].run.config if flat else {}, bins)
    return Sweep(groups, bins, sigma_hat(flat, bins) if flat else {}, edges, notes)


def format_mean_sd(vals: list[float], digits: int = 3, pct: bool = False) -> str:
    """``"mean ± s.d."`` of the finite ``vals`` (× 100 with ``pct``; s.d. 0 for one value, "–" for none): a cell of
    paper_mechanism.md and wave.md."""
    v = [x * (100 if pct else 1) for x in vals if math.isfinite(x)]
    if not v:
        return "–"
    sd = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
    return f"{np.mean(v):.{digits}f} ± {sd:.{digits}f}"


def wse_rows(sw: Sweep) -> list[tuple[str, int, list[float]]]:
    """Per method: its runs' horizon means of the WSE ratio (every logged training step)."""
    out = []
    for m, ts in sw.groups.items():
        means = [float(np.nanmean(r)) if np.isfinite(r := wse_ratio(t, sw.sigma)).any() else math.nan for t in ts]
        out.append((m, len(ts), means))
    return out


def snapshot_rows(sw: Sweep, method: str, edge: float = HIGH_EDGE) -> list[tuple[str, float, float, float]]:
    """(snapshot, step, data share, budget share) of the high bins, pooled over the method's seeds."""
    cols = [sw.bins.index(b) for b in sw.high_bins(edge)]
    steps, q = pooled(sw.groups[method], "q")
    _, s = pooled(sw.groups[method], "budget")
    out = []
    for name, step in snapshot_steps(steps):
        i = int(np.searchsorted(steps, step))
        out.append((name, step, float(np.nansum(q[i, cols])), float(np.nansum(s[i, cols]))))
    return out


def paper_markdown(sw: Sweep, edge: float = HIGH_EDGE) -> str:
    """σ̂ per bin, the WSE ratio's horizon mean per method and the high bins' budget vs data share at snapshots."""
    lines = [f"## {WSE_PAPER} ÷ uniform, the weighted-SE proxy (`wse_ratio.png`)", "",
             "σ̂_b, once for the sweep (gdro/report/paper_figures.py):", "",
             "| bin | σ̂_b | source |", "|---|---:|---|"]
    lines += [f"| {b} | {sw.sigma[b][0]:.3f} | {sw.sigma[b][1]} |" for b in sw.bins]
    lines += ["", "WSE(t) ÷ WSE at n_b ≡ n̄(t), each run's mean over its training steps; mean ± s.d. over runs:", "",
              f"| Method | runs | {WSE_PAPER} ÷ uniform | reduction vs uniform (%) |", "|---|---:|---:|---:|"]
    for m, n, means in wse_rows(sw):
        lines.append(f"| {display_name(m)} | {n} | {format_mean_sd(means)} | "
                     f"{format_mean_sd([1 - x for x in means], 1, True)} |")
    lines += ["", WSE_PAPER_NOTE]
    rule = sw.high_rule(edge)
    lines += ["", "## Budget share against data share (Figs. 7, 9; `budget_snapshots.png`)", "",
              (f"{rule[0].upper()}{rule[1:]}, the same rule as `macro_dynamics.png`; shares of the whole "
               "batch (unseen prompts in the total), mean over seeds at the snapshot step:"), "",
              "| Method | snapshot | step | data share (%) | budget share (%) | budget ÷ data |",
              "|---|---|---:|---:|---:|---:|"]
    for m in sw.allocating():
        for name, step, q, s in snapshot_rows(sw, m, edge):
            ratio = f"{s / q:.2f}" if q > 0 else "–"
            lines.append(f"| {display_name(m)} | {name} | {step:g} | {100 * q:.1f} | {100 * s:.1f} | {ratio} |")
    same = [display_name(m) for m in sw.groups if m not in sw.allocating()]
    if same:
        lines += ["", (f"Budget share = data share at every step (the same rollouts per prompt in every bin): "
                       f"{', '.join(same)}; no budget figures for them.")]
    if sw.notes:
        lines += ["", "Notes:", "", *[f"- {x}" for x in sw.notes]]
    return "\n".join(lines) + "\n"

