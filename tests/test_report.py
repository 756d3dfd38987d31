"""gdro.report on a synthetic sweep with known numbers."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from gdro import report
from gdro.report import aggregate, bin_sort_key, find_runs, main, make_figures, mean_ci, t975, write_table

TARGETS = {
    "uniform": "gdro.samplers.UniformSampler",
    "prompt-gdro": "gdro.samplers.PromptGDRO",
    "fixed": "gdro.allocators.FixedAllocator",
    "rollout-gdro": "gdro.allocators.RolloutGDRO",
    "sqrt": "gdro.allocators.SqrtAllocator",
}
BINS = ["0", "1", "10", "2", "unseen"]  # deliberately not in numeric order


def make_run(root: Path, name: str, sampler: str, allocator: str, seed: int, final_mean: float,
             *, final_pass: float | None = None, level2: float = 50.0, gdro: bool = False,
             with_choices: bool = True, steps: int = 6) -> Path:
    d = root / name
    d.mkdir(parents=True)
    config = {"seed": seed, "sampler": {"_target_": TARGETS[sampler]}, "allocator": {"_target_": TARGETS[allocator]}}
    choices = {"sampler": sampler, "allocator": allocator} if with_choices else {}
    (d / "run.json").write_text(json.dumps({"config": config, "choices": choices}))
    final_pass = final_mean + 5 if final_pass is None else final_pass
    rows = []
    for step in range(steps + 1):
        row = {"step": step, "train/loss": 0.1}
        if gdro:
            for i, b in enumerate(BINS):
                row[f"gdro/weight/{b}"] = (i + step) % 3 / 3
                row[f"gdro/share/{b}"] = 1 / len(BINS)
                row[f"gdro/rollouts/{b}"] = 4 + i
            row.update({"gdro/lead_lag": 0.1 * step, "gdro/wse": 0.2, "gdro/wse_uniform": 0.25, "gdro/mu": 1.0})
        if step % 3 == 0:
            frac = step / steps
            row.update({
                "eval/mean@8": final_mean * frac, "eval/pass@8": final_pass * frac,
                "eval/mean@8/level_1": 90.0, "eval/pass@8/level_1": 95.0,
                "eval/mean@8/level_2": level2, "eval/pass@8/level_2": level2 + 10,
                "eval/len_mean": 7.0, "eval/n_problems": 100.0,
            })
        rows.append(row)
    with (d / "metrics.jsonl").open("w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        fh.write('{"step": 99, "eval/mean@8": ')  # half-written line of a live run: ignored
    return d


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    for s, m in enumerate((80.0, 82.0, 84.0)):
        make_run(root, f"grpo/{s}", "uniform", "fixed", s, m, level2=40.0 + 2 * s)
    for s, m in enumerate((85.0, 86.0, 87.0)):
        make_run(root, f"pgdro/{s}", "prompt-gdro", "fixed", s, m, gdro=True, with_choices=(s != 1))
    make_run(root, "rg/0", "uniform", "rollout-gdro", 0, 90.0, final_pass=99.0, gdro=True)
    return root


def _row(rows, name):
    return next(r for r in rows if r["name"] == name)


def test_t_table():
    assert t975(1) == 12.706 and t975(2) == 4.303 and t975(30) == 2.042
    assert t975(35) == 2.042 and t975(1000) == 1.96
    with pytest.raises(ValueError):
        t975(0)


def test_find_runs_methods_and_order(sweep: Path):
    runs = find_runs(sweep)
    assert len(runs) == 7
    assert [r.name for r in runs] == ["GRPO"] * 3 + ["Prompt-GDRO"] * 3 + ["Rollout-GDRO"]
    assert [r.seed for r in runs[:3]] == [0, 1, 2]
    # pgdro/1 has empty choices: method derived from the _target_ class names
    assert runs[4].path.name == "1" and runs[4].method == "prompt-gdro+fixed"
    assert all(r.rows[-1]["step"] == 6 for r in runs)  # the broken last line was skipped


def test_aggregate_means_ci_gain(sweep: Path):
    rows = aggregate(find_runs(sweep))
    assert [r["name"] for r in rows] == ["GRPO", "Prompt-GDRO", "Rollout-GDRO"]
    g, p, rg = (_row(rows, n) for n in ("GRPO", "Prompt-GDRO", "Rollout-GDRO"))
    half = 4.303 * 2.0 / math.sqrt(3)  # s = 2 for (80, 82, 84); s = 1 for (85, 86, 87)
    m, ci, n = g["metrics"]["eval/mean@8"]
    assert (m, n) == (pytest.approx(82.0), 3) and ci == pytest.approx(half, abs=1e-9)
    m, ci, n = p["metrics"]["eval/mean@8"]
    assert m == pytest.approx(86.0) and ci == pytest.approx(4.303 / math.sqrt(3))
    assert g["metrics"]["eval/pass@8"][0] == pytest.approx(87.0)
    assert p["metrics"]["eval/pass@8"][0] == pytest.approx(91.0)
    # per level
    assert g["metrics"]["eval/mean@8/level_2"][:2] == (pytest.approx(42.0), pytest.approx(half))
    assert g["metrics"]["eval/mean@8/level_1"][:2] == (pytest.approx(90.0), pytest.approx(0.0))
    # non-metric eval keys are not table columns
    assert "eval/len_mean" not in g["metrics"] and "eval/n_problems" not in g["metrics"]
    # relative pass@8 gain over GRPO's mean
    assert g["gain"]["eval/pass@8"] == pytest.approx(0.0)
    assert p["gain"]["eval/pass@8"] == pytest.approx(100 * (91 - 87) / 87)
    assert rg["gain"]["eval/pass@8"] == pytest.approx(100 * (99 - 87) / 87)
    # n = 1: no interval
    m, ci, n = rg["metrics"]["eval/mean@8"]
    assert (m, n) == (90.0, 1) and math.isnan(ci)
    assert g["seeds"] == [0, 1, 2] and p["n"] == 3


def test_aggregate_best_row(sweep: Path):
    rows = aggregate(find_runs(sweep), which="best")  # curves rise, so best == final here
    assert _row(rows, "GRPO")["metrics"]["eval/mean@8"][0] == pytest.approx(82.0)
    with pytest.raises(ValueError):
        aggregate(find_runs(sweep), which="median")


def test_benchmark_layout_and_no_baseline(tmp_path: Path):
    d = tmp_path / "s" / "a"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"config": {"seed": 3}, "choices": {"sampler": "prompt-gdro"}}))
    (d / "metrics.jsonl").write_text(json.dumps({"step": 5, "eval/aime/pass@16": 30.0, "eval/math/mean@4": 60.0}))
    rows = aggregate(find_runs(tmp_path / "s"))
    assert rows[0]["method"] == "prompt-gdro+fixed"
    assert set(rows[0]["metrics"]) == {"eval/aime/pass@16", "eval/math/mean@4"}
    assert rows[0]["gain"] == {"eval/aime/pass@16": None}  # no GRPO row to compare with


def test_write_table(sweep: Path, tmp_path: Path):
    rows = aggregate(find_runs(sweep))
    md, csv_path = write_table(rows, tmp_path / "out")
    text = md.read_text()
    lines = text.strip().splitlines()
    assert lines[0].startswith("| Method | n | mean@8 | pass@8 | Δpass@8 vs GRPO |")
    assert lines[2].startswith("| GRPO | 3 | 82.0 ± 5.0 | 87.0 ± 5.0 | – |")  # 4.303 * 2 / sqrt(3) = 4.97
    assert "| Prompt-GDRO | 3 | 86.0 ± 2.5 | 91.0 ± 2.5 | +4.6% |" in text
    assert "| Rollout-GDRO | 1 | 90.0 (n=1) | 99.0 (n=1) | +13.8% |" in text
    with csv_path.open() as fh:
        recs = list(csv.DictReader(fh))
    assert [r["name"] for r in recs] == ["GRPO", "Prompt-GDRO", "Rollout-GDRO"]
    for col in ("mean@8_mean", "mean@8_ci", "mean@8_n", "pass@8_mean", "pass@8/level_2_ci", "pass@8_gain_pct"):
        assert col in recs[0]
    assert float(recs[0]["mean@8_mean"]) == pytest.approx(82.0)
    assert float(recs[0]["mean@8_ci"]) == pytest.approx(4.303 * 2 / math.sqrt(3))
    assert recs[2]["mean@8_ci"] == "" and recs[2]["mean@8_n"] == "1"
    assert float(recs[1]["pass@8_gain_pct"]) == pytest.approx(100 * 4 / 87)


def _is_png(p: Path) -> bool:
    return p.is_file() and p.stat().st_size > 1000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figures(sweep: Path, tmp_path: Path):
    out = tmp_path / "figs"
    made = make_figures(find_runs(sweep), out)
    names = {"eval_curves.png", "bin_share_heatmap.png", "weights_heatmap.png", "rollouts_heatmap.png",
             "lead_lag.png", "wse.png"}
    assert {p.name for p in made} == names
    assert all(_is_png(out / n) for n in names)


def test_figures_skipped_without_keys(sweep: Path, tmp_path: Path):
    grpo_only = [r for r in find_runs(sweep) if r.name == "GRPO"]
    made = make_figures(grpo_only, tmp_path / "figs")
    assert [p.name for p in made] == ["eval_curves.png"]
    assert not (tmp_path / "figs" / "weights_heatmap.png").exists()


def test_bin_order():
    assert sorted(BINS, key=bin_sort_key) == ["0", "1", "2", "10", "unseen"]


def test_main(sweep: Path, capsys):
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "| GRPO | 3 |" in out
    assert (sweep / "report" / "table.md").is_file() and _is_png(sweep / "report" / "wse.png")
    # running again does not pick up the report dir as a run
    assert len(find_runs(sweep)) == 7


def test_main_no_runs(tmp_path: Path, capsys):
    empty = tmp_path / "nothing_here"
    empty.mkdir()
    assert main([str(empty)]) == 2
    assert str(empty) in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2


def test_mean_ci_small():
    assert mean_ci([])[2] == 0
    m, ci, n = mean_ci([1.0, 3.0])
    assert (m, n) == (2.0, 2) and ci == pytest.approx(12.706 * math.sqrt(2) / math.sqrt(2))
    assert report.format_cell(2.0, math.nan, 1) == "2.0 (n=1)"
