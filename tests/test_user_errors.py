"""Bad inputs to gdro-train, gdro-eval and gdro-report: each is one line on stderr and a non-zero exit, never a
traceback, and a refused rerun leaves the run's record as it was (issue #20). The entry points run in this process
(``sys.argv`` set, ``SystemExit`` caught), on real files: the shipped tiny model, copied and cut; real run dirs."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from gdro.cli import evaluate as evaluator
from gdro.cli import report
from gdro.cli import train as cli
from gdro.compose.build import build_training
from gdro.models.source import TINY_DIR
from gdro.run.lock import RunDirLock, hold
from tests.conftest import FAST, compose_cfg

FIX = Path(__file__).resolve().parent / "fixtures" / "benchmarks"
EVAL = ["eval.k=1", "eval.max_problems=1", "model.max_new_tokens=4", "threads=1"]


@pytest.fixture(autouse=True)
def _no_full_error(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)


def _main(main, argv: list[str], monkeypatch, capsys) -> tuple[int, list[str]]:
    """Run an entry point; its exit status and its stderr lines (stdout is the log)."""
    monkeypatch.setattr(sys, "argv", argv)
    try:
        code = main()
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, [line for line in err.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    """Model dirs a cut save or a damaged disk leaves: config.json alone; weights cut in half."""
    root = tmp_path_factory.mktemp("models")
    partial = root / "partial"
    partial.mkdir()
    shutil.copy(TINY_DIR / "config.json", partial)
    cut = root / "cut"
    shutil.copytree(TINY_DIR, cut)
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (root / "afile").write_text("x")
    (root / "empty_rows.jsonl").write_text("{}\n{}\n")
    (root / "no_question.jsonl").write_text('{"answer": "1"}\n')
    return {"partial": partial, "cut": cut, "file": root / "afile", "empty_rows": root / "empty_rows.jsonl",
            "no_question": root / "no_question.jsonl"}


SLOW = pytest.mark.slow  # inputs of our own beyond the issue's: each costs a Hydra start, the default suite is lean
EVAL_CASES = [  # (overrides, exit status, what the one line says); {partial} etc. name the model_dirs fixture's
    (["checkpoint={partial}"], 2, "is not a complete model directory: no weights and no tokenizer"),
    (["checkpoint={cut}"], 2, "model.safetensors' is unreadable, truncated or corrupt"),
    (["out={file}"], 2, "out={file}: is a file"),
    (["benchmarks=[{{name:math500,data_files:{no_question}}}]"], 2, "has no usable problems"),
    (["benchmarks=nope"], 2, "benchmarks=nope: not a suite (paper, toy)"),
    pytest.param(["out={file}/sub"], 74, "error: Not a directory (ENOTDIR): {file}", marks=SLOW),
    pytest.param(["benchmarks=[{{name:math500,data_files:{empty_rows}}}]"], 2, "no valid row (2 lines malformed",
                 marks=SLOW),
    pytest.param(["benchmarks=[{{name:math500,data_files:/nope.jsonl}}]"], 2, "no such file '/nope.jsonl'",
                 marks=SLOW),
    pytest.param(["checkpoint={run}"], 2, "is a gdro run dir; its final policy is", marks=SLOW),
    pytest.param(["checkpoint={nowhere}"], 2, "is not a model directory (no config.json)", marks=SLOW),
    pytest.param(["benchmarks=[]"], 2, "benchmarks=[]: not a suite", marks=SLOW),
]


@pytest.mark.parametrize(("overrides", "status", "says"), EVAL_CASES)
def test_a_bad_gdro_eval_input_is_one_line(overrides, status, says, model_dirs, tmp_path, monkeypatch, capsys):
    names = {**{k: str(v) for k, v in model_dirs.items()}, "run": str(tmp_path / "run"),
             "nowhere": str(tmp_path / "nowhere")}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    argv = ["gdro-eval", *EVAL, *(o.format(**names) for o in overrides), f"hydra.run.dir={tmp_path}/e"]
    code, lines = _main(evaluator.main, argv, monkeypatch, capsys)
    assert code == status and len(lines) == 1 and says.format(**names) in lines[0], lines
    assert not (tmp_path / "e" / "eval.json").exists()


def test_the_benchmarks_list_form_its_error_suggests_works(tmp_path, monkeypatch, capsys):
    listed = f"benchmarks=[{{name: math500, data_files: {FIX / 'math500.jsonl'}, cache_dir: {tmp_path / 'c'}}}]"
    code, _ = _main(evaluator.main, ["gdro-eval", *EVAL, "model.max_prompt_len=1024", listed,
                                     f"hydra.run.dir={tmp_path}"], monkeypatch, capsys)
    assert code is None
    record = json.loads((tmp_path / "eval.json").read_text())
    assert list(record["benchmarks"]) == ["math500"]
    assert evaluator._suite_alias(["benchmarks=paper", "benchmarks=toy,paper", "benchmarks=[toy]"]) == [
        "suite=paper", "suite=toy,paper", "benchmarks=[toy]"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, list[str]]:
    """A completed 2-step run (with its final policy) and the overrides that made it. It ran under the run dir's
    lock, as gdro-train runs it: its released ``gdro.lock`` stays in the dir (a run dir without one is another case,
    where a start first waits for a live holder to re-create it: the last test of this module)."""
    run_dir = tmp_path_factory.mktemp("finished")
    overrides = [*FAST, "checkpoint.every=1", "save_final=true"]
    with hold(run_dir):
        training = build_training(compose_cfg(overrides), run_dir)
        try:
            training.fit()
        finally:
            training.logger.close()
    assert (run_dir / "gdro.lock").is_file()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    return run_dir, overrides


def _damage_policy(d: Path) -> None:
    (d / "checkpoints" / "step_000002" / "policy.pt").write_bytes(b"cut")


def _cut_metrics(d: Path) -> None:
    (d / "metrics.jsonl").write_text("")


def _damage_meta(d: Path) -> None:
    (d / "checkpoints" / "step_000002" / "meta.json").write_text("{")


@pytest.mark.parametrize(("damage", "extra", "says"), [  # how the dir or the command is bad; what the line says
    (None, ["optim.lr=0.5"], "cannot resume"),
    (_damage_policy, [], "policy.pt is unreadable"),  # found while restoring, inside fit(): before it began
    (_cut_metrics, [], "fewer than the"),
    pytest.param(None, ["steps=1"], "is already at step 2", marks=SLOW),
    pytest.param(_damage_meta, [], "meta.json is unreadable", marks=SLOW),
    pytest.param(None, ["lock.wait_s=-1"], "lock.wait_s=-1: must be >= 0 seconds", marks=SLOW),
])
def test_a_refused_rerun_is_one_line_and_leaves_a_completed_run_completed(finished, damage, extra, says, tmp_path,
                                                                          monkeypatch, capsys):
    src, overrides = finished
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    record = (run_dir / "run.json").read_bytes()
    if damage is not None:
        damage(run_dir)
    code, lines = _main(cli.train, ["gdro-train", *overrides, *extra, f"hydra.run.dir={run_dir}"], monkeypatch, capsys)
    assert code == 2 and len(lines) == 1 and says in lines[0], lines
    assert (run_dir / "run.json").read_bytes() == record, "a refused rerun changed run.json"


@pytest.mark.parametrize(("model", "says"), [("cut", "model.safetensors' is unreadable, truncated or corrupt"),
                                             ("partial", "no weights and no tokenizer (a save cut short?")])
def test_a_fresh_run_on_a_cut_or_partial_model_is_one_line(model_dirs, model, says, tmp_path, monkeypatch, capsys):
    code, lines = _main(cli.train, ["gdro-train", *FAST, f"model.name_or_path={model_dirs[model]}",
                                    f"hydra.run.dir={tmp_path}"], monkeypatch, capsys)
    assert code == 2 and len(lines) == 1 and says in lines[0]
    assert not (tmp_path / "run.json").exists()  # nothing began


def test_bad_gdro_report_inputs_are_one_line(finished, tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    shutil.copytree(finished[0], sweep / "0")
    (tmp_path / "afile").write_text("x")
    cases = [
        ([str(sweep), "--out", str(tmp_path / "afile")], 2, "--out"),
        ([str(sweep), "--out", str(tmp_path / "afile" / "x")], 74, f"Not a directory (ENOTDIR): {tmp_path / 'afile'}"),
        ([str(sweep), "--tail-levels", "7-"], 2, "--tail-levels"),
        ([str(sweep), "--which", "worst"], 2, "invalid choice: 'worst'"),
        ([str(sweep), "--bogus"], 2, "unrecognized arguments: --bogus"),
        ([str(tmp_path / "nowhere")], 2, "no completed runs"),
        ([], 2, "the following arguments are required: SWEEP_DIR"),
    ]
    for argv, status, says in cases:
        monkeypatch.setattr(sys, "argv", ["gdro-report", *argv])
        try:
            code = report.main(argv)
        except SystemExit as exit_:
            code = exit_.code
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("gdro-report: left out")]
        assert "Traceback" not in err and code == status and len(lines) == 1 and says in lines[0], (argv, err)


def test_a_second_command_in_the_process_does_not_log_into_the_first_runs_file(tmp_path, monkeypatch, capsys):
    """Hydra leaves its job's log file handler (``<run dir>/cli.log``, opened at the first line) on the root logger;
    gdro-train detaches it when it ends, so that a second command in the same process (a notebook, a test) neither
    writes its first lines into the first run's log nor fails on them once that run dir has been removed."""
    import functools
    import logging

    # the lock's wait for a live holder to re-create a removed gdro.lock: shorter than its 5 s (what it logs is tested)
    monkeypatch.setattr(RunDirLock, "__init__", functools.partialmethod(RunDirLock.__init__, claim_grace_s=0.5))
    first, second = tmp_path / "first", tmp_path / "second"
    code, lines = _main(cli.train, ["gdro-train", *FAST, f"hydra.run.dir={first}"], monkeypatch, capsys)
    assert code in (0, None) and (first / "cli.log").is_file(), lines
    assert not [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    shutil.copytree(first, second)
    (second / "gdro.lock").unlink()  # a run dir without its lock file: the lock logs before the job starts
    shutil.rmtree(first)
    size = (second / "cli.log").stat().st_size
    code, lines = _main(cli.train, ["gdro-train", *FAST, f"hydra.run.dir={second}"], monkeypatch, capsys)
    assert code in (0, None), lines  # finished already: nothing to do
    assert not first.exists() and (second / "cli.log").stat().st_size > size
