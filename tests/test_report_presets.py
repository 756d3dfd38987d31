"""gdro/report/presets.py (each toy protocol's hard tail, gdro-report's default --tail-levels) and
gdro/report/sweep_dir.py (the notebook's sweep dir: resolved where its caller meant it, or refused)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from gdro.cli.report import main
from gdro.report import find_runs
from gdro.report.presets import TAIL_LEVELS, choose_tail_levels, preset_tail_levels, sweep_experiment
from gdro.report.sweep_dir import SweepDirError, caller_dir, load_sweep, resolve_sweep_dir
from tests.conftest import REPO

LEVELS = range(1, 13)
METHODS = {"grpo": ("uniform", "fixed"), "pgdro": ("prompt-gdro", "fixed")}


def make_run(root: Path, name: str, sampler: str, allocator: str, seed: int, experiment: str | None,
             gain: float, steps: int = 6) -> Path:
    """A completed run dir as the trainer writes it: ``choices`` with ``experiment``, eval rows at steps 0, 3, 6 with
    every level 1-12 (level L at step s: (100 - 8 L) s / steps + gain, so levels 7-8 and 7-12 give different tails),
    100 generated tokens a step."""
    d = root / name
    d.mkdir(parents=True)
    config = {"seed": seed, "steps": steps, "sampler": {"_target_": f"x.{sampler}"},
              "allocator": {"_target_": f"x.{allocator}"}}
    choices = {"sampler": sampler, "allocator": allocator} | ({"experiment": experiment} if experiment else {})
    (d / "run.json").write_text(json.dumps({"config": config, "choices": choices, "status": "completed",
                                            "last_step": steps}))
    rows = []
    for step in range(steps + 1):
        row: dict = {"step": step, "train/loss": 0.1} | ({"compute/tokens_cum": 100.0 * step} if step else {})
        if step % 3 == 0:
            levels = {lv: max(0.0, (100 - 8 * lv) * step / steps + gain * step / steps + seed) for lv in LEVELS}
            row |= {f"eval/mean@8/level_{lv}": v for lv, v in levels.items()}
            row |= {f"eval/pass@8/level_{lv}": min(100.0, v + 10) for lv, v in levels.items()}
            row |= {"eval/mean@8": sum(levels.values()) / len(levels),
                    "eval/pass@8": min(100.0, sum(levels.values()) / len(levels) + 10)}
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def make_sweep(root: Path, experiment: str | None = "toy-paper-regime", seeds: tuple[int, ...] = (0, 1, 2)) -> Path:
    """GRPO and Prompt-GDRO (ahead by 3 + seed points on every level) of one experiment, seeds 0-2."""
    for m, (sampler, allocator) in METHODS.items():
        for s in seeds:
            make_run(root, f"{m}/{s}", sampler, allocator, s, experiment, 0.0 if m == "grpo" else 3.0 + s)
    return root


def _reproduce_toy():
    spec = importlib.util.spec_from_file_location("reproduce_toy", REPO / "scripts" / "reproduce_toy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_each_experiment_tail_is_its_reproduce_toy_presets():
    """scripts/reproduce_toy.py's presets pass gdro-report the tail of their experiment (#48's pilots alone look at
    the hardest level only: level 9 of the toy, level 4 of experiment=smollm2-frontier, whose table's tail the pilot
    sets)."""
    presets = _reproduce_toy().PRESETS
    seen = set()
    for name, p in presets.items():
        exp = next((o.split("=", 1)[1] for o in p["base"] if o.startswith("experiment=")), None)
        report = p.get("report", [])
        if exp is None or "--tail-levels" not in report or name.endswith("-frontier-pilot"):
            continue
        assert report[report.index("--tail-levels") + 1] == TAIL_LEVELS[exp], name
        seen.add(exp)
    assert seen == set(TAIL_LEVELS)
    assert TAIL_LEVELS == {"toy-curriculum": "7-8", "toy-frontier": "7-12", "toy-paper-regime": "7-12",
                           "toy-moving-frontier": "8-9", "smollm2-frontier": "2-4"}


@pytest.mark.parametrize("experiment", sorted(TAIL_LEVELS))
def test_a_sweep_of_one_preset_gets_its_tail(tmp_path: Path, experiment: str):
    runs = find_runs(make_sweep(tmp_path / "sw", experiment, seeds=(0,)))
    assert sweep_experiment(runs) == experiment
    assert preset_tail_levels(runs) == TAIL_LEVELS[experiment]
    spec, line = choose_tail_levels(None, runs)
    assert spec == TAIL_LEVELS[experiment] and f"experiment={experiment}" in line and "not given" in line
    assert choose_tail_levels("3,5", runs, name="GDRO_TAIL_LEVELS") == ("3,5", "GDRO_TAIL_LEVELS 3,5: as given")


def test_no_tail_when_mixed_unknown_or_unrecorded(tmp_path: Path):
    mixed = make_sweep(tmp_path / "mixed", "toy-curriculum", seeds=(0,))
    make_run(mixed, "other/0", "uniform", "rollout-gdro", 0, "toy-frontier", 1.0)
    assert preset_tail_levels(find_runs(mixed)) is None
    assert preset_tail_levels(find_runs(make_sweep(tmp_path / "paper", "paper", seeds=(0,)))) is None
    assert preset_tail_levels(find_runs(make_sweep(tmp_path / "none", None, seeds=(0,)))) is None
    half = make_sweep(tmp_path / "half", "toy-curriculum", seeds=(0,))
    make_run(half, "other/0", "uniform", "rollout-gdro", 0, None, 1.0)  # a run without the choice: unknown
    assert preset_tail_levels(find_runs(half)) is None
    assert preset_tail_levels([]) is None
    spec, line = choose_tail_levels(None, find_runs(mixed), name="GDRO_TAIL_LEVELS")
    assert spec is None and "no single known experiment" in line and "no tail metric" in line


def _report(argv: list[str], capsys) -> tuple[str, str]:
    assert main([*argv, "--no-figures"]) == 0  # the tables and the tail line: the figures are test_report.py's
    out = capsys.readouterr()
    return out.out, out.err


def test_gdro_report_defaults_to_the_sweeps_tail_and_says_so(tmp_path: Path, capsys):
    sweep = make_sweep(tmp_path / "sw")
    _, err = _report([str(sweep), "--out", str(tmp_path / "default"), "--summaries", str(tmp_path / "s.jsonl.gz")],
                     capsys)
    lines = [line for line in err.splitlines() if "--tail-levels" in line]
    assert lines == [("gdro-report: --tail-levels 7-12: not given, the hard tail of experiment=toy-paper-regime's "
                     "protocol (gdro/report/presets.py; --tail-levels sets another)")], err
    _, err = _report([str(sweep), "--out", str(tmp_path / "given"), "--tail-levels", "7-12"], capsys)
    assert "--tail-levels" not in err
    for name in ("table.md", "paired.md", "compute.md"):
        assert (tmp_path / "default" / name).read_text() == (tmp_path / "given" / name).read_text(), name
    compute = (tmp_path / "default" / "compute.md").read_text()
    assert "levels_7-12" in compute and "levels_7-8" not in compute
    # the rows differ from another tail's: the default is not a no-op
    _report([str(sweep), "--out", str(tmp_path / "other"), "--tail-levels", "7-8"], capsys)
    assert (tmp_path / "other" / "compute.md").read_text() != compute
    # gdro-report FILE: the summaries keep the choice, so the report from them takes the same tail
    _, err = _report([str(tmp_path / "s.jsonl.gz"), "--out", str(tmp_path / "from-file")], capsys)
    assert "--tail-levels 7-12: not given" in err
    assert (tmp_path / "from-file" / "compute.md").read_text() == compute


def test_gdro_report_without_a_preset_has_no_tail_and_no_line(tmp_path: Path, capsys):
    sweep = make_sweep(tmp_path / "sw", None, seeds=(0, 1))
    _, err = _report([str(sweep)], capsys)
    assert "--tail-levels" not in err and "levels_" not in (sweep / "report" / "compute.md").read_text()


# ---------------------------------------------------------------- the notebook's sweep dir


def test_a_relative_sweep_dir_is_the_callers(tmp_path: Path):
    (tmp_path / "a" / "sw").mkdir(parents=True)
    env = {"GDRO_SWEEP_DIR": "sw", "PWD": str(tmp_path / "a")}
    assert resolve_sweep_dir("../x", env)[0] == tmp_path / "a" / "sw"
    path, how = resolve_sweep_dir("../x", env | {"GDRO_CWD": str(tmp_path)})  # GDRO_CWD wins over PWD
    assert path == tmp_path / "sw" and "GDRO_CWD" in how
    assert resolve_sweep_dir("../x", {"GDRO_SWEEP_DIR": str(tmp_path / "abs")})[0] == tmp_path / "abs"
    # unset: the notebook's own value, against the kernel's directory (the notebook's)
    path, how = resolve_sweep_dir("../x", {"PWD": str(tmp_path)})
    assert path == Path.cwd() / "../x" and "set in the notebook" in how
    assert caller_dir({})[0] == Path.cwd()  # neither GDRO_CWD nor PWD
    with pytest.raises(SweepDirError, match="GDRO_CWD=.*nope: no such directory"):
        caller_dir({"GDRO_CWD": str(tmp_path / "nope")})


def test_a_missing_or_empty_sweep_dir_is_refused_by_name(tmp_path: Path):
    env = {"GDRO_SWEEP_DIR": "outputs/nope", "PWD": str(tmp_path)}
    with pytest.raises(SweepDirError) as err:
        load_sweep("../x", env)
    assert str(err.value) == (f"GDRO_SWEEP_DIR=outputs/nope (relative: from PWD={tmp_path}, the directory Jupyter "
                              f"was started from): no such directory: {tmp_path / 'outputs' / 'nope'}")
    (tmp_path / "outputs" / "empty").mkdir(parents=True)
    with pytest.raises(SweepDirError, match=re.escape(f"no completed runs (dirs with run.json + metrics.jsonl) "
                                                      f"under {tmp_path / 'outputs' / 'empty'}")):
        load_sweep("../x", env | {"GDRO_SWEEP_DIR": "outputs/empty"})
    (tmp_path / "f").write_text("")
    with pytest.raises(SweepDirError, match="is not a directory"):
        load_sweep("../x", env | {"GDRO_SWEEP_DIR": "f"})
    run = make_run(tmp_path / "outputs" / "cut", "grpo/0", "uniform", "fixed", 0, None, 0.0)
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(meta | {"status": "interrupted"}))  # only incomplete runs: refused too
    with pytest.raises(SweepDirError, match="no completed runs .*; left out: `grpo/0`: GRPO seed 0: status interrupted"):
        load_sweep("../x", env | {"GDRO_SWEEP_DIR": "outputs/cut"})


def test_load_sweep_gives_gdro_reports_runs(tmp_path: Path):
    sweep = make_sweep(tmp_path / "sw", seeds=(0, 1))
    path, runs, left = load_sweep("../x", {"GDRO_SWEEP_DIR": "sw", "PWD": str(tmp_path)})
    assert path == sweep and left == [] and [r.path for r in runs] == [r.path for r in find_runs(sweep)]
