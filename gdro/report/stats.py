"""Statistics of gdro-report, from the field's libraries (scipy, statsmodels, rliable); no hand-written tables.

- **Interval over seeds** (:func:`mean_ci`): mean ± t_{(1+level)/2, n−1} · s / √n, the quantile from
  ``scipy.stats.t.ppf`` (Student t; s the sample standard deviation).
- **Paired test** (:func:`paired_test`): the per-seed differences of a method minus GRPO, with the two-sided
  one-sample t-test of mean 0 (``scipy.stats.ttest_1samp``), the dual of the interval above: the level-(1 − a)
  interval excludes 0 exactly when p < a.
- **Holm over a family** (:func:`holm`): the family is the comparisons of one table column (every non-GRPO method
  with ≥ 2 pairs and a defined p-value; the others are left out and shown as '–'). Adjusted p-values and decisions
  at ``alpha`` are ``statsmodels.stats.multitest.multipletests(method="holm")``'s. Each comparison also gets a
  *Holm-consistent* confidence interval: sort the m unadjusted p-values ascending and let r be the number Holm
  rejects; the i-th (1-based) gets the interval at level 1 − alpha/(m − i + 1) when i ≤ r, else at level
  1 − alpha/(m − r). Then its interval excludes 0 exactly when Holm rejects it: for i ≤ r, p_(i) ≤ alpha/(m − i + 1)
  (Holm's step-down condition); for i > r, p_(i) ≥ p_(r+1) > alpha/(m − r). Tied p-values never straddle r (a tie
  p_(r) = p_(r+1) would have p_(r+1) ≤ alpha/(m − r + 1) < alpha/(m − r)), so the order within ties is immaterial
  to the decisions.
- **rliable** (Agarwal et al., 2021, "Deep RL at the edge of the statistical precipice"): the interquartile mean
  (``metrics.aggregate_iqm``) with its stratified-bootstrap 95% CI (``library.get_interval_estimates``, percentile
  method) per method, and the probability of improvement P(X > Y) (``metrics.probability_of_improvement``: the
  Mann–Whitney U statistic ÷ n_x n_y, ties counting ½) with its bootstrap CI (each score array resampled on its
  own). Scores are shaped (runs × tasks) with one task: the endpoint. Deterministic: ``reps`` = :data:`BOOT_REPS`
  bootstrap replications from seed :data:`BOOT_SEED`, one call per method, so a method's interval does not depend
  on which other methods the report holds. rliable 1.2's bootstrap draws its indices from numpy's *global* RNG
  (``np.random.choice`` in ``StratifiedBootstrap.update_indices``) and not from the ``random_state`` it is given,
  so each call also seeds the global RNG with the same seed and restores its previous state afterwards.
  The bootstrap calls the statistic once per replication; rliable's two statistics each go through a scipy function
  (``trim_mean``, ``mannwhitneyu``) whose argument handling costs ~0.3 and ~1.5 ms a call, most of a report's time.
  :func:`rliable_iqm` and :func:`rliable_improvement` compute the same numbers (scipy's partition and mean; the
  Mann–Whitney count) without that overhead, equal to rliable's to the bit (tests/test_report_stats.py, on random
  and tied scores); the bootstrap and its intervals stay rliable's.
"""

from __future__ import annotations

import contextlib
import gc
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

ALPHA = 0.05  # the family-wise error rate of the Holm tables
BOOT_SEED = 0  # the bootstrap's seed (rliable's random_state and numpy's global RNG during the call)
BOOT_REPS = 2000  # bootstrap replications of each rliable interval


def t_quantile(df: int, level: float = 0.95) -> float:
    """t_{(1+level)/2, df}, the two-sided ``level`` quantile of Student's t (scipy.stats.t.ppf)."""
    from scipy import stats

    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    return float(stats.t.ppf((1.0 + level) / 2.0, df))


def t975(df: int) -> float:
    """t_{0.975, df}: the two-sided 95% quantile (:func:`t_quantile`)."""
    return t_quantile(df, 0.95)


def finite(values: Sequence[float | None]) -> np.ndarray:
    """``values`` without None and non-finite entries, as a float array."""
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def mean_ci(values: Sequence[float | None], level: float = 0.95) -> tuple[float, float, int]:
    """(mean, half-width of the Student-t ``level`` interval, n) over the finite values; the half-width is NaN
    when n < 2 (and the mean NaN when n = 0)."""
    vals = finite(values)
    n = len(vals)
    if n == 0:
        return math.nan, math.nan, 0
    m = float(vals.mean())
    if n == 1:
        return m, math.nan, 1
    return m, t_quantile(n - 1, level) * float(vals.std(ddof=1)) / math.sqrt(n), n


class PairedTest(NamedTuple):
    mean: float
    half_width: float  # of the 95% interval (NaN for n < 2)
    n: int
    p: float  # two-sided one-sample t-test of mean 0 (NaN for n < 2, or every difference 0)


def paired_test(diffs: Sequence[float | None], level: float = 0.95) -> PairedTest:
    """Mean, ``level`` half-width, n and the two-sided t-test p-value of paired differences (method − GRPO)."""
    from scipy import stats

    vals = finite(diffs)
    mean, half, n = mean_ci(vals, level)
    if n < 2:
        return PairedTest(mean, half, n, math.nan)
    with warnings.catch_warnings():  # identical differences: scipy warns of precision loss (p 0, or NaN when all 0)
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_1samp(vals, 0.0).pvalue)
    return PairedTest(mean, half, n, p)


class HolmCell(NamedTuple):
    mean: float
    half_width: float  # of the Holm-consistent interval (the plain 95% one when left out of the family)
    n: int
    p: float  # unadjusted
    p_holm: float  # Holm-adjusted (NaN: left out of the family)
    level: float  # the interval's level (NaN: left out)
    reject: bool  # Holm rejects mean 0 at alpha


def holm_adjust(pvals: Sequence[float], alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Holm's decisions at ``alpha`` and adjusted p-values: ``statsmodels.stats.multitest.multipletests(method=
    "holm")``. Its Holm branch calls ``gc.collect()`` on every call (it imports gc inside the function), which takes
    0.1-0.8 s in a process that holds torch and changes nothing it computes: for the call, ``gc.collect`` is a no-op
    (the interpreter's own automatic collections run as usual), restored after."""
    from statsmodels.stats.multitest import multipletests

    collect = gc.collect
    gc.collect = _no_collect
    try:
        reject, p_adj, _, _ = multipletests(np.asarray(pvals, dtype=float), alpha=alpha, method="holm")
    finally:
        gc.collect = collect
    return reject, p_adj


def _no_collect(*args: object, **kwargs: object) -> int:
    return 0


def holm(family: Sequence[Sequence[float | None]], alpha: float = ALPHA) -> list[HolmCell]:
    """Holm over the comparisons of ``family`` (each a list of paired differences), with Holm-consistent
    intervals (see the module docstring). A comparison with n < 2 or an undefined p is left out of the family:
    its ``p_holm`` and ``level`` are NaN and ``reject`` is False."""

    tests = [paired_test(d) for d in family]
    out = [HolmCell(t.mean, t.half_width, t.n, t.p, math.nan, math.nan, False) for t in tests]
    members = [i for i, t in enumerate(tests) if t.n >= 2 and math.isfinite(t.p)]
    if not members:
        return out
    pvals = np.asarray([tests[i].p for i in members])
    reject, p_adj = holm_adjust(pvals, alpha)
    m, r = len(members), int(reject.sum())
    for rank, j in enumerate(np.argsort(pvals, kind="stable"), start=1):
        level = 1.0 - (alpha / (m - rank + 1) if rank <= r else alpha / (m - r))
        i = members[j]
        t = tests[i]
        out[i] = HolmCell(t.mean, mean_ci(family[i], level)[1], t.n, t.p, float(p_adj[j]), level, bool(reject[j]))
    return out


class Interval(NamedTuple):
    point: float
    low: float
    high: float
    n: int  # runs (of the first score array)


@contextlib.contextmanager
def _seeded_global_rng(seed: int) -> Iterator[None]:
    """numpy's global RNG seeded with ``seed`` inside the block and restored after it (rliable 1.2 draws its
    bootstrap indices from it: module docstring)."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():  # arch: "random_state is deprecated" (rliable 1.2 still passes it)
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        np.random.set_state(state)


def _scores(values: Sequence[float | None]) -> np.ndarray:
    """Finite values as rliable's (runs × 1 task) score matrix."""
    return finite(values).reshape(-1, 1)


def rliable_iqm(scores: np.ndarray) -> float:
    """rliable's ``metrics.aggregate_iqm``: scipy's ``trim_mean(scores, 0.25, axis=None)``, computed as scipy does
    (the flattened scores partitioned at the two cuts, the mean of the middle)."""
    flat = np.asarray(scores, dtype=np.float64).ravel()
    cut = int(0.25 * len(flat))
    return np.mean(np.partition(flat, (cut, len(flat) - cut - 1))[cut:len(flat) - cut])


def rliable_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """rliable's ``metrics.probability_of_improvement`` of (runs × tasks) score matrices: per task, 0.5 for equal
    columns, else the Mann–Whitney U of x over y (pairs with x > y, ties ½) ÷ n_x n_y; the mean over tasks."""
    per_task = []
    for task in range(scores_x.shape[1]):
        x, y = scores_x[:, task], scores_y[:, task]
        if np.array_equal(x, y):
            per_task.append(0.5)
            continue
        above, tied = (x[:, None] > y[None, :]).sum(), (x[:, None] == y[None, :]).sum()
        per_task.append((above + 0.5 * tied) / (len(x) * len(y)))
    return np.mean(per_task)


def iqm_ci(values: Sequence[float | None], *, reps: int = BOOT_REPS, seed: int = BOOT_SEED) -> Interval:
    """The interquartile mean of the runs' values with its 95% stratified-bootstrap CI (rliable); NaN without
    values."""
    from rliable import library as rly

    scores = _scores(values)
    if len(scores) == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    with _seeded_global_rng(seed):
        point, ci = rly.get_interval_estimates({"x": scores}, lambda s: np.array([rliable_iqm(s)]),
                                               reps=reps, random_state=np.random.RandomState(seed))
    return Interval(float(point["x"][0]), float(ci["x"][0, 0]), float(ci["x"][1, 0]), len(scores))


def probability_of_improvement(x: Sequence[float | None], y: Sequence[float | None], *, reps: int = BOOT_REPS,
                               seed: int = BOOT_SEED) -> Interval:
    """P(X > Y) of the runs' values ``x`` over ``y`` (ties ½) with its 95% bootstrap CI (rliable, each array
    resampled on its own); NaN when either is empty."""
    from rliable import library as rly

    sx, sy = _scores(x), _scores(y)
    if len(sx) == 0 or len(sy) == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    with _seeded_global_rng(seed):
        point, ci = rly.get_interval_estimates(
            {"x": [sx, sy]}, lambda a, b: np.array([rliable_improvement(a, b)]),
            reps=reps, random_state=np.random.RandomState(seed))
    return Interval(float(point["x"][0]), float(ci["x"][0, 0]), float(ci["x"][1, 0]), len(sx))
