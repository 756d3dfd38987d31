"""A user's own data, ``data=custom`` (issue #51, item 2; gdro/data/custom.py): a local file (JSON lines, JSON,
parquet, csv) read with ``datasets`` by its own column names, plain prompts or conversations, levels from a column,
a held-out file or rows for evaluation; malformed rows skipped, counted and said in one line. Real files
(tests/data/custom_math.jsonl: columns qid, question, solution, difficulty; 2 malformed rows and a cut line), the
shipped tiny model, ``experiment=smoke``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gdro.cli import train as cli
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, task_splits
from gdro.data.custom import CustomData
from tests.conftest import compose_cfg

DATA = Path(__file__).resolve().parent / "data"
MATH, HELD, CHAT = DATA / "custom_math.jsonl", DATA / "custom_math_test.jsonl", DATA / "custom_chat.jsonl"
KEYS = ["data=custom", f"data.path={MATH}", "data.prompt_key=question", "data.answer_key=solution",
        "data.level_key=difficulty", "data.id_key=qid"]
MINE = {"prompt_key": "question", "answer_key": "solution", "level_key": "difficulty", "id_key": "qid"}


def test_own_columns_levels_and_malformed_rows_skipped_and_said_in_one_line(capsys):
    data = CustomData(path=str(MATH), test_path=str(HELD), **MINE)
    train, test = data.train(), data.test()
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[gdro.data] train")]
    assert len(out) == 1 and "read 42, kept 40, skipped 2 (bad level: 1, missing prompt: 1)" in out[0]
    assert "custom_math.jsonl: 1 malformed line skipped (line 6)" in out[0]
    assert len(train) == 40 and len(test) == 8 and not {p.uid for p in train} & {p.uid for p in test}
    first = train[0]
    assert (first.uid, first.prompt, first.answer, first.level) == ("custom/train/q000", "Copy: 5.", "5", 1)
    assert first.columns == {"qid": "q000", "solution": "$5$", "difficulty": "Level 1"} and first.messages is None
    assert sorted({p.level for p in train}) == [1, 2, 3, 4, 5] and test[0].uid == "custom/test/q100"


def test_conversations_and_rows_held_out():
    data = CustomData(path=str(CHAT), prompt_key="messages", answer_key="gold", level_key="tier", test_size=2)
    train, test = data.train(), data.test()
    assert len(train) == 6 and len(test) == 2 and not {p.uid for p in train} & {p.uid for p in test}
    p = train[0]
    assert p.prompt == "Copy: 6." and p.answer == "6" and p.level == 1  # the last user message; "$6$" read as 6
    assert p.messages == ({"role": "system", "content": "Answer in a box."}, {"role": "user", "content": "Copy: 6."})
    assert p.columns == {"gold": "$6$", "tier": 1}


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_parquet_csv_and_json_files_read_the_same(fmt, tmp_path):
    import datasets

    rows = [json.loads(line) for line in HELD.read_text().splitlines()]
    path = tmp_path / f"held.{fmt}"
    ds = datasets.Dataset.from_list(rows)
    if fmt == "json":
        path.write_text(json.dumps(rows))  # one JSON array
    else:
        getattr(ds, f"to_{fmt}")(str(path))
    got = CustomData(path=str(path), test_size=1, **MINE).train()
    want = CustomData(path=str(HELD), test_size=1, **MINE).train()
    assert [(p.uid, p.prompt, p.answer, p.level) for p in got] == [(p.uid, p.prompt, p.answer, p.level) for p in want]


BAD = [
    (["data.path=3"], "data.path=3: must be a string or null"),
    (["data.test_size=-1"], "data.test_size=-1: must be an integer >= 0"),
    (["data.test_size=2", f"data.test_path={HELD}"], "data.test_size=2: must be 0 when test_path or test_split"),
    (["data.split=test"], "data.split=test: must be 'train' for a data file"),
    ([f"data.test_path={HELD}", "data.test_split=test"], "data.test_split=test: must be null for a held-out data file"),
    (["data.prompt_key=''"], "data.prompt_key='': must be a non-empty string"),
    (["data.level_key=' '"], "data.level_key=' ': must be a non-empty string or null"),
    (["data.prompt_key=solution", "data.answer_key=solution"], "data.prompt_key=solution: must differ"),
    (["data.id_key=[a]"], "data.id_key=[a]: must be a string or null"),
    (["data.answer_key=''"], "data.answer_key='': must be a non-empty string or null"),
    (["data.test_path=''"], "data.test_path='': must be a data file (.jsonl/.json/.parquet/.csv) or a hub dataset id"),
    (["data.test_split=3"], "data.test_split=3: must be a string or null"),
    (["data.split=''"], "data.split='': must be a non-empty string"),
    (["+data.nope=1"], "unknown key 'data.nope'"),
    (["data.answer_key=null"], "data.answer_key=null: the data has no golds, and reward=math-verify reads them"),
]


@pytest.mark.parametrize(("overrides", "says"), BAD, ids=[b[1].split(":")[0] for b in BAD])
def test_bad_values_are_one_line_naming_the_key(overrides, says):
    with pytest.raises(ConfigError) as err:
        build_components(compose_cfg([*KEYS, *overrides]))
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("overrides", "says"), [
    (["data=custom"], "data.path=null: name your data"),
    (KEYS, "data.test_size=0: no held-out data for evaluation; set data.test_path"),
    ([*KEYS, "data.test_size=1", "data.level_key=nope"], "no column 'nope' (set data.level_key): 41"),
    ([*KEYS, "data.test_size=1", f"data.path={DATA / 'nowhere.jsonl'}"], "nowhere.jsonl: no such file"),
    ([*KEYS, "data.test_size=1", "data.path=nobody/no-such-dataset"], "nobody/no-such-dataset (split train): could not"),
])
def test_missing_or_unreadable_data_is_one_line_before_the_model(overrides, says):
    data = build_components(compose_cfg(overrides)).data
    with pytest.raises(ConfigError) as err:
        task_splits(data)  # build_training calls it before the model loads
    assert says in str(err.value) and "\n" not in str(err.value)


def test_gdro_train_on_a_users_file_trains_and_evaluates_per_level(tmp_path, monkeypatch, capsys):
    """gdro-train data=custom data.path=<own columns> experiment=smoke sampler=oracle-levels: it trains, evaluates on
    the held-out file per level, the oracle sampler draws by the file's levels, and the skipped rows are said."""
    run_dir = tmp_path / "run"
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["gdro-train", "experiment=smoke", *KEYS, f"data.test_path={HELD}", "steps=2",
                                      "sampler=oracle-levels", "eval.max_problems=8", "threads=1", "progress=false",
                                      "samples.every=1", f"hydra.run.dir={run_dir}"])
    try:
        code = cli.train()
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert not code, err
    assert "[gdro.data] train: custom" in out and "skipped 2 (bad level: 1, missing prompt: 1)" in out
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in (rows[0], rows[-1]):  # evaluated at start and end, per level of the held-out file
        assert row["eval/n_problems"] == 8 and {f"eval/mean@4/level_{lv}" for lv in range(1, 6)} <= set(row)
    assert {f"oracle/level_share/{lv}" for lv in range(1, 6)} <= set(rows[-1])
    recs = [json.loads(line) for line in (run_dir / "samples" / "train_000001.jsonl").read_text().splitlines()]
    assert recs and all(r["uid"].startswith("custom/train/q") and 1 <= r["level"] <= 5 for r in recs)
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "completed"


def test_a_conversational_file_trains_with_a_users_correctness_function(tmp_path, monkeypatch, capsys):
    """reward=functions on a conversational file: the user's function is the correctness; it gets the messages."""
    run_dir = tmp_path / "run"
    fns = '[{fn: "tests.user_rewards:level_correct", name: right}]'
    monkeypatch.setattr(sys, "argv", ["gdro-train", "experiment=smoke", "data=custom", f"data.path={CHAT}",
                                      "data.prompt_key=messages", "data.answer_key=gold", "data.level_key=tier",
                                      "data.test_size=2", "reward=functions", f"reward.functions={fns}", "steps=2",
                                      "progress=false", f"hydra.run.dir={run_dir}"])
    try:
        code = cli.train()
    except SystemExit as exit_:
        code = exit_.code
    assert not code, capsys.readouterr().err
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("reward/right" in r and r["reward/right/errors"] == 0 for r in rows if r["step"])
    assert all(r["reward/accuracy"] == pytest.approx(r["reward/right"]) for r in rows if r["step"])
    assert "eval/mean@4/level_1" in rows[0]
