"""``method=``: the comparison tables' rows as one config group (conf/method/), the names scripts/reproduce_toy.py uses;
keys that exist only under another option refused in one line naming it (and the sweep's job); a second ``-m`` into
one sweep dir keeps the first's ``multirun.yaml``; report rows named by what they ran."""

from __future__ import annotations

import json
import sys

import pytest
from omegaconf import OmegaConf

from gdro.cli import train as cli
from gdro.report.names import BASELINE, display_name
from gdro.report.runs import method_of
from gdro.run import sweep_record
from tests.conftest import CONF, FAST, REPO, compose_cfg

sys.path.insert(0, str(REPO / "scripts"))
import reproduce_toy

METHODS = sorted(p.stem for p in (CONF / "method").glob("*.yaml"))
PRESET_ROWS = [(preset, row) for preset, spec in reproduce_toy.PRESETS.items()
               for row in {**spec["methods"], **spec.get("extra", {})} if row in METHODS]


def _resolved(overrides: list[str]) -> dict:
    return OmegaConf.to_container(compose_cfg(overrides), resolve=True)


def _row_key(overrides: list[str]) -> str:
    """The report's row key of a run of ``overrides``, as load_run computes it from its run.json and
    .hydra/overrides.yaml (the config, Hydra's group choices, the command line)."""
    cfg = compose_cfg(overrides, return_hydra_config=True)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    config = OmegaConf.to_container(cfg, resolve=False)
    config.pop("hydra")
    return method_of({"config": config, "choices": choices}, config, overrides)


def test_the_table_rows_are_methods():
    for row in ("grpo", "oracle", "prompt-gdro", "rollout-gdro", "rgdro-frozen", "rgdro-paper-preset", "knapsack",
                "zero-variance", "skip", "dynamic", "learnability", "learnability-w2", "mopps", "mopps-decay"):
        assert row in METHODS
    assert len(PRESET_ROWS) > 40  # every preset of reproduce_toy names its rows by these methods


@pytest.mark.parametrize(("preset", "row"), PRESET_ROWS, ids=[f"{p}-{r}" for p, r in PRESET_ROWS])
def test_method_equals_the_reproduction_row(preset, row):
    """``method=<row>`` on the preset's base is the row reproduce_toy.py runs: the same resolved config (the label
    aside where the script runs a plain sampler+allocator row) and the same row name in gdro-report."""
    spec = reproduce_toy.PRESETS[preset]
    overrides = [*spec["base"], *{**spec["methods"], **spec.get("extra", {})}[row]]
    if any(not o.startswith(("sampler=", "allocator=")) for o in overrides[len(spec["base"]):]):
        overrides.append(f"label={row}")  # as reproduce_toy.py adds it
    script, method = _resolved(overrides), _resolved([*spec["base"], f"method={row}"])
    assert {k: v for k, v in script.items() if k != "label"} == {k: v for k, v in method.items() if k != "label"}
    if script["label"] != method["label"]:
        assert script["label"] is None  # a plain row: named by its sampler+allocator, shown the same
    assert display_name(_row_key(overrides)) == display_name(_row_key([*spec["base"], f"method={row}"]))


@pytest.mark.parametrize("experiment", [None, "toy-paper-regime", "toy-curriculum", "toy-moving-frontier", "paper"])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_passes_the_check_on_every_preset(method, experiment):
    overrides = [f"method={method}", *([f"experiment={experiment}"] if experiment else [])]
    cfg = compose_cfg(overrides, return_hydra_config=True)
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)
    try:
        cli._check_train(cfg)
    finally:
        HydraConfig.instance().cfg = None


def test_arms_follow_the_mean_budget():
    """The allocator rows' arms are [n_min, 3 × n̄] at any n̄: 24 by default (the allocators' own default), 12 in
    the paper regime (what its tables ran with allocator.n_max=12)."""
    assert _resolved(["method=knapsack"])["allocator"]["n_max"] == 24 == _resolved(["allocator=knapsack"])[
        "allocator"]["n_max"]
    assert _resolved(["experiment=toy-paper-regime", "method=rgdro-frozen"])["allocator"]["n_max"] == 12
    assert _resolved(["method=rollout-gdro", "rollouts_per_prompt=5"])["allocator"]["n_max"] == 15
    assert _resolved(["method=rollout-gdro", "allocator.n_max=6"])["allocator"]["n_max"] == 6  # the command line wins


def test_grpo_is_the_reports_baseline_and_the_default_job_is_untouched():
    assert _row_key(["method=grpo"]) == BASELINE
    default = compose_cfg([], return_hydra_config=True)
    assert "method" not in default and default.hydra.runtime.choices.method is None
    assert default.label is None and default.sampler._target_.endswith(".PromptGDRO")


def _train_error(argv: list[str], monkeypatch, capsys) -> str:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["gdro-train", *argv])
    with pytest.raises(SystemExit) as exit_:
        cli.train()
    assert exit_.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_key_of_another_option_names_that_option(monkeypatch, capsys, tmp_path):
    run = f"hydra.run.dir={tmp_path}/run"
    assert _train_error(["allocator=fixed", "allocator.consumption=realized", run], monkeypatch, capsys) == (
        "config error: unknown key 'allocator.consumption' (a key of allocator=rollout-gdro-variance, "
        "allocator=rollout-gdro only; this run has allocator=fixed)")
    line = _train_error(["method=rgdro-frozen", "allocator=fixed", run], monkeypatch, capsys)
    assert line.startswith("config error: unknown key 'allocator.n_max' (a key of allocator=knapsack")
    assert line.endswith("this run has allocator=fixed, given after method=rgdro-frozen, which picks "
                         "allocator=rollout-gdro)")
    line = _train_error(["experiment=paper-rollout-gdro", "method=grpo", run], monkeypatch, capsys)
    assert line.endswith("this run has allocator=fixed, from method=grpo)")
    assert not (tmp_path / "run").exists()


def test_in_a_sweep_the_line_names_the_job(monkeypatch, capsys, tmp_path):
    line = _train_error(["-m", "experiment=toy-paper-regime", "allocator=fixed,rollout-gdro",
                         "allocator.consumption=realized", "seed=0", f"hydra.sweep.dir={tmp_path}/sweep"],
                        monkeypatch, capsys)
    assert line.startswith("config error: sweep job allocator=fixed: unknown key 'allocator.consumption' (a key of ")
    assert _train_error(["-m", "seed=0,-1", f"hydra.sweep.dir={tmp_path}/sweep"], monkeypatch, capsys) == (
        "config error: seed=-1: must be >= 0")  # the line names the job's value already
    assert not (tmp_path / "sweep").exists()


def test_sweep_record_keeps_the_first_and_numbers_the_others(tmp_path):
    sweep_record.keep_first(tmp_path)  # no record yet: nothing to keep
    assert not list(tmp_path.iterdir())
    (tmp_path / "multirun.yaml").write_text("first\n")
    for n, text in ((2, "second\n"), (3, "third\n")):
        sweep_record.keep_first(tmp_path)
        (tmp_path / "multirun.yaml").write_text(text)  # what Hydra's sweeper does: rewrite the file in place
        sweep_record.restore_first(tmp_path)
        assert (tmp_path / "multirun.yaml").read_text() == "first\n"
        assert (tmp_path / f"multirun.{n}.yaml").read_text() == text
    sweep_record.keep_first(tmp_path)  # a sweep killed before it restored: the next one restores first
    (tmp_path / "multirun.yaml").write_text("fourth\n")
    sweep_record.keep_first(tmp_path)
    assert (tmp_path / "multirun.yaml").read_text() == "first\n" and (tmp_path / "multirun.4.yaml").is_file()
    sweep_record.restore_first(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["multirun.2.yaml", "multirun.3.yaml", "multirun.4.yaml",
                                                          "multirun.yaml"]


def test_a_second_sweep_into_one_dir_keeps_the_first_record(monkeypatch, tmp_path):
    sweep = tmp_path / "sweep"
    quick = [*FAST, "steps=1", "eval.at_start=false", "eval.at_end=false", "save_final=false"]
    for seeds, subdir in (("0,1", "a${hydra.job.num}"), ("2", "b${hydra.job.num}")):
        monkeypatch.setattr(sys, "argv", ["gdro-train", "-m", *quick, f"seed={seeds}", "method=grpo",
                                          f"hydra.sweep.dir={sweep}", f"hydra.sweep.subdir={subdir}"])
        cli.train()
    first = OmegaConf.load(sweep / "multirun.yaml")
    assert "seed=0,1" in first.hydra.overrides.task
    assert "seed=2" in OmegaConf.load(sweep / "multirun.2.yaml").hydra.overrides.task
    assert not (sweep / sweep_record.BACKUP).exists()
    assert json.loads((sweep / "b0" / "run.json").read_text())["choices"]["method"] == "grpo"


@pytest.mark.parametrize(("overrides", "label", "key", "name"), [
    (["allocator=rollout-gdro", "allocator.consumption=realized"], None,
     "uniform+rollout-gdro [allocator.consumption=realized]", "Rollout-GDRO [allocator.consumption=realized]"),
    (["method=rgdro-frozen", "allocator.n_max=6"], "rgdro-frozen", "rgdro-frozen [allocator.n_max=6]",
     "Rollout-GDRO, μ frozen (released code) [allocator.n_max=6]"),
    (["allocator=rollout-gdro", "allocator.consumption=realized", "label=frozen"], "frozen", "frozen", "frozen"),
    (["method=rgdro-frozen", "seed=3", "experiment=toy-paper-regime"], "rgdro-frozen", "rgdro-frozen",
     "Rollout-GDRO, μ frozen (released code)"),
])
def test_a_row_name_carries_the_settings_given_on_the_command_line(overrides, label, key, name):
    allocator = "rollout-gdro"
    meta = {"choices": {"sampler": "uniform", "allocator": allocator}}
    assert method_of(meta, {"label": label}, overrides) == key
    assert display_name(key) == name


def test_rows_of_one_method_pair_apart_from_its_variants():
    from gdro.report.names import method_rank

    keys = ["uniform+rollout-gdro [allocator.consumption=realized]", "uniform+fixed", "uniform+rollout-gdro"]
    assert sorted(keys, key=method_rank) == ["uniform+fixed", "uniform+rollout-gdro",
                                              "uniform+rollout-gdro [allocator.consumption=realized]"]


def test_methods_are_documented_where_users_look():
    readme = (REPO / "README.md").read_text()
    choosing = readme[readme.index("## Choosing an allocation"):readme.index("## Coming from TRL or verl")]
    assert "method=grpo" in choosing and "| `method=` |" in choosing
    for row in ("grpo", "rgdro-frozen", "knapsack", "zero-variance", "skip", "learnability-w2", "mopps-decay"):
        assert f"`{row}`" in choosing
    for path in (CONF / "method").glob("*.yaml"):
        assert path.read_text().splitlines()[1].startswith(f"# method={path.stem}: ")


def test_a_method_sweep_is_a_report_with_its_rows_named(monkeypatch, tmp_path):
    """The issue's acceptance, small: ``gdro-train -m experiment=toy-paper-regime method=grpo,rgdro-frozen seed=0``
    runs both rows, and ``gdro-report`` on its sweep dir names both by their method."""
    from gdro.cli.report import main as report_main

    sweep = tmp_path / "sweep"
    monkeypatch.setattr(sys, "argv", ["gdro-train", "-m", "experiment=toy-paper-regime", "method=grpo,rgdro-frozen",
                                      "seed=0", *FAST, "eval.at_end=true", "data.train_size=64",
                                      f"hydra.sweep.dir={sweep}"])
    cli.train()
    report_main([str(sweep), "--no-figures"])
    table = (sweep / "report" / "table.md").read_text()
    rows = [line.split(" | ")[0].lstrip("| ") for line in table.splitlines()[2:] if line.startswith("| ")]
    assert rows == ["GRPO", "Rollout-GDRO, μ frozen (released code)"]


def _readme_commands() -> list[list[str]]:
    """The README's gdro-train commands that name a method, as argument lists (continuation lines joined)."""
    import shlex

    text = (REPO / "README.md").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("gdro-train") and "method=" in line:
            out.append(shlex.split(line)[1:])
    return out


def test_the_readmes_comparison_commands_pass_the_check():
    commands = _readme_commands()
    assert len(commands) >= 2
    for argv in commands:
        assert "-m" in argv
        cli.precheck(argv, "train", cli._check_train)  # every job of the sweep composed and checked as it will run
