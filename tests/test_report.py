"""gdro.report on a synthetic sweep with known numbers."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from scipy import stats

from gdro import report
from gdro.cli.report import main
from gdro.report import aggregate, bin_sort_key, find_runs, make_figures, mean_ci, t975, write_table

TARGETS = {
    "uniform": "gdro.controllers.samplers.UniformSampler",
    "prompt-gdro": "gdro.controllers.samplers.PromptGDRO",
    "fixed": "gdro.controllers.allocators.FixedAllocator",
    "rollout-gdro": "gdro.controllers.allocators.RolloutGDRO",
    "sqrt": "gdro.controllers.allocators.SqrtAllocator",
    "oracle-levels": "gdro.controllers.samplers.OracleLevelSampler",
}
BINS = ["0", "1", "10", "2", "unseen"]  # deliberately not in numeric order


def make_run(root: Path, name: str, sampler: str, allocator: str, seed: int, final_mean: float,
             *, final_pass: float | None = None, level2: float = 50.0, gdro: bool = False,
             with_choices: bool = True, steps: int = 6, logged: int | None = None,
             status: str | None = "completed", error: str | None = None) -> Path:
    """A run dir as the trainer writes it: ``logged`` (default ``steps``) of ``steps`` steps in metrics.jsonl,
    run.json with ``status`` and ``last_step`` (``status=None``: a run.json written before the trainer
    recorded them)."""
    d = root / name
    d.mkdir(parents=True)
    logged = steps if logged is None else logged
    config = {"seed": seed, "steps": steps, "sampler": {"_target_": TARGETS[sampler]},
              "allocator": {"_target_": TARGETS[allocator]}}
    choices = {"sampler": sampler, "allocator": allocator} if with_choices else {}
    meta = {"config": config, "choices": choices, "git": {"commit": "abc", "dirty": False}}
    if status is not None:
        meta.update({"status": status, "last_step": logged} | ({"error": error} if error else {}))
    (d / "run.json").write_text(json.dumps(meta))
    final_pass = final_mean + 5 if final_pass is None else final_pass
    rows = []
    for step in range(logged + 1):
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


T2 = stats.t.ppf(0.975, 2)  # 4.3027: the 95% half-width factor of 3 seeds


def test_t_quantiles_are_scipys():
    assert t975(1) == stats.t.ppf(0.975, 1) and round(t975(2), 3) == 4.303 and round(t975(30), 3) == 2.042
    assert t975(35) == stats.t.ppf(0.975, 35) and round(t975(1000), 3) == 1.962
    with pytest.raises(ValueError):
        t975(0)


def test_find_runs_methods_and_order(sweep: Path):
    runs = find_runs(sweep)
    assert len(runs) == 7
    assert [r.name for r in runs] == ["GRPO"] * 3 + ["Prompt-GDRO"] * 3 + ["Rollout-GDRO"]
    assert [r.seed for r in runs[:3]] == [0, 1, 2]
    # pgdro/1 has empty choices: method derived from the _target_ class names
    assert runs[4].path.name == "1" and runs[4].method == "prompt-gdro+fixed"
    assert all(r.rows[-1]["step"] == 6 and r.complete and r.status == "completed" for r in runs)


def test_aggregate_means_ci_gain(sweep: Path):
    rows = aggregate(find_runs(sweep))
    assert [r["name"] for r in rows] == ["GRPO", "Prompt-GDRO", "Rollout-GDRO"]
    g, p, rg = (_row(rows, n) for n in ("GRPO", "Prompt-GDRO", "Rollout-GDRO"))
    half = T2 * 2.0 / math.sqrt(3)  # s = 2 for (80, 82, 84); s = 1 for (85, 86, 87)
    m, ci, n = g["metrics"]["eval/mean@8"]
    assert (m, n) == (pytest.approx(82.0), 3) and ci == pytest.approx(half, abs=1e-9)
    m, ci, n = p["metrics"]["eval/mean@8"]
    assert m == pytest.approx(86.0) and ci == pytest.approx(T2 / math.sqrt(3))
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
    meta = {"config": {"seed": 3, "steps": 5}, "choices": {"sampler": "prompt-gdro"}, "status": "completed",
            "last_step": 5}
    (d / "run.json").write_text(json.dumps(meta))
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
    assert float(recs[0]["mean@8_ci"]) == pytest.approx(T2 * 2 / math.sqrt(3))
    assert recs[2]["mean@8_ci"] == "" and recs[2]["mean@8_n"] == "1"
    assert float(recs[1]["pass@8_gain_pct"]) == pytest.approx(100 * 4 / 87)


def _is_png(p: Path) -> bool:
    return p.is_file() and p.stat().st_size > 1000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figures(sweep: Path, tmp_path: Path):
    out = tmp_path / "figs"
    made = make_figures(find_runs(sweep), out)
    names = {"eval_curves.png", "bin_share_heatmap.png", "weights_heatmap.png", "rollouts_heatmap.png", "wse.png"}
    assert {p.name for p in made} == names
    assert all(_is_png(out / n) for n in names)


def test_figures_skipped_without_keys(sweep: Path, tmp_path: Path):
    grpo_only = [r for r in find_runs(sweep) if r.name == "GRPO"]
    made = make_figures(grpo_only, tmp_path / "figs")
    assert [p.name for p in made] == ["eval_curves.png"]
    assert not (tmp_path / "figs" / "weights_heatmap.png").exists()


def test_batch_bins_of_every_sampler_make_the_share_heatmap_and_the_mean_bin_figure(tmp_path: Path):
    """The classifier logs the batch's bins whatever the sampler: GRPO gets a bin-share heatmap and a mean-bin line."""
    d = make_run(tmp_path / "sw", "grpo/0", "uniform", "fixed", 0, 80.0)
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows[1:]:
        r |= {f"difficulty/batch/{b}": 1 / len(BINS) for b in BINS} | {"difficulty/batch_mean_bin": 5.0 - r["step"] / 3}
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    made = {p.name for p in make_figures(find_runs(tmp_path / "sw"), tmp_path / "figs")}
    assert made == {"eval_curves.png", "bin_share_heatmap.png", "mean_bin.png"}
    assert _is_png(tmp_path / "figs" / "mean_bin.png")


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
    assert (m, n) == (2.0, 2) and ci == pytest.approx(stats.t.ppf(0.975, 1) * math.sqrt(2) / math.sqrt(2))
    assert report.format_cell(2.0, math.nan, 1) == "2.0 (n=1)"


# ---------------------------------------------------------------- finished vs crashed runs


def _truncate_last_line(path: Path) -> None:
    text = path.read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    path.write_text(text[: len(text.rstrip("\n")) - len(last) // 2])  # a half-written row, no newline


def _append_second_run(d: Path) -> None:
    """A second run written into the same run dir: its rows follow the first run's in metrics.jsonl."""
    first = (d / "metrics.jsonl").read_text()
    second = make_run(d / "again", "x", "uniform", "fixed", 0, 10.0, steps=3)
    (d / "metrics.jsonl").write_text(first + (second / "metrics.jsonl").read_text())
    for f in second.iterdir():
        f.unlink()
    second.rmdir()
    second.parent.rmdir()


def add_bad_runs(sweep: Path) -> Path:
    """One run dir for each way a run can fail to finish or get corrupted, added to ``sweep``.

    Every bad run reports far-off numbers (10.0), so pooling any of them would move its method's mean.
    """
    make_run(sweep, "grpo/killed", "uniform", "fixed", 3, 10.0, steps=40, logged=2, status="interrupted")
    make_run(sweep, "grpo/failed", "uniform", "fixed", 4, 10.0, logged=3, status="failed",
             error="CUDA OOM\nTraceback (most recent call last): ...")
    make_run(sweep, "grpo/live", "uniform", "fixed", 5, 10.0, logged=4, status="running")
    make_run(sweep, "grpo/legacy_short", "uniform", "fixed", 6, 10.0, logged=2, status=None)
    _truncate_last_line(make_run(sweep, "grpo/truncated", "uniform", "fixed", 7, 10.0) / "metrics.jsonl")
    # a completed run.json whose metrics stop early
    short = make_run(sweep, "pgdro/short", "prompt-gdro", "fixed", 3, 10.0, logged=3)
    meta = json.loads((short / "run.json").read_text())
    (short / "run.json").write_text(json.dumps(meta | {"last_step": 6}))
    # a non-JSON line and a non-UTF-8 line in the middle
    mid = make_run(sweep, "pgdro/bad_lines", "prompt-gdro", "fixed", 4, 10.0) / "metrics.jsonl"
    lines = mid.read_bytes().splitlines(keepends=True)
    lines[2] = b"not json at all\n"
    lines[4] = b'{"step": 4, "train/loss": "\xff\xfe"}\n'
    mid.write_bytes(b"".join(lines))
    # an empty metrics.jsonl and a corrupt run.json
    (make_run(sweep, "pgdro/empty", "prompt-gdro", "fixed", 5, 10.0) / "metrics.jsonl").write_text("")
    corrupt = make_run(sweep, "rg/corrupt", "uniform", "rollout-gdro", 1, 10.0)
    (corrupt / "run.json").write_text('{"config": {"se')
    # a re-used run dir: a legacy run of 3 steps appended to a complete one (steps 0..6, 0..3)
    _append_second_run(make_run(sweep, "rg/appended", "uniform", "rollout-gdro", 2, 90.0, status=None))
    # a run.json that is valid JSON but not an object
    (make_run(sweep, "rg/list", "uniform", "rollout-gdro", 3, 10.0) / "run.json").write_text("[1, 2]")
    return sweep


@pytest.fixture
def messy(sweep: Path) -> Path:
    return add_bad_runs(sweep)


REASONS = {  # run dir -> what its reason must say
    "grpo/killed": "GRPO seed 3: status interrupted at step 2 of 40",
    "grpo/failed": "GRPO seed 4: status failed at step 3 of 6: CUDA OOM",
    "grpo/live": "GRPO seed 5: status running at step 4 of 6",
    "grpo/legacy_short": "GRPO seed 6: no status; last step 2 of 6",
    "grpo/truncated": "GRPO seed 7: metrics.jsonl: line 7 (the last) is not valid JSON (truncated?)",
    "pgdro/short": "Prompt-GDRO seed 3: status completed (last_step 6) but metrics.jsonl ends at step 3 of 6",
    "pgdro/bad_lines": "Prompt-GDRO seed 4: metrics.jsonl: line 3 is not valid JSON (truncated?); "
                       "line 5 is not valid UTF-8",
    "pgdro/empty": "metrics.jsonl is empty",
    "rg/corrupt": "corrupt run.json: ",
    "rg/appended": "metrics.jsonl holds more than one run: the step goes back from 6 (line 7) to 0 (line 8)",
    "rg/list": "corrupt run.json: ",
}


def test_scan_names_every_bad_run(messy: Path):
    runs, skipped = report.scan_runs(messy)

    def rel(p: Path) -> str:
        return str(p.relative_to(messy))

    bad = {rel(r.path): f"{r.label}: " + "; ".join(r.problems) for r in runs if not r.complete}
    bad |= {rel(s.path): s.reason for s in skipped}
    assert set(bad) == set(REASONS)
    for d, want in REASONS.items():
        assert bad[d].startswith(want), (d, bad[d])
    assert bad["grpo/truncated"].endswith(
        "(truncated?): the last line is malformed, and the final evaluation may be that row; "
        "status completed (last_step 6) but metrics.jsonl ends at step 5 of 6")
    assert str(messy / "rg" / "corrupt" / "run.json") in bad["rg/corrupt"]
    # unusable dirs are not runs at all; the incomplete ones load with their good rows
    assert {rel(s.path) for s in skipped} == {"pgdro/empty", "rg/corrupt", "rg/appended", "rg/list"}
    bad_lines = next(r for r in runs if r.path.name == "bad_lines")
    assert [r["step"] for r in bad_lines.rows] == [0, 1, 3, 5, 6]


def test_default_pools_only_completed_runs(sweep: Path):
    clean = aggregate(find_runs(sweep))
    add_bad_runs(sweep)
    assert len(find_runs(sweep)) == 7 and all(r.complete for r in find_runs(sweep))
    assert aggregate(find_runs(sweep)) == clean  # no bad run moved a mean, an n or a seed list


def test_main_lists_left_out_runs_and_still_reports(messy: Path, capsys):
    assert main([str(messy), "--no-figures"]) == 0  # the table and its notes: figures are test_main's
    captured = capsys.readouterr()
    assert "| GRPO | 3 | 82.0 ± 5.0 |" in captured.out
    assert "| Prompt-GDRO | 3 | 86.0 ± 2.5 |" in captured.out
    table = (messy / "report" / "table.md").read_text()
    assert table.splitlines()[2].startswith("| GRPO | 3 | 82.0 ± 5.0 |")
    assert "## Runs left out of the table" in table and "--include-incomplete" in table
    for d, want in REASONS.items():
        assert f"`{d}`: {want}" in table, d
        err_line = next(line for line in captured.err.splitlines() if f"`{d}`" in line)
        assert err_line.startswith("gdro-report: left out: ") and want in err_line
    with (messy / "report" / "table.csv").open() as fh:
        assert [r["n_incomplete"] for r in csv.DictReader(fh)] == ["0", "0", "0"]


def test_include_incomplete_pools_them_marked(messy: Path, capsys):
    assert main([str(messy), "--include-incomplete", "--no-figures"]) == 0
    captured = capsys.readouterr()
    table = (messy / "report" / "table.md").read_text()
    # GRPO: 3 complete + killed, failed, live, legacy_short, truncated; Prompt-GDRO: 3 + short, bad_lines
    assert "| GRPO | 8 (5 incomplete) |" in table and "| Prompt-GDRO | 5 (2 incomplete) |" in table
    assert "| Rollout-GDRO | 1 |" in table
    assert "## Incomplete runs in the table (`--include-incomplete`)" in table
    included, left = table.split("## Incomplete runs in the table")[1], table.split("## Incomplete runs")[0]
    for d in ("pgdro/empty", "rg/corrupt", "rg/appended", "rg/list"):  # unusable: still left out
        assert f"`{d}`: {REASONS[d]}" in left and d not in included
    for d in ("grpo/killed", "grpo/truncated", "pgdro/bad_lines"):
        assert f"`{d}`: {REASONS[d]}" in included
        assert f"included although incomplete: `{d}`" in captured.err
    with (messy / "report" / "table.csv").open() as fh:
        assert [r["n_incomplete"] for r in csv.DictReader(fh)] == ["5", "2", "0"]
    killed = next(r for r in find_runs(messy, include_incomplete=True) if r.path.name == "killed")
    assert killed.status == "interrupted" and not killed.complete


def test_legacy_runs_judged_by_steps(tmp_path: Path):
    root = tmp_path / "legacy"
    make_run(root, "done", "uniform", "fixed", 0, 80.0, status=None)
    make_run(root, "short", "uniform", "fixed", 1, 10.0, logged=5, status=None)
    runs, skipped = report.scan_runs(root)
    assert not skipped
    assert {r.path.name: r.problems for r in runs} == {"done": [], "short": ["no status; last step 5 of 6"]}
    assert [r.path.name for r in find_runs(root)] == ["done"]


def test_interrupted_reason_names_the_signal_and_a_stale_last_step(tmp_path: Path):
    d = make_run(tmp_path / "s", "a", "uniform", "fixed", 0, 80.0, steps=40, logged=7, status="interrupted")
    meta = json.loads((d / "run.json").read_text())
    # the trainer updates last_step at each checkpoint: rows logged after it are in metrics.jsonl
    (d / "run.json").write_text(json.dumps(meta | {"last_step": 5, "interrupted_by": "SIGTERM"}))
    (run,) = report.scan_runs(tmp_path / "s")[0]
    assert run.problems == ["status interrupted (SIGTERM) at step 7 of 40 (run.json last_step 5)"]


def test_completed_status_checked_against_last_step(tmp_path: Path):
    d = make_run(tmp_path / "s", "a", "uniform", "fixed", 0, 80.0)
    meta = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps(meta | {"last_step": 4}))
    (run,) = report.scan_runs(tmp_path / "s")[0]
    assert run.problems == ["status completed (last_step 4) but metrics.jsonl ends at step 6 of 6"]
    (d / "run.json").write_text(json.dumps(meta | {"status": "exploded"}))
    (run,) = report.scan_runs(tmp_path / "s")[0]
    assert run.problems[0].startswith("unknown status 'exploded'")


def test_all_runs_left_out(tmp_path: Path, capsys):
    root = tmp_path / "s"
    make_run(root, "killed", "uniform", "fixed", 0, 10.0, logged=1, status="interrupted")
    (make_run(root, "empty", "uniform", "fixed", 1, 10.0) / "metrics.jsonl").write_text("\n")
    assert main([str(root)]) == 2
    err = capsys.readouterr().err
    assert "`killed`: GRPO seed 0: status interrupted at step 1 of 6" in err
    assert "`empty`: metrics.jsonl is empty" in err
    assert f"no completed runs (dirs with run.json + metrics.jsonl) found under {root}; 2 left out" in err
    assert main([str(root), "--include-incomplete"]) == 0


def test_all_lines_malformed_and_unreadable(tmp_path: Path):
    d = make_run(tmp_path / "s", "a", "uniform", "fixed", 0, 80.0)
    (d / "metrics.jsonl").write_bytes(b"{\n\xff\n[1]\n")
    (skip,) = report.scan_runs(tmp_path / "s")[1]
    assert skip.reason == ("metrics.jsonl has no valid row (3 lines malformed: line 1 is not valid JSON "
                           "(truncated?); line 2 is not valid UTF-8; line 3 is not a JSON object)")
    (d / "run.json").write_bytes(b'{"config": "\xff"}')
    (skip,) = report.scan_runs(tmp_path / "s")[1]
    assert skip.reason.startswith(f"corrupt run.json: {d / 'run.json'}: not valid UTF-8")


def test_a_run_label_names_its_row(tmp_path: Path):
    """label=... (run config) keeps variants of one sampler+allocator apart in the table; unlabelled runs keep
    their sampler+allocator name."""
    root = tmp_path / "sw"
    make_run(root, "a/0", "prompt-gdro", "fixed", 0, 80.0)
    d = make_run(root, "b/0", "prompt-gdro", "fixed", 0, 90.0)
    meta = json.loads((d / "run.json").read_text())
    meta["config"]["label"] = "pgdro-frontier"
    (d / "run.json").write_text(json.dumps(meta))
    rows = aggregate(find_runs(root))
    assert sorted(r["name"] for r in rows) == ["Prompt-GDRO", "pgdro-frontier"]


# ---------------------------------------------------------------- paired comparison against GRPO


def test_parse_levels_and_tail_name():
    assert report.parse_levels("7-12") == [7, 8, 9, 10, 11, 12]
    assert report.parse_levels("3, 5,8") == [3, 5, 8]
    assert report.tail_name([7, 8, 9]) == "levels_7-9"
    assert report.tail_name([3, 5, 8]) == "levels_3,5,8"
    for bad in ("x", "9-7", "0-3", "", "7-"):
        with pytest.raises(ValueError, match=f"got {bad!r}"):
            report.parse_levels(bad)


def _with_oracle(sweep: Path) -> Path:
    for s in range(3):
        make_run(sweep, f"oracle/{s}", "oracle-levels", "fixed", s, 88.0, level2=60.0)
    return sweep


def test_tail_metric_is_the_mean_of_its_levels(sweep: Path):
    runs = find_runs(sweep)
    assert report.add_tail_metrics(runs, [1, 2]) == ["eval/mean@8/levels_1-2", "eval/pass@8/levels_1-2"]
    grpo1 = next(r for r in runs if r.method == "uniform+fixed" and r.seed == 1)
    final = grpo1.eval_rows()[-1]
    assert final["eval/mean@8/levels_1-2"] == pytest.approx((90.0 + 42.0) / 2)
    assert final["eval/pass@8/levels_1-2"] == pytest.approx((95.0 + 52.0) / 2)
    assert report.add_tail_metrics(runs, [1, 3]) == []  # level 3 is not logged: no tail metric


def test_paired_comparison_known_numbers(sweep: Path):
    runs = find_runs(_with_oracle(sweep))
    tail = report.add_tail_metrics(runs, [1, 2])[0]
    rows, info = report.paired_comparison(runs, ["eval/mean@8", tail], tail_key=tail)
    by = {r["name"]: r for r in rows}
    # GRPO finals 80, 82, 84; Prompt-GDRO 85, 86, 87 (same seeds): differences 5, 4, 3
    m, ci, n = by["Prompt-GDRO"]["delta"]["eval/mean@8"]
    assert (m, n) == (pytest.approx(4.0), 3) and ci == pytest.approx(t975(2) * 1.0 / math.sqrt(3))
    # tail = mean(level 1, level 2): GRPO 65, 66, 67; Prompt-GDRO 70; oracle 75 -> deltas 4 and 9 on average
    assert info == {"tail_key": tail, "threshold": pytest.approx(66.0)}
    assert by["Prompt-GDRO"]["delta"][tail][0] == pytest.approx(4.0)
    assert by["Oracle: uniform over levels (control)"]["delta"][tail][0] == pytest.approx(9.0)
    assert by["Prompt-GDRO"]["recovery"] == pytest.approx(4.0 / 9.0)
    assert by["Rollout-GDRO"]["pairs"] == 1 and by["Rollout-GDRO"]["delta"]["eval/mean@8"][2] == 1
    assert by["GRPO"]["delta"] == {} and by["GRPO"]["recovery"] is None
    # learned = final minus the step-0 evaluation (0 here): GRPO 80, 82, 84
    assert by["GRPO"]["gain"][0] == pytest.approx(82.0) and by["GRPO"]["gain"][2] == 3
    # the tail is flat over steps here: every run at or above 66 reaches it at its first evaluation (step 0)
    assert by["Prompt-GDRO"]["steps"] == [0.0, 0.0, 0.0]
    assert sorted(by["GRPO"]["steps"], key=lambda x: x is None) == [0.0, 0.0, None]  # 65 never reaches 66


def test_steps_to_rollouts_spent_and_mean_bin_drift(tmp_path: Path):
    d = make_run(tmp_path, "r", "uniform", "fixed", 0, 85.0, steps=6)
    run = find_runs(tmp_path)[0]
    # eval/mean@8 = 85 * step / 6 at steps 0, 3, 6: 0, 42.5, 85
    assert report.steps_to(run, "eval/mean@8", 40.0) == 3.0
    assert report.steps_to(run, "eval/mean@8", 42.5) == 3.0
    assert report.steps_to(run, "eval/mean@8", 85.1) is None
    assert report.rollouts_spent(run) == 0.0
    assert report.mean_bin_drift(run) is None  # not logged
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows:  # steps 1-2 unseen; after it 4 steps: 5, 6, 6, 7 -> quarters of one step: 5 and 7
        if r["step"] >= 1:
            r["rollout/n_total"] = 256 if r["step"] % 2 else 192
            r["difficulty/batch/unseen"] = 0.5 if r["step"] <= 2 else 0.0
            r["difficulty/batch_mean_bin"] = {1: 0, 2: 0, 3: 5, 4: 6, 5: 6, 6: 7}[r["step"]]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = find_runs(tmp_path)[0]
    assert report.rollouts_spent(run) == 3 * 256 + 3 * 192
    assert report.mean_bin_drift(run) == (5.0, 7.0)


def test_main_writes_the_paired_table(sweep: Path, capsys):
    root = _with_oracle(sweep)
    assert main([str(root), "--tail-levels", "1-2", "--no-figures"]) == 0
    text = (root / "report" / "paired.md").read_text()
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "recovery of the oracle's Δmean@8/levels_1-2" in lines["Method"]
    assert "steps to mean@8/levels_1-2 ≥ 66.0" in lines["Method"]
    # Δmean@8's family: Prompt-GDRO (5, 4, 3: p 0.020) and the oracle (8, 6, 4: p 0.035), both rejected by Holm;
    # Prompt-GDRO first, at level 1 - 0.05/2: t_{0.9875, 2} / sqrt(3) = 3.58; the oracle at 95%: 4.303 * 2 / sqrt(3)
    assert "| 3 | 86.0 ± 2.5 | +4.0 ± 3.6 (p_H 0.04) |" in lines["Prompt-GDRO"] and "| 0.44 |" in lines["Prompt-GDRO"]
    assert "| +6.0 ± 5.0 (p_H 0.04) |" in lines["Oracle: uniform over levels (control)"]
    assert "| 1 | 90.0 (n=1) | +10.0 (n=1) |" in lines["Rollout-GDRO"]  # one pair: left out of the family
    assert "Holm-adjusted over the 2 rows of each column" in text and "(--primary area) is in compute.md" in text
    assert "mean@8 learned (from step 0)" in lines["Method"]
    assert "| at start (3/3) |" in lines["Prompt-GDRO"] and "| at start (2/3) |" in lines["GRPO"]
    assert "“at start” in “steps to mean@8/levels_1-2 ≥ 66.0”: the run's step-0 evaluation" in text
    table = (root / "report" / "table.md").read_text()
    assert "mean@8/levels_1-2" in table
    assert "paired against GRPO" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([str(root), "--tail-levels", "7-"])
    assert "--tail-levels: levels must look like '7-12'" in capsys.readouterr().err


def test_mechanism_table_from_runs_with_known_numbers(tmp_path: Path):
    """mechanism.md: per method, each run's mean over the steps after the unseen phase, then mean ± CI over runs."""
    from gdro.report.mechanism import mechanism_markdown, mechanism_rows

    sw = tmp_path / "sw"
    # steps 1-8; step 1's batch holds unseen prompts (left out); steps 2-8: informative = 0.25 + 0.05 * seed,
    # except the last quarter (steps 7-8) 0.45 + 0.05 * seed; per-bin "0" = 0.1 * (seed + 1); wse_ratio fixed = 1,
    # square-root rows 0.8 + 0.1 * seed; Prompt-GDRO logs lead_lag = -1 (first half) / -2 (second)
    for method, sampler, allocator in (("grpo", "uniform", "fixed"), ("sqrt", "uniform", "sqrt"),
                                       ("pg", "prompt-gdro", "fixed")):
        for seed in (0, 1):
            d = make_run(sw, f"{method}/{seed}", sampler, allocator, seed, 80.0, steps=8)
            rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
            for r in rows[1:]:
                s = r["step"]
                r["difficulty/batch/unseen"] = 0.5 if s == 1 else 0.0
                r["difficulty/informative"] = (0.45 if s >= 7 else 0.25) + 0.05 * seed
                r["difficulty/informative/0"] = 0.1 * (seed + 1)
                r["difficulty/wse_ratio"] = 0.8 + 0.1 * seed if method == "sqrt" else 1.0
                if method == "pg":
                    r["gdro/lead_lag"] = -1.0 if s <= 4 else -2.0
                if method == "sqrt":  # the compute ledger: 16 rollouts a step, 4 discarded from step 5 on
                    r["compute/rollouts"], r["compute/discarded_rollouts"] = 16.0, 4.0 if s >= 5 else 0.0
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows, bins = mechanism_rows(find_runs(sw))
    by = {r["method"]: r for r in rows}
    assert bins == ["0"] and set(by) == {"uniform+fixed", "uniform+sqrt", "prompt-gdro+fixed"}
    grpo = by["uniform+fixed"]
    # seed 0: steps 2-8 -> (5 * 0.25 + 2 * 0.45) / 7; seed 1: + 0.05
    s0 = (5 * 0.25 + 2 * 0.45) / 7
    assert grpo["informative"][0] == pytest.approx(s0 + 0.025) and grpo["informative"][2] == 2
    # 7 steps -> quarters of 1 step: first = step 2, last = step 8
    assert grpo["informative_first"][0] == pytest.approx(0.275) and grpo["informative_last"][0] == pytest.approx(0.475)
    assert grpo["per_bin"]["0"][0] == pytest.approx(0.15)
    assert grpo["wse_ratio"][0] == 1.0 and grpo["wse_below_1"] == (0, 2) and grpo["lead_lag"][0][2] == 0
    assert by["uniform+sqrt"]["wse_ratio"][0] == pytest.approx(0.85) and by["uniform+sqrt"]["wse_below_1"] == (2, 2)
    # steps 2-8: 7 x 16 generated, 4 x 4 discarded -> 96 / 112 trained; no ledger in the other rows
    assert by["uniform+sqrt"]["kept"][0] == pytest.approx(96 / 112) and grpo["kept"][2] == 0
    lag_first, lag_last = by["prompt-gdro+fixed"]["lead_lag"]
    assert lag_first[0] == -1.0 and lag_last[0] == -2.0
    md = mechanism_markdown(rows, bins)
    assert "| GRPO | 2 | 33.2 ± " in md and "0.850 ± 0.635 (2/2)" in md and "-1.00 ± 0.00 → -2.00 ± 0.00" in md
    assert "| 85.7 ± 0.0 |" in md and "-2.00 ± 0.00 | – |" in md
    assert main([str(sw), "--no-figures"]) == 0 and (sw / "report" / "mechanism.md").read_text().count("| GRPO |") == 2


def test_the_unseen_phase_is_one_pass_over_the_pool_for_every_row(tmp_path: Path):
    """With the pool size in the config, the analysis starts after ceil(train_size / prompts_per_step) steps for
    every row (a label-reading sampler may hold never-seen prompts in its batch for much longer)."""
    d = make_run(tmp_path / "sw", "oracle/0", "uniform", "fixed", 0, 80.0, steps=12)
    meta = json.loads((d / "run.json").read_text())
    meta["config"] |= {"data": {"train_size": 30}, "prompts_per_step": 8}  # 4 steps per pass
    (d / "run.json").write_text(json.dumps(meta))
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows[1:]:
        r |= {"difficulty/batch/unseen": 0.1, "difficulty/batch_mean_bin": float(r["step"]),
              "difficulty/informative": r["step"] / 100}
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = find_runs(tmp_path / "sw")[0]
    assert run.first_epoch() == 4
    assert [r["step"] for r in run.after_first_pass("difficulty/informative")] == list(range(5, 13))
    assert report.mean_bin_drift(run) == (5.5, 11.5)  # quarters of 8 steps: 5-6 and 11-12
