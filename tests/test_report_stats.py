"""gdro/report/stats.py against the libraries it wraps (scipy, statsmodels, rliable) on fixed inputs, the
Holm-consistent intervals' defining property, and gdro-report's Holm columns and primary-endpoint block end to end."""

from __future__ import annotations

import gc
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rliable import library as rly
from rliable import metrics
from scipy import stats
from statsmodels.stats.multitest import multipletests

from gdro.cli.report import main
from gdro.report.compute import compute_comparison
from gdro.report.runs import find_runs
from gdro.report.stats import (
    BOOT_REPS,
    BOOT_SEED,
    Interval,
    holm,
    iqm_ci,
    mean_ci,
    paired_test,
    probability_of_improvement,
    rliable_improvement,
    rliable_iqm,
    t975,
    t_quantile,
)
from gdro.report.table import format_holm, format_p
from tests.test_report import make_run

# the hand-typed table gdro/report/table.py carried before (t_{0.975, df}, df = 1..30), to 3 decimals
OLD_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def _scipy_half(values, level: float) -> float:
    lo, hi = stats.ttest_1samp(values, 0.0).confidence_interval(confidence_level=level)
    return (hi - lo) / 2


# ---------------------------------------------------------------- t intervals and the paired test


def test_t_half_width_is_scipys_for_df_1_to_200():
    rng = np.random.default_rng(0)
    for df in range(1, 201):
        assert t975(df) == stats.t.ppf(0.975, df)
        values = rng.normal(3.0, 2.0, size=df + 1)
        m, h, n = mean_ci(list(values))
        assert (m, n) == (pytest.approx(values.mean(), rel=1e-12), df + 1)
        assert h == pytest.approx(_scipy_half(values, 0.95), rel=1e-9)
        assert mean_ci(list(values), level=0.99)[1] == pytest.approx(_scipy_half(values, 0.99), rel=1e-9)
    # the old table was exact to 3 decimals for df 1-30
    assert [round(t975(df), 3) for df in range(1, 31)] == list(OLD_T975)
    assert t_quantile(4, 0.9) == stats.t.ppf(0.95, 4)
    with pytest.raises(ValueError, match="df must be >= 1, got 0"):
        t975(0)


def test_mean_ci_drops_missing_values_and_has_no_interval_below_two():
    m, h, n = mean_ci([1.0, None, math.nan, math.inf, 3.0])
    assert (m, n) == (2.0, 2) and h == pytest.approx(stats.t.ppf(0.975, 1) * math.sqrt(2) / math.sqrt(2))
    m, h, n = mean_ci([5.0, None])
    assert (m, n) == (5.0, 1) and math.isnan(h)
    m, h, n = mean_ci([])
    assert n == 0 and math.isnan(m) and math.isnan(h)


def test_paired_test_is_scipys_one_sample_t_test():
    diffs = [5.0, 4.0, 2.5, None]
    t = paired_test(diffs)
    ref = stats.ttest_1samp([5.0, 4.0, 2.5], 0.0)
    assert t.p == ref.pvalue and t.n == 3 and t.mean == pytest.approx(23 / 6)
    assert t.half_width == pytest.approx(_scipy_half([5.0, 4.0, 2.5], 0.95), rel=1e-12)
    assert math.isnan(paired_test([1.0]).p) and paired_test([1.0]).n == 1
    assert math.isnan(paired_test([0.0, 0.0]).p)  # no variation and no difference: no test
    assert paired_test([2.0, 2.0]).p == 0.0  # no variation, a difference: scipy's t = inf


# ---------------------------------------------------------------- Holm


def _reference(family, alpha=0.05):
    """Holm by statsmodels over the comparisons with ≥ 2 values and a p-value, and the Holm-consistent level of
    each (the rule in gdro/report/stats.py's docstring), computed apart from the module."""
    vals = [np.asarray([v for v in d if v is not None and math.isfinite(v)]) for d in family]
    ps = {}
    for i, v in enumerate(vals):
        if len(v) >= 2:
            with warnings.catch_warnings():  # identical values: scipy warns of precision loss
                warnings.simplefilter("ignore", RuntimeWarning)
                p = stats.ttest_1samp(v, 0.0).pvalue
            if math.isfinite(p):
                ps[i] = p
    members = sorted(ps)
    out = {}
    if members:
        p = np.array([ps[i] for i in members])
        reject, adj, _, _ = multipletests(p, alpha=alpha, method="holm")
        m, r = len(members), int(reject.sum())
        ranks = np.empty(m, int)
        ranks[np.argsort(p, kind="stable")] = np.arange(1, m + 1)
        for j, i in enumerate(members):
            level = 1 - (alpha / (m - ranks[j] + 1) if ranks[j] <= r else alpha / (m - r))
            out[i] = (bool(reject[j]), adj[j], level)
    return vals, out


def _check_family(family, alpha=0.05):
    cells = holm(family, alpha=alpha)
    vals, ref = _reference(family, alpha)
    assert len(cells) == len(family)
    for i, c in enumerate(cells):
        if i not in ref:  # left out: no adjusted p, no decision, the plain 95% interval
            assert math.isnan(c.p_holm) and math.isnan(c.level) and c.reject is False
            continue
        reject, adj, level = ref[i]
        assert c.reject == reject and c.p_holm == adj and c.level == pytest.approx(level, abs=1e-15)
        assert c.half_width == pytest.approx(_scipy_half(vals[i], level), rel=1e-9)
        assert c.half_width >= mean_ci(vals[i], 1 - alpha)[1] - 1e-12  # never narrower than the 1 - alpha one
        assert c.reject == (abs(c.mean) > c.half_width)  # the interval excludes 0 exactly when Holm rejects
    return cells


def test_holm_on_fixed_families_with_ties_and_left_out_comparisons():
    # p: 0.0202 (5,4,3), 0.0351 (8,6,4), the same 0.0202 again (a tie), one pair, no variation, None-padded
    family = [[5.0, 4.0, 3.0], [8.0, 6.0, 4.0], [10.0, 8.0, 6.0], [7.0], [0.0, 0.0, 0.0],
              [0.1, -0.2, 0.3, None, 0.05]]
    cells = _check_family(family)
    assert [c.reject for c in cells] == [False, False, False, False, False, False]
    assert cells[0].p_holm == pytest.approx(min(1.0, 4 * 0.020204102886728758))  # m = 4 members
    assert cells[0].p_holm == cells[2].p_holm and cells[0].level == pytest.approx(1 - 0.05 / 4)
    assert cells[3].n == 1 and math.isnan(cells[3].half_width)
    assert (cells[4].mean, cells[4].half_width) == (0.0, 0.0)
    # two comparisons: both rejected (0.0202 <= 0.025, 0.0351 <= 0.05): levels 1 - 0.05/2 and 0.95
    a, b = _check_family([[5.0, 4.0, 3.0], [8.0, 6.0, 4.0]])
    assert (a.reject, b.reject) == (True, True) and a.level == 0.975 and b.level == 0.95
    assert a.half_width == pytest.approx(stats.t.ppf(1 - 0.0125, 2) / math.sqrt(3))
    # neither rejected (0.034 > 0.025): both at 1 - 0.05/2, both covering 0, though each 95% interval excludes it
    a, b = _check_family([[5.0, 4.0, 2.5], [8.0, 6.0, 4.0]])
    assert (a.reject, b.reject) == (False, False) and a.level == b.level == 0.975
    assert abs(a.mean) > mean_ci([5.0, 4.0, 2.5])[1] and abs(a.mean) < a.half_width
    (one,) = holm([[1.0]])  # a family with no member
    assert (one.mean, one.n, one.reject) == (1.0, 1, False) and math.isnan(one.p_holm)
    assert holm([]) == []


def test_holm_consistent_intervals_match_the_decisions_on_many_families(monkeypatch):
    """The defining property on 400 fixed random families (sizes 1-8, 2-10 pairs, effects from none to large),
    with exact ties (a member repeated) and left-out members (one pair, all zero) mixed in."""
    # statsmodels' Holm branch runs a full gc.collect() on every call (statsmodels/stats/multitest.py), a large
    # share of a second in a test process; nothing it returns depends on it
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    rng = np.random.default_rng(47)
    rejected = kept = 0
    for case in range(400):
        m = int(rng.integers(1, 9))
        family = [list(rng.normal(rng.choice([0.0, 0.5, 1.0, 3.0]), 1.0, size=int(rng.integers(2, 11))))
                  for _ in range(m)]
        if case % 5 == 0:
            family.append(list(family[0]))  # a tie
        if case % 7 == 0:
            family += [[float(rng.normal())], [0.0, 0.0]]
        alpha = (0.05, 0.1, 0.01)[case % 3]
        cells = _check_family(family, alpha)
        rejected += sum(c.reject for c in cells)
        kept += sum(not c.reject and math.isfinite(c.p_holm) for c in cells)
    assert rejected > 200 and kept > 200  # both sides of the property are exercised


def test_format_holm_and_p():
    a, b = holm([[5.0, 4.0, 3.0], [8.0, 6.0, 4.0]])
    assert format_holm(a) == "+4.0 ± 3.6 (p_H 0.04)" and format_holm(b) == "+6.0 ± 5.0 (p_H 0.04)"
    assert format_holm(a, scale=1e3, digits=3) == "+0.004 ± 0.004 (p_H 0.04)"
    one, zero, none = holm([[-7.0], [0.0, 0.0], []])
    assert (format_holm(one), format_holm(zero), format_holm(none)) == ("-7.0 (n=1)", "+0.0 ± 0.0 (p_H –)", "–")
    assert [format_p(p) for p in (0.0004, 0.004, 0.04, 1.0, math.nan)] == ["<0.001", "0.004", "0.04", "1.00", "–"]


# ---------------------------------------------------------------- rliable


def _rliable(scores: dict, func, reps: int = BOOT_REPS) -> tuple:
    """A direct rliable call as gdro/report/stats.py makes it: reps, seed and RandomState; numpy's global RNG seeded
    the same (rliable 1.2 draws from it)."""
    np.random.seed(BOOT_SEED)
    with warnings.catch_warnings():  # arch: "random_state is deprecated"
        warnings.simplefilter("ignore", FutureWarning)
        point, ci = rly.get_interval_estimates(scores, func, reps=reps, random_state=np.random.RandomState(BOOT_SEED))
    return float(point["x"][0]), float(ci["x"][0, 0]), float(ci["x"][1, 0])


def test_iqm_is_rliables_with_its_seed():
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0, None]
    got = iqm_ci(values)
    assert got.point == 4.5  # the middle half: 3, 4, 5, 6
    ref = _rliable({"x": np.array(values[:-1]).reshape(-1, 1)}, lambda s: np.array([metrics.aggregate_iqm(s)]))
    assert got == Interval(*ref, 8) and got.low < 4.5 < got.high
    np.random.seed(123)  # the global RNG's state before the call changes nothing, and is left as it was
    before = np.random.get_state()[1].copy()
    assert iqm_ci(values) == got
    assert (np.random.get_state()[1] == before).all()
    assert iqm_ci([]).n == 0 and math.isnan(iqm_ci([None]).point)


def test_probability_of_improvement_is_rliables_with_its_seed():
    x, y = [1.0, 5.0, 7.0], [2.0, 3.0, 6.0]
    got = probability_of_improvement(x, y)
    assert got.point == pytest.approx(5 / 9)  # 5 > 2, 3; 7 > 2, 3, 6
    ref = _rliable({"x": [np.array(x).reshape(-1, 1), np.array(y).reshape(-1, 1)]},
                   lambda a, b: np.array([metrics.probability_of_improvement(a, b)]))
    assert got == Interval(*ref, 3) and got.low < got.point < got.high
    assert probability_of_improvement([1.0, 2.0], [1.0, 2.0]).point == 0.5
    assert probability_of_improvement([], [1.0]).n == 0


# ---------------------------------------------------------------- gdro-report end to end


GRPO, PGDRO, ORACLE, RG = (80.0, 82.0, 87.0), (85.0, 86.0, 89.5), (88.0, 88.0, 91.0), 90.0


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """GRPO, Prompt-GDRO and the oracle on seeds 0-2, Rollout-GDRO on seed 0; every run generates 100 tokens a step
    and evaluates mean@8 = final · step / 6 at steps 0, 3, 6, so a run's area under the curve is final / 2."""
    root = tmp_path / "sweep"
    for s in range(3):
        make_run(root, f"grpo/{s}", "uniform", "fixed", s, GRPO[s])
        make_run(root, f"pgdro/{s}", "prompt-gdro", "fixed", s, PGDRO[s])
        make_run(root, f"oracle/{s}", "oracle-levels", "fixed", s, ORACLE[s])
    make_run(root, "rg/0", "uniform", "rollout-gdro", 0, RG)
    for path in root.glob("*/*/metrics.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(r | ({"compute/tokens_cum": 100.0 * r["step"]} if r["step"] else {})) + "\n"
                                for r in rows))
    return root


def _holm_cells(family: list[list[float]], digits: int = 1) -> list[str]:
    """The cells a Holm column shows, from scipy and statsmodels directly."""
    p = np.array([stats.ttest_1samp(d, 0.0).pvalue for d in family])
    reject, adj, _, _ = multipletests(p, alpha=0.05, method="holm")
    r, m = int(reject.sum()), len(family)
    out = []
    for i, d in enumerate(family):
        rank = 1 + int(np.sum(p < p[i]))
        level = 1 - (0.05 / (m - rank + 1) if rank <= r else 0.05 / (m - r))
        out.append(f"{np.mean(d):+.{digits}f} ± {_scipy_half(d, level):.{digits}f} (p_H {adj[i]:.2f})")
    return out


def test_gdro_report_shows_holm_columns_and_the_primary_endpoint(sweep: Path, capsys):
    assert main([str(sweep), "--no-figures"]) == 0  # the tables: the figures are test_report.py's
    out = capsys.readouterr().out
    paired = (sweep / "report" / "paired.md").read_text()
    compute = (sweep / "report" / "compute.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line for line in paired.splitlines() if line.startswith("| ")}
    # Δmean@8: Prompt-GDRO 5, 4, 2.5 (p 0.034), the oracle 8, 6, 4 (p 0.035): each 95% CI excludes 0, Holm rejects
    # neither (0.034 > 0.05 / 2), so both get the 97.5% interval, which covers 0
    pg, oracle = _holm_cells([[5.0, 4.0, 2.5], [8.0, 6.0, 4.0]])
    assert (pg, oracle) == ("+3.8 ± 4.5 (p_H 0.07)", "+6.0 ± 7.2 (p_H 0.07)")
    assert f"| {pg} | {pg} |" in rows["Prompt-GDRO"]  # Δmean@8 and Δpass@8 (pass@8 = mean@8 + 5)
    assert f"| {oracle} | {oracle} |" in rows["Oracle: uniform over levels (control)"]
    assert "| +10.0 (n=1) |" in rows["Rollout-GDRO"]
    assert "Holm-adjusted over the 2 rows of each column" in paired
    assert "Secondary endpoints: the primary (--primary area) is in compute.md." in paired
    # compute.md: the area is final / 2, so its Δ are half of those above; equal tokens = equal steps here
    head = compute.split("\nPrimary endpoint")[0]
    lines = {line.split(" | ")[0].strip("| "): line for line in head.splitlines() if line.startswith("| ")}
    area_pg, area_oracle = _holm_cells([[2.5, 2.0, 1.25], [4.0, 3.0, 2.0]])
    assert (area_pg, area_oracle) == ("+1.9 ± 2.3 (p_H 0.07)", "+3.0 ± 3.6 (p_H 0.07)")
    assert f"| {area_pg} | {pg} | {pg} |" in lines["Prompt-GDRO"]
    assert f"| {area_oracle} | {oracle} | {oracle} |" in lines["Oracle: uniform over levels (control)"]
    assert "| +5.0 (n=1) | +10.0 (n=1) | +10.0 (n=1) |" in lines["Rollout-GDRO"]
    assert ("| Δ area (mean mean@8 over tokens) (primary) | Δ mean@8 at equal tokens (secondary) "
            "| Δ mean@8 at equal steps (secondary) |") in head
    assert "primary endpoint: **area** (`--primary`), the other Δ columns secondary" in head
    # "to GRPO's final" (83): only seed 2 of GRPO reaches it, so every row has one pair: none in its family
    assert "Holm-adjusted over the rows of each column (0, 2, 2, 2 from left to right)" in head
    # the primary block: per run areas GRPO 40, 41, 43.5; Prompt-GDRO 42.5, 43, 44.75; oracle 44, 44, 45.5
    assert "Primary endpoint **area**: each run's mean mean@8 up to 0.6k generated tokens" in compute
    assert f"{BOOT_REPS} bootstrap replications, seed {BOOT_SEED}" in compute
    areas = {"GRPO": [40.0, 41.0, 43.5], "Prompt-GDRO": [42.5, 43.0, 44.75],
             "Oracle: uniform over levels (control)": [44.0, 44.0, 45.5], "Rollout-GDRO": [45.0]}
    block = compute.split("| P(method > GRPO) [95% CI] |")[1]
    block_rows = {line.split(" | ")[0].strip("| "): line for line in block.splitlines() if line.startswith("| ")}
    for name, vals in areas.items():
        iqm = _rliable({"x": np.array(vals).reshape(-1, 1)}, lambda s: np.array([metrics.aggregate_iqm(s)]))
        cell = f"| {len(vals)} | {iqm[0]:.1f} [{iqm[1]:.1f}, {iqm[2]:.1f}] |"
        if name == "GRPO":
            assert block_rows[name] == f"| GRPO {cell} – | – |"
            continue
        poi = _rliable({"x": [np.array(vals).reshape(-1, 1), np.array(areas["GRPO"][:len(vals)]).reshape(-1, 1)]},
                       lambda a, b: np.array([metrics.probability_of_improvement(a, b)]))
        assert block_rows[name] == f"| {name} {cell} {len(vals)} | {poi[0]:.2f} [{poi[1]:.2f}, {poi[2]:.2f}] |"
    assert "| Prompt-GDRO | 3 | 43.4 [" in block and "| 3 | 0.78 [" in block_rows["Prompt-GDRO"]  # 7 of 9 pairs
    assert "at equal compute" in out and "Primary endpoint **area**" in out  # (deterministic: equal to the seeded
    # reference calls above, whatever numpy's global RNG state was before)


def test_primary_names_another_column_and_a_bad_one_is_one_line(sweep: Path, capsys, monkeypatch):
    monkeypatch.setattr("gdro.report.compute.BOOT_REPS", 300)  # fewer replications: a quicker test
    assert main([str(sweep), "--primary", "equal_steps", "--no-figures"]) == 0
    compute = (sweep / "report" / "compute.md").read_text()
    assert "(secondary) | Δ mean@8 at equal tokens (secondary) | Δ mean@8 at equal steps (primary) |" in compute
    assert "Primary endpoint **equal_steps**: each run's mean@8 at its final evaluation row" in compute
    assert "(--primary equal_steps) is in compute.md" in (sweep / "report" / "paired.md").read_text()
    assert "(rliable; 300 bootstrap replications, seed 0)" in compute
    iqm = _rliable({"x": np.array(PGDRO).reshape(-1, 1)}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=300)
    poi = _rliable({"x": [np.array(PGDRO).reshape(-1, 1), np.array(GRPO).reshape(-1, 1)]},
                   lambda a, b: np.array([metrics.probability_of_improvement(a, b)]), reps=300)
    # finals 85, 86, 89.5 against 80, 82, 87: 7 of 9 pairs above; IQM of 3 runs = their mean
    assert poi[0] == pytest.approx(7 / 9) and iqm[0] == pytest.approx(260.5 / 3)
    assert (f"| Prompt-GDRO | 3 | {iqm[0]:.1f} [{iqm[1]:.1f}, {iqm[2]:.1f}] | 3 | "
            f"{poi[0]:.2f} [{poi[1]:.2f}, {poi[2]:.2f}] |") in compute
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([str(sweep), "--primary", "reach"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("gdro-report: error: argument --primary: invalid choice: 'reach'")
    assert "'area', 'equal_tokens', 'equal_steps'" in err
    with pytest.raises(ValueError, match="primary must be one of"):
        compute_comparison(find_runs(sweep), "eval/mean@8", primary="reach")


# one method's run scores: values that tie often, and any finite ones
RUN_SCORES = st.lists(st.sampled_from([0.0, 1.0, 2.5, 3.0, 1e-9, -4.0, 7.25]) | st.floats(-1e6, 1e6), min_size=1,
                      max_size=12)


@settings(max_examples=300)
@given(RUN_SCORES, RUN_SCORES, st.integers(1, 3))
def test_the_two_statistics_equal_rliables_to_the_bit(xs, ys, tasks):
    """The bootstrap's statistics (gdro/report/stats.py computes them without scipy's per-call overhead) are rliable's
    own, to the bit, on (runs × tasks) scores with ties, equal columns and any run counts."""
    x = np.array(xs * tasks).reshape(tasks, -1).T
    y = np.array(ys * tasks).reshape(tasks, -1).T
    if len(xs) == len(ys) and tasks > 1:
        y[:, -1] = x[:, -1]  # one task's columns equal (rliable's 0.5 branch), the others not
    for s in (x, y):
        assert rliable_iqm(s) == metrics.aggregate_iqm(s)
    for a, b in ((x, y), (y, x), (x, x)):
        assert rliable_improvement(a, b) == metrics.probability_of_improvement(a, b)
