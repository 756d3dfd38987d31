"""gdro/report/paper_figures.py: the paper's mechanism figures (§7.4) on synthetic run dirs with known numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gdro.cli.report import main
from gdro.report import find_runs
from gdro.report.paper_figures import (
    collect,
    mass_at_least,
    mean_bin,
    pooled,
    snapshot_rows,
    wse_ratio,
    wse_rows,
)
from gdro.report.paper_plots import write_paper_figures
from gdro.report.plotting import over_seeds
from tests.test_report import _is_png, make_run

STEPS = 6  # training steps 1..6; snapshots Start / Early / Mid / Late at steps 1, 3, 4, 6
N = (8.0, 2.0, 4.0)  # Rollout-GDRO's rollouts per prompt of bins 0, 1, unseen


def _q(step: int) -> tuple[float, float, float]:
    """The batch's share of bins 0, 1 and unseen at ``step``."""
    return 0.6 - 0.05 * step, 0.2 + 0.05 * step, 0.2


def _rewrite(d: Path, fn, classifier: dict | None = None) -> None:
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows[1:]:
        fn(r, r["step"])
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if classifier is not None:
        meta = json.loads((d / "run.json").read_text())
        meta["config"]["classifier"] = classifier
        (d / "run.json").write_text(json.dumps(meta))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """GRPO (2 seeds: bins 0 and 1 only, 4 rollouts each), Rollout-GDRO (1 seed: bins 0, 1, unseen at N) and
    Prompt-GDRO (2 seeds, logging bin 0's accuracy and Δμ); the classifier's edges [0, 0.5) and [0.5, 1]."""
    root = tmp_path / "sweep"
    cls = {"edges": [0.5], "unseen_p": 0.5}
    for seed in (0, 1):
        d = make_run(root, f"grpo/{seed}", "uniform", "fixed", seed, 80.0, steps=STEPS)
        _rewrite(d, lambda r, s: r.update({"difficulty/batch/0": 0.5, "difficulty/batch/1": 0.5,
                                           "compute/rollouts_per_prompt/0": 4.0,
                                           "compute/rollouts_per_prompt/1": 4.0}), cls)
    d = make_run(root, "rg/0", "uniform", "rollout-gdro", 0, 80.0, steps=STEPS)
    labels = ("0", "1", "unseen")
    _rewrite(d, lambda r, s: r.update({f"difficulty/batch/{b}": q for b, q in zip(labels, _q(s))}
                                      | {f"compute/rollouts_per_prompt/{b}": n for b, n in zip(labels, N)}), cls)
    for seed, (q0, acc0) in enumerate(((0.5, 0.2), (0.25, 0.5))):
        d = make_run(root, f"pg/{seed}", "prompt-gdro", "fixed", seed, 80.0, steps=STEPS)
        _rewrite(d, lambda r, s, q0=q0, acc0=acc0, seed=seed: r.update({
            "difficulty/batch/0": q0, "difficulty/batch/1": 1 - q0, "gdro/passrate/0": acc0,
            "compute/rollouts_per_prompt/0": 4.0, "compute/rollouts_per_prompt/1": 4.0,
            "gdro/lead_lag": (0.1 + 0.2 * seed) * s}), cls)
    return root


def test_sigma_hat_is_pooled_once_over_the_sweep(sweep: Path):
    sw = collect(find_runs(sweep))
    assert sw.bins == ["0", "1", "unseen"]
    # bin 0: Prompt-GDRO's accuracy weighted by the bin's share: (0.5 * 0.2 + 0.25 * 0.5) / 0.75 = 0.3 (6 steps each)
    assert sw.sigma["0"][0] == pytest.approx(math.sqrt(0.3 * 0.7)) and "gdro/passrate/0" in sw.sigma["0"][1]
    # bin 1: no accuracy logged -> the midpoint of [0.5, 1]; unseen: unseen_p
    assert sw.sigma["1"] == (pytest.approx(math.sqrt(0.75 * 0.25)), "midpoint of its pass-rate interval")
    assert sw.sigma["unseen"] == (0.5, "unseen_p")
    assert sw.high_bins() == ["1"] and sw.high_bins(0.0) == ["0", "1"]


@pytest.mark.parametrize(("classifier", "n_bar", "k"), [({"estimator": "unbiased_passk", "k": 8}, 4, 8),
                                                       ({"estimator": "any_correct"}, 4, 4),
                                                       ({"estimator": "unbiased_passk", "k": 1}, 4, 1)])
def test_a_pass_at_k_midpoint_becomes_the_per_rollout_rate(tmp_path: Path, classifier, n_bar, k):
    """No run logs an accuracy: bin 1 = [0.5, 1] of pass@k has midpoint 0.75, the pass@k of a per-rollout rate
    p = 1 − 0.25^(1/k) (pass@8: 0.159; any-of-4 visits: pass@4, 0.293; pass@1: 0.75)."""
    d = make_run(tmp_path / "sw", "grpo/0", "uniform", "fixed", 0, 80.0, steps=STEPS)
    _rewrite(d, lambda r, s: r.update({"difficulty/batch/0": 0.5, "difficulty/batch/1": 0.5}),
             {"edges": [0.5], **classifier})
    meta = json.loads((d / "run.json").read_text())
    meta["config"]["rollouts_per_prompt"] = n_bar
    (d / "run.json").write_text(json.dumps(meta))
    p = 1 - 0.25 ** (1 / k)
    sigma, source = collect(find_runs(tmp_path / "sw")).sigma["1"]
    assert sigma == pytest.approx(math.sqrt(p * (1 - p))) and source.startswith("midpoint of its pass-rate interval")
    assert (f"pass@{k}" in source) == (k > 1)


def test_wse_ratio_of_a_known_allocation(sweep: Path):
    sw = collect(find_runs(sweep))
    s = [sw.sigma[b][0] for b in ("0", "1", "unseen")]
    rg = sw.groups["uniform+rollout-gdro"][0]
    ratio = wse_ratio(rg, sw.sigma)
    for step, got in zip(rg.steps, ratio):
        q = _q(int(step))
        nbar = sum(a * n for a, n in zip(q, N))
        want = sum(a * si / math.sqrt(n) for a, si, n in zip(q, s, N)) / (sum(a * si for a, si in zip(q, s))
                                                                          / math.sqrt(nbar))
        assert got == pytest.approx(want)
    rows = {m: means for m, _, means in wse_rows(sw)}
    assert rows["uniform+fixed"] == [pytest.approx(1.0)] * 2  # a fixed allocation: 1 at every step
    assert rows["uniform+rollout-gdro"][0] == pytest.approx(float(np.mean(ratio)))


def test_budget_and_data_share_at_the_snapshots(sweep: Path):
    sw = collect(find_runs(sweep))
    snaps = snapshot_rows(sw, "uniform+rollout-gdro")
    assert [(name, step) for name, step, _, _ in snaps] == [("Start", 1), ("Early", 3), ("Mid", 4), ("Late", 6)]
    for _, step, data, budget in snaps:
        q = _q(int(step))
        assert data == pytest.approx(q[1])  # the high bin (lower edge 0.5) is bin 1
        assert budget == pytest.approx(q[1] * N[1] / sum(a * n for a, n in zip(q, N)))
    # GRPO: budget share = data share; pooled over its two seeds
    assert all(d == pytest.approx(0.5) and b == pytest.approx(0.5) for _, _, d, b in snapshot_rows(sw, "uniform+fixed"))
    # a bin GRPO never logs is NaN in its pooled tables, not 0
    _, q = pooled(sw.groups["uniform+fixed"], "q")
    assert np.isnan(q[:, 2]).all() and not np.isnan(q[:, :2]).any()


def test_mean_bin_leaves_the_unseen_bin_out_and_the_masses(sweep: Path):
    sw = collect(find_runs(sweep))
    rg = sw.groups["uniform+rollout-gdro"][0]
    q = [_q(int(s)) for s in rg.steps]
    assert mean_bin(rg) == pytest.approx([b / (a + b) for a, b, _ in q])
    assert mass_at_least(rg, 1) == pytest.approx([b for _, b, _ in q])  # of the whole batch, unseen included
    assert mass_at_least(rg, 1, budget=True) == pytest.approx([b * N[1] / (a * N[0] + b * N[1] + u * N[2])
                                                               for a, b, u in q])


def test_lead_lag_passes_through(sweep: Path):
    runs = [r for r in find_runs(sweep) if r.has("gdro/lead_lag")]
    steps, mean, sd = over_seeds(runs, "gdro/lead_lag")
    assert list(steps) == list(range(1, STEPS + 1)) and mean == pytest.approx(0.2 * steps)
    assert sd == pytest.approx(np.std([0.1 * steps, 0.3 * steps], axis=0, ddof=1))


def test_writes_the_markdown_and_the_pngs(sweep: Path, tmp_path: Path):
    md, made, skipped = write_paper_figures(find_runs(sweep), tmp_path / "out")
    names = {p.name for p in made}
    # Figs. 7 and 9 for the method that allocates; GRPO and Prompt-GDRO give every bin 4 rollouts per prompt
    assert names == {"wse_ratio.png", "budget_snapshots.png", "macro_dynamics.png", "lead_lag.png",
                     "budget_vs_data_uniform_rollout-gdro.png"}
    assert all(_is_png(p) for p in made) and not skipped
    text = md.read_text()
    assert "| GRPO | 2 | 1.000 ± 0.000 | 0.0 ± 0.0 |" in text and "| 1 | 0.433 | midpoint" in text
    q = _q(1)
    budget = 100 * q[1] * N[1] / sum(a * n for a, n in zip(q, N))
    assert f"| Rollout-GDRO | Start | 1 | 25.0 | {budget:.1f} | {budget / 25:.2f} |" in text
    assert "| GRPO | Start |" not in text and "data share at every step" in text


def test_missing_keys_are_skipped_with_a_note(tmp_path: Path, capsys):
    root = tmp_path / "sw"
    make_run(root, "grpo/0", "uniform", "fixed", 0, 80.0)  # no per-bin key at all
    md, made, skipped = write_paper_figures(find_runs(root), tmp_path / "out")
    assert md is None and made == [] and any("lead_lag.png" in s for s in skipped)
    d = make_run(root, "pg/0", "prompt-gdro", "fixed", 0, 80.0)  # shares, no rollouts key: n_b = n̄ assumed
    _rewrite(d, lambda r, s: r.update({"gdro/share/0": 1.0, "gdro/lead_lag": 0.5}))
    md, made, skipped = write_paper_figures(find_runs(root), tmp_path / "out2")
    assert "n_b = n̄ assumed" in md.read_text() and "GRPO: no difficulty/batch/" in md.read_text()
    assert main([str(root)]) == 0 and (root / "report" / "paper_mechanism.md").is_file()
    assert _is_png(root / "report" / "lead_lag.png")
