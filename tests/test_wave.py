"""gdro/report/wave.py: the traveling wave (frontier bin, budget − data share, wave.md) on synthetic run dirs whose
frontier moves by a known rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gdro.cli.report import main
from gdro.report import find_runs
from gdro.report.paper_figures import collect
from gdro.report.wave import after_unseen, excess_bin, frontier, heat, run_wave, write_wave
from tests.test_paper_figures import _rewrite
from tests.test_report import _is_png, make_run

STEPS = 8  # training steps 1..8; step 1 holds unseen prompts (the unseen phase), steps 2..8 are T
PASS = ("0", "1", "2", "3", "4")
FRONT = [0, 0, 1, 1, 2, 2, 3, 3]  # the frontier bin at steps 1..8: (step - 1) // 2
RG = ((8.0, 2.0), (5.0, 2.75))  # Rollout-GDRO's two seeds: rollouts per prompt at the frontier, elsewhere


def _front(step: int) -> int:
    return (step - 1) // 2


def _logs(step: int, n_at, *, info: bool = True) -> dict:
    """One step's per-bin keys: pass bins share the batch evenly (0.16 each and 0.2 unseen at step 1, then 0.2
    each); the frontier bin's groups are 90% mixed, the others' 30%; ``n_at(bin)`` rollouts per prompt."""
    unseen = 0.2 if step == 1 else 0.0
    q = (1 - unseen) / len(PASS)
    row = {f"difficulty/batch/{b}": q for b in PASS} | {"difficulty/batch/unseen": unseen}
    row |= {f"compute/rollouts_per_prompt/{b}": n_at(int(b)) for b in PASS}
    if unseen:
        row |= {"compute/rollouts_per_prompt/unseen": 4.0, "difficulty/informative/unseen": 0.5}
    if info:
        row |= {f"difficulty/informative/{b}": 0.9 if int(b) == _front(step) else 0.3 for b in PASS}
    return row


def _run(root: Path, name: str, allocator: str, seed: int, n_at, info: bool = True) -> Path:
    d = make_run(root, name, "uniform", allocator, seed, 80.0, steps=STEPS)
    _rewrite(d, lambda r, s: r.update(_logs(s, lambda b: n_at(b, s), info=info)))
    return d


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """GRPO (4 rollouts everywhere), Rollout-GDRO (2 seeds, extra rollouts at the frontier) and the square-root
    allocator standing in for a budget that stays put (extra rollouts in bin 0 at every step)."""
    root = tmp_path / "sweep"
    _run(root, "grpo/0", "fixed", 0, lambda b, s: 4.0)
    for seed, (hi, lo) in enumerate(RG):
        _run(root, f"rg/{seed}", "rollout-gdro", seed, lambda b, s, hi=hi, lo=lo: hi if b == _front(s) else lo)
    _run(root, "sqrt/0", "sqrt", 0, lambda b, s: 8.0 if b == 0 else 2.0)
    return root


def _tables(sweep: Path, method: str):
    return collect(find_runs(sweep)).groups[method]


def test_frontier_and_excess_bins(sweep: Path):
    for t in _tables(sweep, "uniform+rollout-gdro"):
        assert list(frontier(t)) == FRONT and list(excess_bin(t)) == FRONT
        assert list(after_unseen(t)) == [False] + [True] * (STEPS - 1)
    (stay,) = _tables(sweep, "uniform+sqrt")
    assert list(frontier(stay)) == FRONT and list(excess_bin(stay)) == [0.0] * STEPS
    (grpo,) = _tables(sweep, "uniform+fixed")
    assert list(frontier(grpo)) == FRONT and np.isnan(excess_bin(grpo)).all()  # no bin over its data share


def test_heatmap_matrix(sweep: Path):
    steps, e = heat(_tables(sweep, "uniform+rollout-gdro"))
    assert list(steps) == list(range(1, STEPS + 1)) and e.shape == (len(PASS) + 1, STEPS)
    # step >= 2: q = 0.2 per pass bin, s = 0.2 n_b / Σ 0.2 n_b; each seed's s − q, then the mean over seeds
    per_seed = [(0.2 * hi / (0.2 * (hi + 4 * lo)) - 0.2, 0.2 * lo / (0.2 * (hi + 4 * lo)) - 0.2) for hi, lo in RG]
    at, off = np.mean(per_seed, axis=0)
    assert (at, off) == pytest.approx((0.20625, -0.0515625))
    for j, step in enumerate(range(2, STEPS + 1), start=1):
        want = [at if b == _front(step) else off for b in range(len(PASS))] + [0.0]
        assert e[:, j] == pytest.approx(want, abs=1e-15)
    # step 1: 0.16 per pass bin, 0.2 unseen at 4 rollouts
    step1 = [[q * n / sum(qq * nn for qq, nn in zip([0.16] * 5 + [0.2], [hi] + [lo] * 4 + [4.0])) - q
              for q, n in zip([0.16] * 5 + [0.2], [hi] + [lo] * 4 + [4.0])] for hi, lo in RG]
    assert e[:, 0] == pytest.approx(np.mean(step1, axis=0), abs=1e-15)
    _, grpo = heat(_tables(sweep, "uniform+fixed"))
    assert (grpo == 0.0).all()  # GRPO: budget share = data share, drawn as 0, not missing


def test_run_statistic(sweep: Path):
    t = _tables(sweep, "uniform+rollout-gdro")[0]
    # T = steps 2..8, f = 0 1 1 2 2 3 3: a fixed bin 2 is within one of it at 6 of 7 steps
    assert run_wave(t) == {"steps": 7, "hit": 1.0, "stay": 6 / 7, "excess_steps": 7, "frontier": (0.0, 3.0)}
    w = run_wave(_tables(sweep, "uniform+sqrt")[0])
    assert (w["hit"], w["stay"]) == (3 / 7, 6 / 7)  # bin 0 is within one of f at steps 2, 3, 4
    w = run_wave(_tables(sweep, "uniform+fixed")[0])
    assert (w["hit"], w["stay"], w["excess_steps"]) == (0.0, 6 / 7, 0)


def test_wave_md_and_pngs(sweep: Path, tmp_path: Path):
    made, skipped = write_wave(find_runs(sweep), tmp_path / "out")
    assert [p.name for p in made] == ["wave_frontier.png", "wave_heatmap.png", "wave.md"] and not skipped
    assert all(_is_png(p) for p in made[:2])
    text = made[2].read_text()
    assert ("| Rollout-GDRO | 2 | 7.0 ± 0.0 | 0.00 → 3.00 | 100.0 ± 0.0 | 100.0 ± 0.0 | 85.7 ± 0.0 | yes: H > S |"
            in text), text
    assert ("| GRPO | 1 | 7.0 ± 0.0 | 0.00 → 3.00 | 0.0 ± 0.0 | 0.0 ± 0.0 | 85.7 ± 0.0 | no: budget share = data "
            "share at every step (no bin gets extra rollouts) |" in text), text
    assert "| 100.0 ± 0.0 | 42.9 ± 0.0 | 85.7 ± 0.0 | no: H ≤ S" in text, text


def test_report_from_summaries_gives_the_same_wave(sweep: Path, tmp_path: Path):
    file = tmp_path / "sum" / "runs.jsonl.gz"
    assert main([str(sweep), "--summaries", str(file)]) == 0
    assert main([str(file)]) == 0
    by_dir, by_file = sweep / "report", file.parent / "report"
    assert (by_file / "wave.md").read_bytes() == (by_dir / "wave.md").read_bytes()
    assert all(_is_png(d / n) for d in (by_dir, by_file) for n in ("wave_frontier.png", "wave_heatmap.png"))


def test_tables_alone_write_the_same_wave_md_and_no_figure(sweep: Path, tmp_path: Path):
    """write_wave(figures=False), which gdro-report --no-figures runs (and scripts/rebuild_results.py with it), writes
    wave.md to the byte as with its figures, and draws nothing."""
    runs = find_runs(sweep)
    made, _ = write_wave(runs, tmp_path / "tables", figures=False)
    assert [p.name for p in made] == ["wave.md"] and not list((tmp_path / "tables").glob("*.png"))
    full, _ = write_wave(runs, tmp_path / "full")
    assert made[0].read_bytes() == full[-1].read_bytes()
    assert main([str(sweep), "--no-figures", "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "wave.md").read_bytes() == made[0].read_bytes()
    assert not list((tmp_path / "cli").glob("*.png"))


def test_eval_rows_follow_the_rows_they_were_read_from(sweep: Path):
    """SweepRun.eval_rows keeps its answer for one rows list at one length: a replaced or longer list is read again."""
    run = find_runs(sweep)[0]
    first = run.eval_rows()
    assert first and first == [r for r in run.rows if any(k.startswith("eval/") for k in r)]
    expected = list(first)
    first.clear()  # the caller's copy: the run's answer is unchanged
    assert run.eval_rows() == expected
    run.rows = [r for r in run.rows if not any(k.startswith("eval/") for k in r)]
    assert run.eval_rows() == []
    run.rows.append({"step": 99, "eval/mean@4": 50.0})
    assert run.eval_rows() == [{"step": 99, "eval/mean@4": 50.0}]


def test_skipped_without_keys(tmp_path: Path, capsys):
    root = tmp_path / "sw"
    make_run(root, "grpo/0", "uniform", "fixed", 0, 80.0)  # no per-bin key at all
    made, skipped = write_wave(find_runs(root), tmp_path / "a")
    assert made == [] and skipped == [f"skipped {n}: no run logs difficulty/batch/ / gdro/share/<bin>"
                                      for n in ("wave_frontier.png", "wave_heatmap.png", "wave.md")]
    _run(root, "rg/0", "rollout-gdro", 0, lambda b, s: 4.0, info=False)  # shares, no mixed-group key
    made, skipped = write_wave(find_runs(root), tmp_path / "b")
    assert [p.name for p in made] == ["wave_heatmap.png"]
    assert skipped == [f"skipped {n}: no run logs difficulty/informative/<bin> (no frontier)"
                       for n in ("wave_frontier.png", "wave.md")]
    assert main([str(root)]) == 0
    err = capsys.readouterr().err
    assert "gdro-report: wave: skipped wave.md: no run logs difficulty/informative/<bin>" in err


def test_unseen_phase_is_the_first_pass_when_the_config_gives_the_pool(tmp_path: Path):
    d = _run(tmp_path / "sw", "rg/0", "rollout-gdro", 0, lambda b, s: 8.0 if b == _front(s) else 2.0)
    meta = json.loads((d / "run.json").read_text())
    meta["config"] |= {"data": {"train_size": 12}, "prompts_per_step": 4}  # a pass over the pool: 3 steps
    (d / "run.json").write_text(json.dumps(meta))
    (t,) = collect(find_runs(tmp_path / "sw")).groups["uniform+rollout-gdro"]
    assert list(after_unseen(t)) == [False] * 3 + [True] * (STEPS - 3)
    assert run_wave(t)["steps"] == STEPS - 3


@pytest.mark.slow
def test_notebook_draws_the_wave(sweep: Path, monkeypatch: pytest.MonkeyPatch):
    """notebooks/curriculum.ipynb on this sweep: both wave figures and the report's wave.md, to the byte."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from tests.conftest import REPO

    assert main([str(sweep)]) == 0
    monkeypatch.setenv("GDRO_SWEEP_DIR", str(sweep))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nb = nbformat.read(REPO / "notebooks" / "curriculum.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "write_wave" in c.source]
    data = [o.get("data", {}) for o in cell.outputs]
    assert sum("image/png" in d for d in data) == 2 and not [o for o in cell.outputs if o.output_type == "stream"]
    shown = next(d["text/markdown"] for d in data if "text/markdown" in d)
    assert shown == (sweep / "report" / "wave.md").read_text(encoding="utf-8")
