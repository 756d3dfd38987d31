"""Benchmark loaders on small local fixtures with the real schemas (offline)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gdro.data.benchmarks import (
    BENCHMARKS,
    GPQA_LETTERS,
    MATH_SUFFIX,
    MalformedRow,
    get_spec,
    gpqa_options,
    load_benchmark,
    normalize_gold,
    problems_from_rows,
)
from gdro.rewards import MathVerifyReward

FIX = Path(__file__).resolve().parent / "fixtures" / "benchmarks"

# name -> (fixture, rows read, kept, skip reasons, expected {uid: gold})
MATH_CASES = {
    "math500": (
        "math500.jsonl",
        4,
        2,
        {"empty question": 1, "missing answer": 1},
        {
            "math500/test/test/precalculus/807.json": "\\left( 3, \\frac{\\pi}{2} \\right)",
            "math500/test/test/prealgebra/1.json": "\\frac{5}{6}",
        },
    ),
    "aime2024": (
        "aime2024.jsonl",
        3,
        2,
        {"empty answer": 1},
        {"aime2024/train/60": "204", "aime2024/train/61": "025"},
    ),
    "aime2025": (
        "aime2025.parquet",
        3,
        2,
        {"missing question": 1},
        {"aime2025/train/1": "70", "aime2025/train/2": "588"},
    ),
    "amc23": (
        "amc23.jsonl",
        3,
        2,
        {"missing question": 1},
        {"amc23/test/0": "27", "amc23/test/1": "0.5"},
    ),
    "minerva": (
        "minerva.jsonl",
        4,
        3,
        {"missing question": 1},
        {"minerva/test/#00000": "1.6", "minerva/test/#00001": "0.5", "minerva/test/#00003": "12"},
    ),
    "olympiadbench": (
        "olympiadbench.jsonl",
        3,
        2,
        {"non-string answer": 1},
        {"olympiadbench/test/1606": "2", "olympiadbench/test/1607": "-2, 2"},
    ),
    "dapo_math": (
        "dapo_math.parquet",
        4,
        3,
        {"missing answer": 1},
        {
            "dapo_math/train/9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079": "3",
            "dapo_math/train/b426d104-244d-4831-a2c4-cd756b61700a": "\\frac{3}{4}",
            "dapo_math/train/6ff0b17f-7e5c-4ae9-b5e9-63ebecd2b9f7": "4",
        },
    ),
}


def _load(name: str, tmp_path: Path, **kw):
    fixture = MATH_CASES[name][0] if name in MATH_CASES else "gpqa_diamond.jsonl"
    return load_benchmark(name, data_files=str(FIX / fixture), cache_dir=str(tmp_path / "cache"), **kw)


@pytest.fixture(scope="module")
def reward() -> MathVerifyReward:
    return MathVerifyReward()


def test_registry_covers_the_paper_datasets():
    assert {s.hf_id for s in BENCHMARKS.values()} == {
        "open-r1/DAPO-Math-17k-Processed",
        "HuggingFaceH4/MATH-500",
        "HuggingFaceH4/aime_2024",
        "MathArena/aime_2025",
        "math-ai/amc23",
        "math-ai/minervamath",
        "math-ai/olympiadbench",
        "Idavidrein/gpqa",
    }
    assert BENCHMARKS["dapo_math"].config == "en"
    assert BENCHMARKS["gpqa_diamond"].config == "gpqa_diamond"
    assert BENCHMARKS["math500"].split == "test"


def test_unknown_name_lists_known_names():
    with pytest.raises(ValueError, match="math500") as err:
        load_benchmark("nope")
    assert "gpqa_diamond" in str(err.value)


@pytest.mark.parametrize("name", sorted(MATH_CASES))
def test_math_benchmark(name, tmp_path, reward):
    _, read, kept, reasons, golds = MATH_CASES[name]
    problems, report = _load(name, tmp_path)
    assert (report.rows_read, report.kept, report.n_skipped) == (read, kept, read - kept)
    assert dict(report.skipped) == reasons
    assert {p.uid: p.answer for p in problems} == golds
    for p in problems:
        assert p.level == 0
        assert p.prompt.endswith(MATH_SUFFIX)
        assert p.prompt.endswith(" Let's think step by step and output the final answer within \\boxed{}.")
        assert not p.prompt.startswith(" ")
        assert p.uid.startswith(f"{name}/")
    batch = reward.score(
        [f"\\boxed{{{p.answer}}}" for p in problems], [p.answer for p in problems], [True] * len(problems)
    )
    assert list(batch.correct) == [True] * len(problems), [p.answer for p in problems]
    # uids are stable: reloading gives the same problems
    again, _ = _load(name, tmp_path)
    assert again == problems


def test_prompt_is_question_plus_suffix(tmp_path):
    problems, _ = _load("math500", tmp_path)
    q = "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates."
    assert problems[0].prompt == q + MATH_SUFFIX


def test_limit_and_split_label(tmp_path):
    problems, report = _load("minerva", tmp_path, limit=2, split="dev")
    assert report.rows_read == 2 and report.split == "dev"
    assert [p.uid for p in problems] == ["minerva/dev/#00000", "minerva/dev/#00001"]


def test_column_overrides(tmp_path):
    # a copy of MATH-500 whose gold column is the full solution: the boxed part is extracted
    problems, _ = _load("math500", tmp_path, answer_keys="solution")
    assert [p.answer for p in problems] == ["\\left( 3, \\frac{\\pi}{2} \\right)", "\\frac{5}{6}", "4"]
    with pytest.raises(TypeError):
        get_spec("math500", no_such_field=1)


def test_gpqa(tmp_path, reward):
    problems, report = _load("gpqa_diamond", tmp_path, seed=0)
    assert (report.rows_read, report.kept) == (4, 3)
    assert dict(report.skipped) == {"wrong GPQA option count": 1}
    assert report.skipped_rows == [(2, "wrong GPQA option count")]
    assert [p.uid for p in problems] == [
        "gpqa_diamond/train/recA1",
        "gpqa_diamond/train/recB2",
        "gpqa_diamond/train/recD4",
    ]
    correct = {"recA1": "The photon", "recB2": "Na", "recD4": "Nitrogen"}
    for p in problems:
        assert p.answer in GPQA_LETTERS
        assert p.prompt.endswith(
            "Please reason step by step, and put your final answer within \\boxed{}.\n"
            "Please only provide the letter of the answer in the box."
        )
        lines = dict(
            line.split(": ", 1) for line in p.prompt.splitlines() if line[:3] in {"A: ", "B: ", "C: ", "D: "}
        )
        assert sorted(lines) == list(GPQA_LETTERS)
        assert lines[p.answer] == correct[p.uid.rsplit("/", 1)[1]]
    assert problems[0].prompt.startswith("Which particle mediates the electromagnetic force?\n\nA: ")
    batch = reward.score(
        [f"\\boxed{{{p.answer}}}" for p in problems], [p.answer for p in problems], [True] * 3
    )
    assert list(batch.correct) == [True] * 3
    # deterministic for a fixed seed
    again, _ = _load("gpqa_diamond", tmp_path, seed=0)
    assert again == problems


def test_gpqa_shuffle_depends_on_seed_and_row():
    orders = {s: tuple(gpqa_options(0, s)) for s in range(20)}
    assert len(set(orders.values())) > 1
    assert tuple(gpqa_options(0, 3)) == orders[3]
    assert len({tuple(gpqa_options(i, 0)) for i in range(20)}) > 1
    gold_letters = Counter(GPQA_LETTERS[list(gpqa_options(i, 0)).index(0)] for i in range(400))
    assert set(gold_letters) == set(GPQA_LETTERS)  # the gold is not stuck on one letter


def test_gpqa_prompts_differ_across_seeds(tmp_path):
    prompts = {s: [p.prompt for p in _load("gpqa_diamond", tmp_path, seed=s)[0]] for s in range(6)}
    assert len({tuple(v) for v in prompts.values()}) > 1


def test_malformed_rows_never_raise():
    spec = BENCHMARKS["aime2025"]
    rows = [
        {"problem": "Fine.", "answer": 5, "problem_idx": 1},
        {"problem": 7, "answer": "1", "problem_idx": 2},
        {"problem": "Bool answer.", "answer": True, "problem_idx": 3},
        {"problem": "Dict answer.", "answer": {"x": 1}, "problem_idx": 4},
        {"problem": "NaN answer.", "answer": float("nan"), "problem_idx": 5},
        "not a row",
        {"problem": "No id.", "answer": "9"},
        {"problem": "Same id as the first.", "answer": "4", "problem_idx": 1},
    ]
    problems, report = problems_from_rows(rows, spec)
    assert [p.uid for p in problems] == ["aime2025/train/1", "aime2025/train/#00006"]
    assert dict(report.skipped) == {
        "non-string question": 1,
        "non-string answer": 2,
        "non-finite answer": 1,
        "row is not a mapping": 1,
        "duplicate uid": 1,
    }
    gpqa = BENCHMARKS["gpqa_diamond"]
    dup = {
        "Question": "q",
        "Correct Answer": "x",
        "Incorrect Answer 1": "x",
        "Incorrect Answer 2": "y",
        "Incorrect Answer 3": "z",
    }
    missing = {"Question": "q", "Correct Answer": "x", "Incorrect Answer 1": "y"}
    _, report = problems_from_rows([dup, missing], gpqa)
    assert dict(report.skipped) == {"duplicate GPQA options": 1, "wrong GPQA option count": 1}
    assert "kept 0" in report.summary()


def test_normalize_gold():
    assert normalize_gold("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert normalize_gold("so $\\boxed{x^{2}}$ and \\boxed{\\sqrt{2}}") == "\\sqrt{2}"
    assert normalize_gold(" $3$ ") == "3"
    assert normalize_gold(70) == "70"
    assert normalize_gold(27.0) == "27"
    with pytest.raises(MalformedRow):
        normalize_gold("\\boxed{}")


def test_data_files_format_errors(tmp_path):
    with pytest.raises(ValueError, match="unsupported"):
        load_benchmark("math500", data_files=str(tmp_path / "x.txt"))
    with pytest.raises(ValueError, match="mix"):
        load_benchmark("math500", data_files=[str(FIX / "math500.jsonl"), str(FIX / "aime2025.parquet")])
