"""Run summaries (gdro/report/summary.py, issue #47): gdro-report on a file of summaries writes the same tables and
figures, to the byte, as on the run dirs; a summary holds run.json's provenance; a bad line is one line, status 2."""

from __future__ import annotations

import ast
import gzip
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gdro.cli.report
from gdro.cli.report import main
from gdro.report import load_summaries, scan_runs, summarize, write_summaries
from gdro.report.paper_table import COLUMNS
from gdro.report.summary import METRIC_KEYS, SCHEMA, metrics_rows
from tests.conftest import REPO
from tests.test_report import _with_oracle, make_run

REPORT_FILES = ("table.md", "table.csv", "paired.md", "compute.md", "mechanism.md", "paper_mechanism.md", "table1.md")
KEYS = ["schema", "run", "sweep", "method", "label", "seed", "status", "problems", "last_step", "choices", "overrides",
        "commit", "dirty", "versions", "machine", "world_size", "data", "config", "evaluation", "metrics"]
VERSIONS = {"python": "3.11.7", "torch": "2.13.0+cpu"}
MACHINE = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "platform": "Linux"}


def _enrich(d: Path, seed: int, offset: float) -> None:
    """What a real run holds beyond tests/test_report.py's rows: the difficulty, compute and rollout keys the report
    reads (with thirds and a NaN: floats must come back exact), keys it does not read (train/, time/, reward/),
    run.json's provenance and pool size, and .hydra/overrides.yaml."""
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows[1:]:
        s = r["step"]
        r |= {"difficulty/batch/unseen": 0.5 if s == 1 else 0.0, "difficulty/batch/0": (s + seed) / 3 % 1,
              "difficulty/batch/1": 1 / 7, "difficulty/batch_mean_bin": s / 3 + offset,
              "difficulty/informative": 0.3 + 0.01 * s + offset / 100, "difficulty/informative/0": (s % 3) / 3,
              "difficulty/wse_ratio": math.nan if s == 1 else 0.9 + offset / 50, "rollout/n_total": 32.0,
              "rollout/len_mean": 5 + s / 3 + offset, "compute/rollouts": 32.0, "compute/rollouts_per_prompt/0": 4.0,
              "time/step_s": 0.1 * s, "reward/mean": s / 9, "difficulty/pool/0": 0.25}
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    meta = json.loads((d / "run.json").read_text())
    meta["config"] |= {"data": {"train_size": 30}, "prompts_per_step": 8}
    meta |= {"versions": VERSIONS, "machine": MACHINE, "world_size": 1, "data": {"train": 30, "test": 9}}
    (d / "run.json").write_text(json.dumps(meta))
    (d / ".hydra").mkdir()
    (d / ".hydra" / "overrides.yaml").write_text(f"- seed={seed}\n- steps=6\n")


@pytest.fixture
def rich(tmp_path: Path) -> Path:
    """tests/test_report.py's sweep with an oracle row, every run enriched, and a gdro-eval result in one run."""
    root = tmp_path / "sweep"
    for s, m in enumerate((80.0, 82.0, 84.0)):
        _enrich(make_run(root, f"grpo/{s}", "uniform", "fixed", s, m, level2=40.0 + 2 * s), s, s / 3)
    for s, m in enumerate((85.0, 86.0, 87.0)):
        _enrich(make_run(root, f"pgdro/{s}", "prompt-gdro", "fixed", s, m, gdro=True), s, 1 + s / 3)
    _enrich(make_run(root, "rg/0", "uniform", "rollout-gdro", 0, 90.0, final_pass=99.0, gdro=True), 0, 2.0)
    _with_oracle(root)
    (root / "grpo/0/eval").mkdir()
    metrics = {f"eval/{b}/mean@8": 10.0 + i / 3 for i, (b, _) in enumerate(COLUMNS)} | {"eval/pass@8": 55.5}
    (root / "grpo/0/eval/eval.json").write_text(json.dumps({"metrics": metrics, "k": 8, "model": "x"}))
    return root


@pytest.fixture
def no_figures(monkeypatch):
    """The tables alone: the figures (most of a report's time) are compared by the slow tests."""
    monkeypatch.setattr(gdro.cli.report, "make_figures", lambda runs, out: [])
    monkeypatch.setattr(gdro.cli.report, "fig_compute_curves", lambda *a: False)
    monkeypatch.setattr(gdro.cli.report, "write_paper_figures", lambda runs, out: (None, [], []))


def _report(args: list[str], capsys) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


def assert_same_report(a: Path, b: Path, expect: tuple[str, ...] = REPORT_FILES) -> list[str]:
    """Both dirs hold the same files, byte for byte (tables and PNGs); returns their names."""
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert set(expect) <= set(names), set(expect) - set(names)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    return names


def _same_report_from_summaries(sweep: Path, tmp_path: Path, capsys, expect: tuple[str, ...]) -> list[str]:
    summaries = tmp_path / "committed" / "results.jsonl"  # no --out: the report goes to committed/report
    opts = ["--tail-levels", "1-2"]
    out = _report([str(sweep), "--out", str(tmp_path / "a"), "--summaries", str(summaries), *opts], capsys)
    assert out.rstrip().endswith(", results.jsonl")  # named among the files written
    assert len(summaries.read_text().splitlines()) == 10
    # the tail keys are added by the report, never stored: a report without --tail-levels has none either
    assert "levels_1-2" not in summaries.read_text()
    _report([str(summaries), *opts], capsys)
    return assert_same_report(tmp_path / "a", tmp_path / "committed" / "report", expect)


def test_the_tables_from_summaries_are_the_tables_from_the_run_dirs(rich: Path, tmp_path: Path, capsys, no_figures):
    names = _same_report_from_summaries(rich, tmp_path, capsys, tuple(REPORT_FILES[:-2]) + ("table1.md",))
    assert "paper_mechanism.md" not in names  # (stubbed: the slow test below has it)
    assert "GRPO (1 seed)" in (tmp_path / "a" / "table1.md").read_text()  # from the summary's evaluation


@pytest.mark.slow
def test_the_report_from_summaries_is_the_report_from_the_run_dirs(rich: Path, tmp_path: Path, capsys):
    """Tables and figures, byte for byte (a figure's title names its run dir: <sweep>/<run>)."""
    names = _same_report_from_summaries(rich, tmp_path, capsys, REPORT_FILES)
    assert {"eval_curves.png", "weights_heatmap.png", "informative.png", "compute_curves.png", "wse_ratio.png"
            } <= set(names)


def test_a_summary_holds_the_provenance_and_exactly_the_rows_read(rich: Path):
    runs, _ = scan_runs(rich)
    run = next(r for r in runs if r.path == rich / "grpo" / "0")
    s = summarize(run, rich)
    assert list(s) == KEYS and s["schema"] == SCHEMA
    assert (s["run"], s["sweep"], s["method"], s["seed"], s["label"]) == ("grpo/0", "sweep", "uniform+fixed", 0,
                                                                           "GRPO seed 0")
    meta = json.loads((run.path / "run.json").read_text())
    assert (s["commit"], s["dirty"], s["versions"], s["machine"]) == ("abc", False, VERSIONS, MACHINE)
    assert s["config"] == meta["config"] and s["choices"] == meta["choices"] and s["overrides"] == ["seed=0", "steps=6"]
    assert s["status"] == "completed" and s["problems"] == [] and s["last_step"] == 6
    assert s["evaluation"]["k"] == 8 and s["evaluation"]["metrics"]["eval/pass@8"] == 55.5
    # the rows, as the file has them, less the keys no report module or pilot reads; floats exact, NaN kept
    line = json.dumps(s)
    rows = metrics_rows(json.loads(line)["metrics"])
    kept = [{k: v for k, v in r.items() if not k.startswith(("train/", "time/", "reward/"))} for r in run.rows]
    assert any(k.startswith("difficulty/pool/") for r in kept for k in r)  # the pool's bins (#48's pilot criteria)
    assert json.dumps(rows) == json.dumps(kept) and "NaN" in json.dumps(rows)
    assert [list(r) for r in rows] == [list(r) for r in kept]  # each row's key order too
    assert all(k.startswith(METRIC_KEYS) for r in rows for k in r)


def test_gzip_summaries_are_the_same_lines_and_reproducible(rich: Path, tmp_path: Path):
    runs, _ = scan_runs(rich)
    plain, gz = write_summaries(runs, tmp_path / "s.jsonl", rich), write_summaries(runs, tmp_path / "s.jsonl.gz", rich)
    assert gzip.decompress(gz.read_bytes()) == plain.read_bytes()
    first = gz.read_bytes()
    assert write_summaries(list(reversed(runs)), gz, rich).read_bytes() == first  # sorted, no timestamp
    a, b = load_summaries(plain)[0], load_summaries(gz)[0]
    assert [(r.path.relative_to(plain).as_posix(), r.method, r.seed, r.status, r.problems) for r in a] == [
        (r.path.relative_to(gz).as_posix(), r.method, r.seed, r.status, r.problems) for r in b]
    assert [r.path.relative_to(plain) for r in a] == [Path("sweep") / r.path.relative_to(rich) for r in runs]


def test_incomplete_runs_keep_their_reasons(tmp_path: Path, capsys, no_figures):
    """--include-incomplete stores the incomplete runs that load; read back with or without the flag, the report
    pools or lists them exactly as from the run dirs."""
    sw = tmp_path / "sw"
    for s in range(2):
        make_run(sw, f"grpo/{s}", "uniform", "fixed", s, 80.0 + s)
        make_run(sw, f"pg/{s}", "prompt-gdro", "fixed", s, 85.0 + s)
    make_run(sw, "pg/killed", "prompt-gdro", "fixed", 3, 10.0, steps=40, logged=4, status="interrupted")
    make_run(sw, "pg/failed", "prompt-gdro", "fixed", 4, 10.0, logged=3, status="failed", error="CUDA OOM\nTrace")
    s = tmp_path / "s.jsonl"
    _report([str(sw), "--include-incomplete", "--out", str(tmp_path / "a"), "--summaries", str(s)], capsys)
    assert len(s.read_text().splitlines()) == 6
    _report([str(s), "--include-incomplete", "--out", str(tmp_path / "b")], capsys)
    assert_same_report(tmp_path / "a", tmp_path / "b", ("table.md", "paired.md"))
    assert "`pg/failed`: Prompt-GDRO seed 4: status failed at step 3 of 6: CUDA OOM" in (tmp_path / "b" / "table.md"
                                                                                        ).read_text()
    _report([str(sw), "--out", str(tmp_path / "c")], capsys)
    _report([str(s), "--out", str(tmp_path / "d")], capsys)
    assert_same_report(tmp_path / "c", tmp_path / "d", ("table.md",))
    assert "## Runs left out of the table" in (tmp_path / "d" / "table.md").read_text()


def _good_line(tmp_path: Path) -> str:
    d = make_run(tmp_path / "sw", "grpo/0", "uniform", "fixed", 0, 80.0)
    write_summaries(scan_runs(d.parent.parent)[0], tmp_path / "one.jsonl", d.parent.parent)
    return (tmp_path / "one.jsonl").read_text()


BAD = {  # a second line, and what the error says about it
    "truncated": (lambda good: good[: len(good) // 2], "line 2: is not valid JSON (truncated?)"),
    "schema": (lambda good: good.replace(SCHEMA, "gdro.run-summary/0"),
               "line 2: schema 'gdro.run-summary/0', not 'gdro.run-summary/1'"),
    "no schema": (lambda good: '{"run": "x"}\n', "line 2: schema None"),
    "not an object": (lambda good: "[1, 2]\n", "line 2: is not a JSON object"),
    "bad rows": (lambda good: re.sub(r'"rows":\[\[0,', '"rows":[[7,', good), "line 2: 'metrics': row 0 is not"),
    "no config": (lambda good: good.replace('"config":', '"konfig":'), "line 2: 'config' is missing, not an object"),
    "escapes": (lambda good: good.replace('"run":"grpo/0"', '"run":"../../etc"'), "line 2: run '../../etc' of sweep 'sw' is not a path"),
    "twice": (lambda good: good, "line 2: run sw/grpo/0 again (line 1); a run counts once"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_an_unusable_line_is_one_line_naming_the_file_and_the_line(tmp_path: Path, capsys, case):
    good = _good_line(tmp_path)
    make, says = BAD[case]
    path = tmp_path / "s.jsonl"
    path.write_text(good + make(good))
    runs, skipped = load_summaries(path)
    assert len(runs) == 1 and len(skipped) == 1 and says in skipped[0].reason
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and err.startswith(f"gdro-report: {path}: {says[:20]}"), err
    assert not (tmp_path / "report").exists()


def test_a_bad_gzip_and_an_empty_file_are_one_line(tmp_path: Path, capsys):
    gz = tmp_path / "s.jsonl.gz"
    gz.write_bytes(gzip.compress(_good_line(tmp_path).encode())[:-9])
    with pytest.raises(SystemExit) as exc:
        main([str(gz)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and f"{gz}: not a whole gzip file" in err
    (tmp_path / "empty.jsonl").write_text("")
    assert main([str(tmp_path / "empty.jsonl")]) == 2
    assert capsys.readouterr().err == f"gdro-report: no completed runs in {tmp_path / 'empty.jsonl'}\n"


def test_summaries_option_errors(tmp_path: Path, capsys):
    line = _good_line(tmp_path)
    (tmp_path / "s.jsonl").write_text(line)
    for argv, status, says in (
            ([str(tmp_path / "s.jsonl"), "--summaries", str(tmp_path / "t.jsonl")], 2, "is a summaries file already"),
            ([str(tmp_path / "sw"), "--summaries", str(tmp_path)], 2, "is a directory"),
            ([str(tmp_path / "sw"), "--summaries", str(tmp_path / "s.jsonl" / "x.jsonl")], 74, str(tmp_path / "s.jsonl"))):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        assert code == status and err.count("\n") == 1 and says in err, (argv, err)
    assert not (tmp_path / "sw" / "report").exists()  # refused before anything was written


def test_every_metric_key_the_report_reads_is_kept():
    """Each metric-key string in gdro/report/*.py falls under METRIC_KEYS: a report module that starts reading a new
    key fails here until summary.py keeps it (else a report from summaries would silently differ)."""
    not_metrics = {"eval/eval.json", "figures/", "tables/"}  # a gdro-eval file; W&B payload names (table1.py)
    strings = {node.value for p in (REPO / "gdro" / "report").glob("*.py") if p.name != "summary.py"
               for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    keys = {s for s in strings if re.fullmatch(r"step|[a-z_]+/[\w@/.-]*", s)} - not_metrics
    assert {"rollout/n_total", "difficulty/informative", "gdro/", "compute/tokens_cum", "eval/"} <= keys
    assert not [k for k in keys if not k.startswith(METRIC_KEYS)]


@pytest.mark.slow
def test_real_runs_give_the_same_report_from_their_summaries(tmp_path: Path, capsys):
    """Two real gdro-train runs (experiment=smoke, GRPO and Prompt-GDRO, a multirun): the report from their summaries
    is the report from their dirs; each summary holds run.json's commit, versions and machine, and is small."""
    sweep = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "gdro.cli.train", "-m", "experiment=smoke", "progress=false",
                           "sampler=uniform,prompt-gdro", "data.train_size=16",  # one pass: 2 steps (mechanism.md)
                           f"hydra.sweep.dir={sweep}"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = tmp_path / "results.jsonl"
    _report([str(sweep), "--out", str(tmp_path / "a"), "--summaries", str(summaries)], capsys)
    _report([str(summaries), "--out", str(tmp_path / "b")], capsys)
    names = assert_same_report(tmp_path / "a", tmp_path / "b", ("table.md", "table.csv", "paired.md", "compute.md",
                                                                "mechanism.md", "paper_mechanism.md"))
    assert "eval_curves.png" in names
    lines = summaries.read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        s = json.loads(line)
        meta = json.loads((sweep / s["run"] / "run.json").read_text())
        assert s["sweep"] == "sweep" and s["commit"] == meta["git"]["commit"] and s["dirty"] == meta["git"]["dirty"]
        assert s["versions"] == meta["versions"] and s["machine"] == meta["machine"] and s["machine"]["cpu_capability"]
        assert f"sampler={s['choices']['sampler']}" in s["overrides"] and s["config"] == meta["config"]
        # measured: ~7.0 KB for experiment=smoke's 3 steps (a 250-step toy run: ~69 KB), 3.2 KB of it the config
        assert len(line) < 12_000, len(line)


def test_a_summary_speaks_of_no_home_directory(tmp_path: Path, monkeypatch):
    """A resolved config holds ``${oc.env:HOME}``'s value (model=smollm2-135m's fallback dir): the summary, which is
    committed and shared, writes every path under the home directory from ``~``; other strings stay as they are."""
    from gdro.report.summary import home_as_tilde

    home = tmp_path / "home" / "someone"
    monkeypatch.setenv("HOME", str(home))
    d = make_run(tmp_path / "sw", "grpo/0", "uniform", "fixed", 0, 80.0)
    cfg = json.loads((d / "run.json").read_text())
    cfg["config"]["model"] = {"fallback": f"{home}/.cache/gdro/smollm2-135m-instruct", "name_or_path": "tiny"}
    cfg["config"]["note"] = [str(home), f"{home}x/not-under-it", "relative/path"]
    (d / "run.json").write_text(json.dumps(cfg))
    runs, _ = scan_runs(tmp_path / "sw")
    line = gzip.decompress(write_summaries(runs, tmp_path / "s.jsonl.gz").read_bytes()).decode()
    assert str(home) + "/" not in line
    summary = json.loads(line)
    assert summary["config"]["model"]["fallback"] == "~/.cache/gdro/smollm2-135m-instruct"
    assert summary["config"]["note"] == ["~", f"{home}x/not-under-it", "relative/path"]
    assert home_as_tilde({"a": ["/", 1.5, None]}, home="/") == {"a": ["/", 1.5, None]}  # a root home: unchanged
