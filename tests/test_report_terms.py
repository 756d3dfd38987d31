"""Issue #49, item 3: one definition per name across gdro-report's outputs (gdro/report/terms.py): the two WSE ratios
named apart and pointing to each other, one high-bin rule, "at start" for a threshold reached before training, the
figures' titles and rows, and the samples' unseen bin documented as recorded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml

from gdro.cli.report import main
from gdro.report import find_runs
from gdro.report.paired import format_steps
from gdro.report.paper_figures import collect, pooled
from gdro.report.paper_plots import fig_budget_vs_data, fig_macro
from gdro.report.terms import WSE_BATCH, WSE_PAPER, high_rule, reach_cell
from tests.test_ledger import _run_dir
from tests.test_paper_figures import _rewrite
from tests.test_report import make_run

ROOT = Path(__file__).resolve().parent.parent
TEN = {"edges": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9], "unseen_p": 0.5}
Q = np.array([0.3, 0.2, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05])  # bins 0-9: 25% in bins >= 5, 10% in >= 8
ROLL = np.array([2, 2, 2, 2, 2, 12, 12, 12, 2, 2], dtype=float)  # more rollouts to bins 5-7, not to 8-9


@pytest.fixture
def captured(monkeypatch) -> list:
    """Every figure the report draws, kept open (``plt.close`` is a no-op) so that a test can read it."""
    figs: list = []
    close = plt.close
    monkeypatch.setitem(matplotlib.rcParams, "figure.max_open_warning", 0)
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig) if fig is not None else None)
    yield figs
    for fig in figs:
        close(fig)


def _ten_bin_sweep(root: Path) -> Path:
    """GRPO (4 rollouts everywhere) and Rollout-GDRO (``ROLL``) over ten bins with data share ``Q`` at every step,
    both logging groups with gradient, the batch's WSE ratio and per-bin mixed shares."""
    for seed in (0, 1):
        d = make_run(root, f"grpo/{seed}", "uniform", "fixed", seed, 80.0, steps=6)
        _rewrite(d, lambda r, s: r.update({f"difficulty/batch/{b}": float(Q[b]) for b in range(10)}
                                          | {f"compute/rollouts_per_prompt/{b}": 4.0 for b in range(10)}
                                          | {"difficulty/informative": 0.3, "difficulty/wse_ratio": 1.0,
                                             "difficulty/informative/0": 0.2}), TEN)
        d = make_run(root, f"rg/{seed}", "uniform", "rollout-gdro", seed, 85.0, steps=6)
        _rewrite(d, lambda r, s: r.update({f"difficulty/batch/{b}": float(Q[b]) for b in range(10)}
                                          | {f"compute/rollouts_per_prompt/{b}": float(ROLL[b]) for b in range(10)}
                                          | {"difficulty/informative": 0.4, "difficulty/wse_ratio": 0.85,
                                             "difficulty/informative/0": 0.3, "difficulty/informative/2": 0.5}), TEN)
    return root


@pytest.fixture(scope="module")
def ten_bin_report(tmp_path_factory) -> tuple[Path, list]:
    """The ten-bin sweep and its whole report (figures included), made once for the tests that read it: the sweep's
    root and every figure the report drew, kept open (as ``captured`` keeps them)."""
    figs: list = []
    close = plt.close
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(matplotlib.rcParams, "figure.max_open_warning", 0)
        mp.setattr(plt, "close", lambda fig=None: figs.append(fig) if fig is not None else None)
        root = _ten_bin_sweep(tmp_path_factory.mktemp("ten-bins") / "sw")
        assert main([str(root)]) == 0
    yield root, [f for f in figs if not isinstance(f, str)]
    for fig in figs:
        close(fig)


def test_the_two_wse_ratios_are_named_apart_and_point_to_each_other(ten_bin_report):
    root, _ = ten_bin_report
    mech = (root / "report" / "mechanism.md").read_text()
    paper = (root / "report" / "paper_mechanism.md").read_text()
    assert f"| {WSE_BATCH} ÷ uniform (runs < 1) |" in mech and "| Rollout-GDRO | 2 |" in mech
    assert f"| Method | runs | {WSE_PAPER} ÷ uniform | reduction vs uniform (%) |" in paper
    # each names the other file and its name, and says why they differ
    assert "paper_mechanism.md reports WSE (Eq. 33, the paper's)" in mech and "They differ because" in mech
    assert "mechanism.md reports WSE (batch σ)" in paper and "They differ because" in paper
    # no bare, unqualified name left
    for text in (mech, paper):
        assert "| WSE ÷ uniform" not in text and "| WSE ratio |" not in text


def test_one_high_bin_rule_in_the_markdown_and_the_macro_figure(tmp_path: Path, captured: list, ten_bin_report):
    root, _ = ten_bin_report
    sw = collect(find_runs(root))
    high = sw.high_bins()
    assert high == ["5", "6", "7", "8", "9"]  # pass-rate lower edge >= 0.5 of the ten bins: accbin_5+
    rule = high_rule(high)
    assert rule == "high bins: pass-rate lower edge ≥ 0.5 (bins 5, 6, 7, 8, 9)"
    paper = (root / "report" / "paper_mechanism.md").read_text()
    assert "High bins: pass-rate lower edge ≥ 0.5 (bins 5, 6, 7, 8, 9)" in paper
    # the snapshot table's data share is that of bins 5-9 (25%), its budget share theirs too
    budget = (Q * ROLL)[5:].sum() / (Q * ROLL).sum()
    assert f"| Rollout-GDRO | Start | 1 | 25.0 | {100 * budget:.1f} |" in paper
    # the macro figure: the same rule stated, and its budget panel draws the budget share of bins 5-9, not of >= 8
    captured.clear()
    assert fig_macro(sw, {m: "k" for m in sw.groups}, tmp_path / "macro.png")
    fig = next(f for f in captured if not isinstance(f, str))
    axes = fig.axes
    assert fig._suptitle.get_text().replace("\n", " ") == "H" + rule[1:]
    assert "high bins" in axes[1].get_title() and axes[2].get_title() == "budget share of the high bins"
    drawn = [line.get_ydata() for line in axes[2].get_lines() if line.get_label().startswith("Rollout-GDRO")]
    assert drawn and np.allclose(drawn[0], budget)
    dashed = [line.get_ydata() for line in axes[1].get_lines() if line.get_linestyle() == "--"]
    assert dashed and all(np.allclose(y, 0.25) for y in dashed)  # the high bins' data share
    assert not any("≥ 8" in ax.get_title() for ax in axes)


def test_reach_cells_say_at_start():
    assert reach_cell([0.0, 0.0, None], lambda x: f"{x:.0f}") == "at start (2/3)"
    assert reach_cell([0.0, 4.0, 8.0], lambda x: f"{x:.0f}", np.median) == "4 (3/3; 1 at start)"
    assert reach_cell([None, None], str) == "never (0/2)" and reach_cell([], str) == "–"
    assert format_steps([0.0, 0.0]) == "at start (2/2)" and format_steps([0.0, 10.0, 20.0]) == "10 (3/3; 1 at start)"


def _rows(compute: str) -> dict[str, str]:
    """compute.md's table rows by method (the primary endpoint's block below it left out)."""
    head = compute.split("\nPrimary endpoint")[0]
    return {line.split(" | ")[0].strip("| "): line for line in head.splitlines() if line.startswith("| ")}


def test_compute_says_at_start_when_grpo_ends_below_its_start(tmp_path: Path):
    root = tmp_path / "sweep"
    for seed in (0, 1):  # GRPO: 50 at step 0, 40 at the end: the threshold 40 is reached at the start
        _run_dir(root, f"grpo/{seed}", seed, None, 1000.0, {0: 50.0, 2: 45.0, 4: 40.0})
    # "late" starts below it and reaches 40 at step 3 (3000 tokens) on seed 0; seed 1 starts above it
    _run_dir(root, "late/0", 0, "late", 1000.0, {0: 30.0, 2: 35.0, 4: 45.0})
    _run_dir(root, "late/1", 1, "late", 1000.0, {0: 50.0, 2: 30.0, 4: 45.0})
    assert main([str(root), "--no-figures"]) == 0  # compute.md's text: its figure is test_ledger.py's
    text = (root / "report" / "compute.md").read_text()
    rows = _rows(text)
    assert "| at start (2/2) |" in rows["GRPO"] and "0.0k" not in rows["GRPO"]
    assert "| 1.5k (2/2; 1 at start) |" in rows["late"]  # mean of 3000 and 0 tokens
    assert "threshold = GRPO's final 40.00 (GRPO ends at or below its own start, 50.00)" in text
    assert "“at start” in “k tokens to GRPO's final”: the run's step-0 evaluation" in text
    assert main([str(root), "--axis", "steps", "--no-figures"]) == 0
    text = (root / "report" / "compute.md").read_text()
    rows = _rows(text)
    assert "| at start (2/2) |" in rows["GRPO"] and "| 2 (2/2; 1 at start) |" in rows["late"]


def test_no_at_start_note_when_no_run_reaches_it_at_its_start(tmp_path: Path):
    root = tmp_path / "sweep"
    for seed in (0, 1):
        _run_dir(root, f"grpo/{seed}", seed, None, 1000.0, {0: 40.0, 2: 50.0, 4: 60.0})
        _run_dir(root, f"dyn/{seed}", seed, "dyn", 1000.0, {0: 40.0, 2: 60.0, 4: 70.0})
    assert main([str(root), "--no-figures"]) == 0
    text = (root / "report" / "compute.md").read_text()
    assert "at start" not in text and "| 4.0k (2/2) |" in text and "| 2.0k (2/2) |" in text


def _titles(fig) -> list:
    return [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()] + (
        [fig._suptitle] if fig._suptitle is not None else [])


def test_no_figure_title_is_cut_off(ten_bin_report):
    _, figs = ten_bin_report
    assert len(figs) >= 10
    for fig in figs:
        fig.canvas.draw()
        renderer, width = fig.canvas.get_renderer(), fig.bbox.width
        for t in _titles(fig):
            box = t.get_window_extent(renderer)
            assert box.x0 >= -1 and box.x1 <= width + 1, (t.get_text(), box.x0, box.x1, width)
    titles = [t.get_text().replace("\n", " ") for f in figs for t in _titles(f)]
    assert any(t.startswith(f"{WSE_BATCH} ÷ uniform") for t in titles)  # the longest title, wrapped
    assert any(t.startswith(f"{WSE_PAPER} ÷ uniform") for t in titles)


def test_heatmap_panels_share_one_row_order(ten_bin_report):
    """GRPO logs groups with gradient in bin 0 only, Rollout-GDRO in bins 0 and 2: both panels have rows 0 and 2,
    in one order, over one extent."""
    _, figs = ten_bin_report
    fig = next(f for f in figs if any("share of the bin's groups with gradient" in ax.get_title() for ax in f.axes))
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert len(panels) == 2
    labels = [[t.get_text() for t in ax.get_yticklabels()] for ax in panels]
    assert labels[0] == labels[1] == ["0", "2"]
    assert panels[0].get_ylim() == panels[1].get_ylim() and panels[0].get_xlim() == panels[1].get_xlim()


def test_budget_vs_data_titles_name_what_they_show(tmp_path: Path, captured: list):
    sw = collect(find_runs(_ten_bin_sweep(tmp_path / "sw")))
    assert fig_budget_vs_data(sw, "uniform+rollout-gdro", tmp_path / "f.png")
    fig = next(f for f in captured if not isinstance(f, str))
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert [ax.get_title() for ax in panels] == ["data share", "budget share", "rollouts per prompt"]
    everything = " ".join(t.get_text() for t in _titles(fig))
    assert "q_t" not in everything and "budget share" in fig._suptitle.get_text()
    _, s = pooled(sw.groups["uniform+rollout-gdro"], "budget")
    assert np.allclose(panels[1].get_images()[0].get_array(), s.T)  # the budget panel shows the budget share
    assert np.allclose(panels[2].get_images()[0].get_array()[5], 12.0)  # and the last, rollouts per prompt
    assert panels[0].get_ylim() == panels[1].get_ylim() == panels[2].get_ylim()


def test_the_unseen_bin_of_the_samples_is_documented_as_recorded():
    from gdro.common.interfaces import PromptPool
    from gdro.controllers.difficulty import OnlineDifficultyClassifier

    cfg = yaml.safe_load((ROOT / "conf" / "classifier" / "passk.yaml").read_text())
    cfg.pop("_target_")
    cls = OnlineDifficultyClassifier(**cfg)
    cls.bind(PromptPool(("a", "b")))
    b = int(cls.bins(np.array([0]))[0])  # a prompt not yet seen, as the samples record it
    assert b == 10 and cls.bin_labels()[b] == "unseen"
    text = (ROOT / "conf" / "train.yaml").read_text()
    comment = text[:text.index("\nsamples:")].rsplit("\n\n", 1)[1]
    assert "bin B, one past the last pass bin (10 with the ten default bins): the metrics' `unseen` bin" in comment
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `samples/` |"))
    assert re.search(r"bin B, one past the last pass bin \(10 with ten bins: the metrics' `unseen` bin\)", row)
    assert json.dumps({"bin": b}) == '{"bin": 10}'  # as written to samples/train_*.jsonl, unchanged
