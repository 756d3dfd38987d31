"""Every invalid config value is rejected before any model or dataset loads, in one line naming the key, exit 2.

Most cases run the real ``gdro-train`` entry point (``gdro.cli.train:train``) in-process with a real command line
(``sys.argv``); a few run it as a subprocess, exactly as a user would. The run dir must never be created: Hydra
creates it before the job starts, so its absence shows that nothing — model, data, logger — was touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import DictConfig

from gdro.cli import evaluate as evaluator
from gdro.cli import train as cli
from gdro.common.validate import ConfigError, Schema, check_values, node_schema, schema_of
from gdro.compose.build import build_components
from gdro.grading.reward_config import RewardConfig
from tests.conftest import REPO, compose_cfg

# Put before each case's overrides (the last value of a key wins): quiet, and a model that cannot load, so that a
# case wrongly accepted fails fast instead of training.
QUIET = ["logger=jsonl", "progress=false", "model.name_or_path=/nonexistent/model"]

# (overrides, text the one-line message must contain: the dotted key, and its value where one was given)
CASES = [
    # the cases users reported: late failures after the model loaded, or silently accepted
    ("steps=2.0", "steps=2.0"),
    ("steps=2.5", "steps=2.5"),
    ("seed=1.5", "seed=1.5"),
    ("seed=-1", "seed=-1"),
    ("prompts_per_step=2.5", "prompts_per_step=2.5"),
    ("+stepz=3", "'stepz'"),
    ("save_final=maybe", "save_final=maybe"),
    ("threads=fast", "threads=fast"),
    ("threads=0", "threads=0"),
    ("progress=abc", "progress=abc"),
    # unknown keys, with and without +, top-level and nested
    ("stepz=3", "'stepz'"),
    ("++stepz=3", "'stepz'"),
    ("+sampler.etaa=1", "'sampler.etaa'"),
    ("sampler.etaa=1", "'sampler.etaa'"),
    ("+lr=1e-5", "'lr'"),
    ("+reward.foo=1", "'reward.foo'"),
    ("+steps=3", "'steps'"),
    # types: int rejects floats, bools and text; float rejects bools, text and non-finite; bool only true/false
    ("steps=abc", "steps=abc"),
    ("steps=true", "steps=true"),
    ("rollouts_per_prompt=4.0", "rollouts_per_prompt=4.0"),
    ("threads=1.5", "threads=1.5"),
    ("resume=maybe", "resume=maybe"),
    ("optim.lr=abc", "optim.lr=abc"),
    ("optim.lr=true", "optim.lr=true"),
    ("optim.lr=inf", "optim.lr=inf"),
    ("optim.ppo_epochs=1.0", "optim.ppo_epochs=1.0"),
    ("eval.k=2.5", "eval.k=2.5"),
    ("eval.max_problems=abc", "eval.max_problems=abc"),
    ("eval.at_start=maybe", "eval.at_start=maybe"),
    ("checkpoint.every=1.5", "checkpoint.every=1.5"),
    ("checkpoint.at_end=yes", "checkpoint.at_end=yes"),
    ("model.name_or_path=123", "model.name_or_path=123"),
    ("model.use_chat_template=1", "model.use_chat_template=1"),
    ("reward.require_eos=maybe", "reward.require_eos=maybe"),
    ("reward.tail_chars=2.0", "reward.tail_chars=2.0"),
    ("logger.tags=abc", "logger.tags=abc"),
    ("classifier.edges=[0.5,abc]", "classifier.edges"),
    ("data.train_size=100.5", "data.train_size=100.5"),
    # ranges and cross-field rules (the components' own checks), named with their group
    ("threads=0", "threads=0"),
    ("sampler.eta=-1", "sampler.eta=-1"),
    ("eval.seed=-1", "eval.seed=-1"),
    ("rollout.top_k=-1", "rollout.top_k=-1"),
    ("data.max_level=0", "data.max_level=0"),
    ("reward.correct=0 reward.incorrect=1", "reward.correct=0"),
    ("allocator=rollout-gdro rollouts_per_prompt=1", "rollouts_per_prompt"),
    ("allocator=sqrt allocator.n_min=10", "n_min=10"),
    ("allocator=rollout-gdro rollouts_per_prompt=30", "rollouts_per_prompt=30"),
    # filter=dynamic with groups of one rollout (issue #39 item 6): no round could ever keep a group
    ("filter=dynamic rollouts_per_prompt=1", "rollouts_per_prompt=1: filter=dynamic keeps only groups whose"),
    ("filter=dynamic allocator=knapsack allocator.n_min=1 rollouts_per_prompt=1", "rollouts_per_prompt=1: filter=dyn"),
    ("filter=dynamic allocator=sqrt allocator.n_min=1 allocator.n_max=1 rollouts_per_prompt=1",
     "rollouts_per_prompt=1 (allocator.n_max=1): filter=dynamic"),
    ("loss=gspo loss.clip_low=2", "loss.clip_low=2"),
    ("loss=gspo loss.agg=mean", "loss.agg=mean"),
    ("loss=dr-grpo loss.max_new_tokens=0", "loss.max_new_tokens=0"),
    ("loss=dr-grpo loss.norm_adv_by_std=false", "'loss.norm_adv_by_std'"),
    ("sampler=learnability sampler.candidate_ratio=0.5", "sampler.candidate_ratio=0.5: must be >= 1"),
    ("sampler=learnability sampler.window=0", "sampler.window=0"),
    ("sampler=learnability sampler.unseen_p=2", "sampler.unseen_p=2"),
    ("sampler=learnability sampler.eta=1", "'sampler.eta'"),
    ("sampler=mopps sampler.target=1", "sampler.target=1: must be in (0, 1)"),
    ("sampler=mopps sampler.strategy=uniform", "sampler.strategy=uniform"),
    ("sampler=mopps sampler.upper=0.2", "sampler.upper=0.2"),
    ("sampler=mopps sampler.decay=0", "sampler.decay=0"),
    ("sampler=mopps sampler.prior_alpha=0", "sampler.prior_alpha=0"),
    # options, targets and override syntax
    ("sampler=nope", "sampler=nope"),
    ("loss=nope", "loss=nope: no such option (available: bnpo, cispo, dapo, dr-grpo, grpo, gspo, luspo, sapo, vespo)"),
    ("sampler._target_=nope.Nope", "sampler._target_"),
    ("steps=[1,2", "steps=[1,2"),
]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(("overrides", "named"), CASES, ids=[c[0] for c in CASES])
def test_cli_rejects_in_one_line_before_anything_loads(overrides, named, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    run_dir = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["gdro-train", *QUIET, *overrides.split(), f"hydra.run.dir={run_dir}"])
    with pytest.raises(SystemExit) as exit_:
        cli.train()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = _lines(err)
    assert len(lines) == 1, err
    assert lines[0].startswith("config error: ") and named in lines[0], lines[0]
    assert not run_dir.exists()  # the job never started: no run dir, no logger, no data, no model


def test_messages_name_key_value_and_what_is_allowed(tmp_path, monkeypatch, capsys):
    expected = {
        "steps=2.5": "config error: steps=2.5: must be an integer (got float)",
        "save_final=maybe": "config error: save_final=maybe: must be true or false (got str)",
        "+stepz=3": "config error: unknown key 'stepz' (did you mean 'steps'?)",
        "stepz=3": "config error: unknown key 'stepz' (did you mean 'steps'?)",
        "+sampler.etaa=1": "config error: unknown key 'sampler.etaa' (did you mean 'sampler.eta'?)",
        "+optim.clip_low=0.1": "config error: unknown key 'optim.clip_low' (did you mean 'loss.clip_low'?)",
        "sampler.eta=-1": "config error: sampler.eta=-1: must be > 0",
        "threads=1.5": "config error: threads=1.5: must be an integer or one of auto or null (got float)",
        "sampler=nope": "config error: sampler=nope: no such option (available: learnability, mopps, oracle-levels, prompt-gdro, "
                       "uniform)",
    }
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    for override, line in expected.items():
        monkeypatch.setattr(sys, "argv", ["gdro-train", *QUIET, override, f"hydra.run.dir={tmp_path}/run"])
        with pytest.raises(SystemExit):
            cli.train()
        assert capsys.readouterr().err.strip() == line


def test_multirun_sweep_is_checked_before_the_first_job(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["gdro-train", "-m", *QUIET, "seed=0,1,-1", f"hydra.sweep.dir={tmp_path}/multi"])
    with pytest.raises(SystemExit) as exit_:
        cli.train()
    assert exit_.value.code == 2
    assert _lines(capsys.readouterr().err) == ["config error: seed=-1: must be >= 0"]
    assert not (tmp_path / "multi").exists()


def test_valid_config_passes_the_precheck():
    cli.precheck(["steps=3", "sampler=uniform", "+hydra.job.env_set.X=1", "hydra.run.dir=/nonexistent"], "train",
                 cli._check_train)
    cli.precheck(["-m", "seed=0,1", "allocator=rollout-gdro,sqrt"], "train", cli._check_train)


@pytest.mark.parametrize(("overrides", "named"), [("eval.k=0", "eval.k=0"), ("+foo=1", "'foo'"),
                                                  ("benchmarks=nope", "benchmarks=nope")])
def test_eval_cli_rejects_in_one_line(overrides, named, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["gdro-eval", overrides, f"hydra.run.dir={tmp_path}/run"])
    with pytest.raises(SystemExit) as exit_:
        evaluator.main()
    assert exit_.value.code == 2
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1 and named in lines[0]
    assert not (tmp_path / "run").exists()


def test_user_errors_inside_a_job_exit_2_in_one_line(monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as exit_, cli.user_errors():
        raise ConfigError("data: no such file 'x.parquet'\n(see the docs)")
    assert exit_.value.code == 2
    assert _lines(capsys.readouterr().err) == ["config error: data: no such file 'x.parquet' (see the docs)"]
    with pytest.raises(KeyError), cli.user_errors():  # a bug is not a user error: it keeps its traceback
        raise KeyError("x")


def test_full_error_env_keeps_the_traceback(monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(ConfigError), cli.user_errors():
        raise ConfigError("steps=2.5: must be an integer")


# ------------------------------------------------------------------------- the validator on composed configs
def test_every_group_has_a_typed_schema():
    cfg = compose_cfg()
    from gdro.algorithm.samples import SampleConfig

    for group in cfg:
        node = cfg[group]
        if group == "samples":  # a block of RunSettings (no component): typed by its dataclass, SampleConfig
            assert set(node) == set(SampleConfig.__dataclass_fields__), group
        elif isinstance(node, DictConfig):
            _, schema = node_schema(node, group)
            assert not schema.open, group
            assert set(node) - {"_target_"} <= set(schema.fields), group


def test_kwargs_constructor_reads_its_config_dataclass():
    from gdro.grading.rewards import MathVerifyReward

    schema = schema_of(MathVerifyReward)
    assert set(schema.fields) == set(RewardConfig.__dataclass_fields__) and not schema.open


@pytest.mark.parametrize(
    ("hint", "good", "bad"),
    [
        (int, [0, -3, 10**20], [2.0, 2.5, True, "abc", None]),
        (float, [1, 0.5, -2], [True, "abc", float("inf"), float("nan"), None]),
        (bool, [True, False], ["maybe", 1, 0, None]),
        (str, ["x", ""], [1, 1.5, None, ["x"]]),
        (int | None, [None, 3], [3.5]),
        (tuple[str, ...], [[], ["a", "b"]], ["a", [1]]),
        (str | list[str] | None, [None, "a", ["a"]], [3, [3]]),
    ],
)
def test_type_rules(hint, good, bad):
    schema = Schema({"x": hint}, frozenset())
    for value in good:
        check_values({"x": value}, schema)
    for value in bad:
        with pytest.raises(ConfigError, match=r"^x=.*: must be "):
            check_values({"x": value}, schema)


def test_interpolated_value_names_its_source():
    with pytest.raises(ConfigError, match=r"^steps=0\.0001 \(from \$\{optim\.lr\}\): must be an integer"):
        build_components(compose_cfg(["steps=${optim.lr}"]))


def test_deleted_key_is_missing():
    with pytest.raises(ConfigError, match=r"^steps: missing"):
        build_components(compose_cfg(["~steps"]))
    with pytest.raises(ConfigError, match=r"^model\.name_or_path: missing"):
        build_components(compose_cfg(["~model.name_or_path"]))


# ------------------------------------------------------------------------- as a user runs it: a subprocess
SUBPROCESS = [
    ("steps=2.5", "steps=2.5"),
    ("+stepz=3", "'stepz'"),
    ("sampler.etaa=1", "'sampler.etaa'"),
    ("save_final=maybe", "save_final=maybe"),
]


@pytest.mark.slow
def test_console_script_exits_2_with_one_line(tmp_path: Path):
    procs = []
    for i, (override, _) in enumerate(SUBPROCESS):  # started together: each pays the interpreter start-up once
        cmd = [sys.executable, "-m", "gdro.cli.train", *QUIET, override, f"hydra.run.dir={tmp_path}/run{i}"]
        procs.append(subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}))
    for i, ((override, named), proc) in enumerate(zip(SUBPROCESS, procs)):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, (override, err)
        assert "Traceback" not in err and "loading model" not in out + err
        lines = _lines(err)
        assert len(lines) == 1 and lines[0].startswith("config error: ") and named in lines[0], err
        assert not (tmp_path / f"run{i}").exists()
