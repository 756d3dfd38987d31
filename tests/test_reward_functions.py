"""A user's own reward functions (issue #51, item 1; gdro/grading/functions.py): TRL's signature, named on the command
line from a user's module (tests/user_rewards.py), beside math-verify or instead of it. Each term is weighted and
summed (None and failures add 0, TRL's nansum), logged apart (``reward/<name>``, ``reward/<name>/errors``) and kept in
the sample records; a function that raises, hangs, returns the wrong length, NaN or a non-number never stops a run and
is counted; one that cannot be imported, or a bad entry, is one line and status 2 before anything loads. Real
components throughout: math-verify, the shipped tiny model, ``experiment=smoke``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gdro.algorithm import samples
from gdro.cli import train as cli
from gdro.common.interfaces import Problem
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, build_training
from gdro.grading.functions import FunctionReward, with_functions
from gdro.grading.rewards import MathVerifyReward
from tests import user_rewards
from tests.conftest import FAST, compose_cfg

U = "tests.user_rewards"
FAILING = [{"fn": f"{U}:raises"}, {"fn": f"{U}:spins", "timeout_s": 0.2}, {"fn": f"{U}:sleeps", "timeout_s": 0.05},
           {"fn": f"{U}:wrong_length"}, {"fn": f"{U}:nan"}, {"fn": f"{U}:not_a_number"}]


def _flow(entries: list[dict]) -> str:
    """A list of entries as a command-line value: ``[{fn: "pkg.mod:f", weight: 0.5}, ...]``."""
    return "[" + ", ".join("{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in e.items()) + "}" for e in entries) + "]"


def _main(argv: list[str], monkeypatch, capsys) -> tuple[int, list[str]]:
    """gdro-train in this process (as tests/test_user_errors.py runs it): exit status and stderr lines."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["gdro-train", *argv])
    try:
        code = cli.train()
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code or 0, [line for line in err.splitlines() if line.strip()]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------------- the reward itself
def test_terms_are_weighted_summed_logged_apart_and_called_as_trl_calls_them():
    user_rewards.CALLS.clear()
    reward = with_functions(MathVerifyReward(functions=[{"fn": f"{U}:short_answer", "weight": 0.5},
                                                        {"fn": f"{U}:recorder", "weight": 2.0, "name": "rec"}]))
    texts = ["\\boxed{12}", "a long answer that ends in \\boxed{3}", "\\boxed{7}"]
    probs = [Problem("u0", "Copy: 1 2.", "12", 2), Problem("u1", "Copy: 4.", "4", 1),
             Problem("u2", "Copy: 7.", "7", 1, columns={"solution": "$7$", "difficulty": "Level 1"},
                     messages=({"role": "user", "content": "Copy: 7."},))]
    batch = reward.score(texts, [p.answer for p in probs], [True] * 3, [3, 9, 3], problems=probs,
                         completion_ids=[[1, 2], [3], [4, 5, 6]])
    # math-verify (1, 0, 1) + 0.5 * short (1, 0, 1) + 2 * rec (None -> adds 0, 0.5, 0.5)
    assert batch.rewards.tolist() == [1.5, 1.0, 2.5] and batch.correct.tolist() == [True, False, True]
    assert np.isnan(batch.terms["rec"][0]) and batch.terms["rec"][1:].tolist() == [0.5, 0.5]
    assert batch.terms["short_answer"].tolist() == [1.0, 0.0, 1.0] and batch.term_errors == {"short_answer": 0, "rec": 0}
    (call,) = user_rewards.CALLS  # one call per batch, keyword arguments: prompts, completions, completion_ids, columns
    assert call["prompts"] == ["Copy: 1 2.", "Copy: 4.", [{"role": "user", "content": "Copy: 7."}]]
    assert call["completions"][:2] == texts[:2] and call["completions"][2] == [{"role": "assistant", "content": texts[2]}]
    assert call["completion_ids"] == [[1, 2], [3], [4, 5, 6]]
    assert call["solution"] == [None, None, "$7$"] and call["answer"] == ["12", "4", "7"]
    m = reward.metrics(batch)
    assert m["reward/accuracy"] == pytest.approx(2 / 3) and m["reward/short_answer"] == pytest.approx(2 / 3)
    assert m["reward/rec"] == 0.5 and m["reward/rec/errors"] == 0.0  # the mean over the rows it applied to
    assert reward.for_eval() is reward.base.for_eval()  # evaluation: math-verify's correctness alone


def test_failing_functions_score_zero_for_their_term_and_are_counted():
    """Raising (only the rows it raises on, after a row-by-row retry), computing for ever, waiting for ever, the
    wrong length, NaN, a string: each row's term adds 0 and is counted; the call returns in bounded time."""
    reward = with_functions(MathVerifyReward(functions=[{"fn": f"{U}:short_answer"}, *FAILING]))
    texts = ["\\boxed{1}", "\\boxed{22}", "xyz"]  # lengths 9, 10, 3: `raises` fails on the even one
    start = time.monotonic()
    batch = reward.score(texts, ["1", "2", "3"], [True] * 3, [2, 2, 2])
    assert time.monotonic() - start < 15
    assert batch.term_errors == {"short_answer": 0, "raises": 1, "spins": 3, "sleeps": 3, "wrong_length": 3, "nan": 3,
                                 "not_a_number": 3}
    assert batch.rewards.tolist() == [1 + 1 + 1, 0 + 1 + 0, 0 + 1 + 1]  # math-verify + short + raises (where it ran)
    m = reward.metrics(batch)
    assert m["reward/raises/errors"] == 1 and m["reward/spins/errors"] == 3 and "reward/spins" not in m


def test_bools_numpy_and_torch_scalars_read_as_trl_reads_them():
    reward = with_functions(MathVerifyReward(functions=[{"fn": f"{U}:numpy_and_bools"}]))
    batch = reward.score(["a", "b", "c"], ["1", "1", "1"], [True] * 3)
    assert batch.terms["numpy_and_bools"].tolist() == [1.0, 0.5, 2.0] and batch.term_errors["numpy_and_bools"] == 0


def test_functions_instead_of_math_verify_the_marked_one_is_correctness():
    reward = FunctionReward([{"fn": f"{U}:short_answer", "weight": 0.25},
                             {"fn": f"{U}:level_correct", "name": "right", "correctness": True}])
    probs = [Problem("a", "p", "12", 1, columns={"solution": "12"}), Problem("b", "q", "5", 1, columns={"solution": "5"})]
    batch = reward.score(["it is 12", "it is 6, surely, no doubt at all"], ["12", "5"], [True, True], problems=probs)
    assert batch.correct.tolist() == [True, False] and batch.rewards.tolist() == [1.25, 0.0]
    ev = reward.for_eval()  # evaluation reads the correctness function alone, unweighted
    assert [s.name for s in ev.specs] == ["right"] and ev.score(["12", "6"], ["12", "5"], [True, True],
                                                                  problems=probs).rewards.tolist() == [1.0, 0.0]
    default = build_components(compose_cfg(["reward=functions"])).reward  # math-verify's verdict as such a function
    assert default.correctness == "verified" and default.score(["\\boxed{3}", "\\boxed{4}"], ["3", "3"], [True] * 2,
                                                               ).correct.tolist() == [True, False]


def test_the_default_config_adds_nothing():
    comp = build_components(compose_cfg())
    assert type(comp.reward) is MathVerifyReward and comp.reward.config.functions == ()
    assert not getattr(comp.reward, "reads_problems", False)


# ------------------------------------------------------------------------------------------------- bad values
BAD = [
    ([{"fn": f"{U}:short_answer", "weight": "abc"}], "reward.functions[0].weight=abc: must be a finite number"),
    ([{"fn": f"{U}:short_answer", "wieght": 1}], "reward.functions[0].wieght: unknown key (valid keys: fn, weight"),
    ([{"fn": f"{U}:short_answer", "name": "accuracy"}], "reward.functions[0].name=accuracy: is a metric gdro logs"),
    ([{"fn": f"{U}:short_answer", "name": "a/b"}], "reward.functions[0].name=a/b: must be letters, digits"),
    ([{"fn": f"{U}:nan"}, {"fn": f"{U}:nan"}], "reward.functions[1].name=nan: repeats functions[0]'s name"),
    ([{"fn": f"{U}:nan", "correctness": True}], "reward.functions[0].correctness=true: math-verify is the correctness"),
    ([{"fn": f"{U}:nan", "correctness": "yes"}], "reward.functions[0].correctness=yes: must be true or false"),
    ([{"fn": f"{U}:nan", "timeout_s": 0}], "reward.functions[0].timeout_s=0: must be a number > 0"),
    ([{"weight": 1}], "reward.functions[0].fn: missing"),
    ([{"fn": "nocolon"}], "reward.functions[0].fn=nocolon: must be 'package.module:function'"),
    ([{"fn": f"{U}:nope"}], "reward.functions[0].fn=tests.user_rewards:nope: module tests.user_rewards has no 'nope'"),
    ([{"fn": f"{U}:CALLS"}], "reward.functions[0].fn=tests.user_rewards:CALLS: tests.user_rewards:CALLS is not callable"),
]


@pytest.mark.parametrize(("entries", "says"), BAD, ids=[b[1].split(":")[0] for b in BAD])
def test_a_bad_entry_is_one_line_naming_its_key(entries, says):
    with pytest.raises(ConfigError) as err:
        build_components(compose_cfg([f"reward.functions={_flow(entries)}"]))
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("overrides", "says"), [
    (["reward=functions", "reward.functions=[]"], "reward.functions=[]: reward=functions needs at least one function"),
    (["reward=functions", f"reward.functions={_flow([{'fn': f'{U}:nan'}, {'fn': f'{U}:short_answer'}])}"],
     "reward.functions: mark one correctness: true"),
    (["reward.functions=3"], "reward.functions=3: must be a list"),
])
def test_bad_lists_are_one_line(overrides, says):
    with pytest.raises(ConfigError, match=None) as err:
        build_components(compose_cfg(overrides))
    assert says in str(err.value)


def test_an_unimportable_function_is_one_line_status_2_before_anything_loads(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    code, lines = _main(["experiment=smoke", f"hydra.run.dir={run_dir}",
                         f"reward.functions={_flow([{'fn': 'my_rewards_nowhere:accuracy'}])}"], monkeypatch, capsys)
    assert code == 2 and lines == [("config error: reward.functions[0].fn=my_rewards_nowhere:accuracy: cannot be "
                                    "imported (ModuleNotFoundError: No module named 'my_rewards_nowhere')")]
    assert not run_dir.exists()  # refused before the run dir, the data and the model


# ------------------------------------------------------------------------------------------------- a training run
def test_a_users_functions_train_smoke_and_show_in_metrics_and_samples(tmp_path, monkeypatch, capsys):
    """gdro-train experiment=smoke with a user's function beside math-verify, and failing ones beside it: the run
    completes, each term is its own metric at every step and in every sample record, failures are counted."""
    run_dir = tmp_path / "run"
    entries = [{"fn": f"{U}:short_answer", "weight": 0.5, "name": "short"}, *FAILING[:1], *FAILING[3:]]
    code, lines = _main(["experiment=smoke", "steps=2", "eval.at_start=false", "eval.at_end=false", "threads=1",
                         "progress=false", "samples.every=1", f"hydra.run.dir={run_dir}",
                         f"reward.functions={_flow(entries)}"], monkeypatch, capsys)
    assert code == 0, lines
    rows = [r for r in _metrics(run_dir) if r.get("step")]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        n = row["rollout/n_total"]
        assert 0 <= row["reward/short"] <= 1 and row["reward/short/errors"] == 0
        assert row["reward/wrong_length/errors"] == row["reward/nan/errors"] == row["reward/not_a_number/errors"] == n
        assert 0 <= row["reward/raises/errors"] <= n
        recs = samples.read(samples.path_of(run_dir, "train", row["step"]))
        assert recs and all(set(r["terms"]) == {"short", "raises", "wrong_length", "nan", "not_a_number"}
                            for r in recs)
        assert all(r["terms"]["short"] in (0.0, 1.0) and r["terms"]["nan"] is None for r in recs)
        # the reward is math-verify's plus the weighted terms that applied
        assert all(r["reward"] == pytest.approx(float(r["correct"]) + 0.5 * r["terms"]["short"]
                                                + (r["terms"]["raises"] or 0.0)) for r in recs)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_hanging_functions_do_not_stop_a_run(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    code, lines = _main(["experiment=smoke", "steps=2", "eval.at_start=false", "eval.at_end=false", "progress=false",
                         f"hydra.run.dir={run_dir}", f"reward.functions={_flow(FAILING[1:3])}"], monkeypatch, capsys)
    assert code == 0, lines
    rows = [r for r in _metrics(run_dir) if r.get("step")]
    assert all(r["reward/spins/errors"] == r["reward/sleeps/errors"] == r["rollout/n_total"] for r in rows)


def test_a_zero_weight_function_changes_no_other_metric(tmp_path):
    """The functions' path draws no RNG and moves no verdict: with a term of weight 0 every other value of a run is
    the same to the bit (the default config goes through none of it: test_the_default_config_adds_nothing)."""
    def fit(name: str, extra: list[str]) -> list[dict]:
        training = build_training(compose_cfg(FAST + extra), tmp_path / name)
        try:
            return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in training.fit()]
        finally:
            training.logger.close()

    plain = fit("plain", [])
    zero = fit("zero", [f"reward.functions={_flow([{'fn': f'{U}:short_answer', 'weight': 0.0}])}"])
    assert [{k: v for k, v in r.items() if not k.startswith("reward/short_answer")} for r in zero] == plain
    assert all("reward/short_answer" in r for r in zero if r.get("step"))


@pytest.mark.slow
def test_terms_follow_the_groups_a_dynamic_filter_keeps(tmp_path):
    """filter=dynamic draws rounds and keeps groups: the terms go with their rows (metrics over every generated
    rollout, sample records of the kept ones)."""
    training = build_training(compose_cfg(FAST + ["filter=dynamic", "samples.every=1", "samples.train=1000",
                                                  f"reward.functions={_flow([{'fn': f'{U}:short_answer', 'weight': 0.5}])}"]),
                              tmp_path / "run")
    try:
        rows = [r for r in training.fit() if r.get("step")]
    finally:
        training.logger.close()
    for row in rows:
        recs = samples.read(samples.path_of(tmp_path / "run", "train", row["step"]))
        assert len(recs) == row["rollout/n_total"]
        assert all(r["reward"] == float(r["correct"]) + 0.5 * r["terms"]["short_answer"] for r in recs)
        assert 0 <= row["reward/short_answer"] <= 1


@pytest.mark.slow
def test_two_gloo_processes_score_the_terms_as_one(tmp_path):
    """Under torchrun each process scores its own rows: the terms and their errors are gathered as one process has
    them."""
    import subprocess

    fns = f"reward.functions={_flow([{'fn': f'{U}:short_answer'}, {'fn': f'{U}:raises'}])}"
    common = [*FAST, "threads=1", "dist.shards=2", fns]

    def run(name: str, procs: int) -> list[dict]:
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)] \
            if procs > 1 else [sys.executable]
        proc = subprocess.run([*launch, "-m", "gdro.cli.train", *common, f"hydra.run.dir={tmp_path / name}"],
                              capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parent.parent, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [r for r in _metrics(tmp_path / name) if r.get("step")]

    two, one = run("two", 2), run("one", 1)
    keys = ("reward/mean", "reward/accuracy", "reward/short_answer", "reward/raises", "reward/raises/errors")
    assert [[r[k] for k in keys] for r in two] == [[r[k] for k in keys] for r in one]
