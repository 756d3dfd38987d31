"""The benchmarks gdro knows, by name: where each lives (hub id, config, split) and how its columns map to a problem
(:class:`BenchmarkSpec`, :data:`BENCHMARKS`, :func:`get_spec`), with the prompt each kind gets (:data:`MATH_SUFFIX`,
:data:`GPQA_TEMPLATE`).

Column names: question and answer columns are *candidate lists* tried in order (the first column present in
the row with a non-null value wins), like the official ``_extract_question``/``_extract_answer_text``; a dotted
name reaches into a struct (``reward_model.ground_truth``, where verl's DAPO release keeps the gold). Column names
confirmed and unconfirmed are listed per entry in :data:`BENCHMARKS`. Every field of a :class:`BenchmarkSpec` can be
overridden per call: ``load_benchmark("amc23", question_keys=("problem",))``
(:func:`gdro.data.benchmarks.load_benchmark`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

MATH_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."
GPQA_TEMPLATE = (
    "{question}\n\n"
    "A: {A}\n"
    "B: {B}\n"
    "C: {C}\n"
    "D: {D}\n\n"
    "Please reason step by step, and put your final answer within \\boxed{{}}.\n"
    "Please only provide the letter of the answer in the box."
)
GPQA_LETTERS = "ABCD"

Kind = Literal["math", "gpqa"]
ListAnswers = Literal["auto", "all", "any"]


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark lives and how its rows map to problems.

    ``question_keys``/``answer_keys`` are candidate columns tried in order; for ``kind="gpqa"``
    ``answer_keys`` is ``(correct, incorrect_1, incorrect_2, incorrect_3)`` -- all four are required.
    ``id_key`` is a column (a dotted path reaches into a struct: ``"extra_info.index"``) or ``None``.
    ``chat_role``, ``solution_key``, ``list_answers`` and ``multiple_answer_key``: see :mod:`gdro.data.benchmark_rows`.
    """

    name: str
    hf_id: str
    config: str | None
    split: str
    question_keys: tuple[str, ...]
    answer_keys: tuple[str, ...]
    kind: Kind = "math"
    id_key: str | None = None
    chat_role: str = "user"  # a chat-format question: the content of its last message with this role
    solution_key: str | None = None  # no answer column: the gold is this column's last \boxed{}
    list_answers: ListAnswers = "auto"  # a list gold: parts of one answer ("all") or alternatives ("any")
    multiple_answer_key: str | None = "is_multiple_answer"  # "auto": this row flag says parts (true) or alternatives

    def __post_init__(self) -> None:
        if self.kind not in ("math", "gpqa"):
            raise ValueError(f"kind must be 'math' or 'gpqa', got {self.kind!r}")
        if self.list_answers not in ("auto", "all", "any"):
            raise ValueError(f"list_answers must be 'auto', 'all' or 'any', got {self.list_answers!r}")
        if not self.question_keys or not self.answer_keys:
            raise ValueError("question_keys and answer_keys must be non-empty")
        if self.kind == "gpqa" and len(self.answer_keys) != 4:
            raise ValueError(
                "a gpqa spec needs answer_keys = (correct, incorrect 1, incorrect 2, incorrect 3)"
            )


BENCHMARKS: dict[str, BenchmarkSpec] = {
    spec.name: spec
    for spec in (
        # Confirmed: create_dataset.py of the dataset repo (prompt = source_prompt[0].content, solution =
        # reward_model.ground_truth; columns prompt, solution, data_source, source_prompt, ability,
        # reward_model, extra_info{index}); split "train", config "en" from the official preprocessing script.
        # The original release / verl format (prompt = chat messages, gold under reward_model.ground_truth or
        # label) loads with the same spec (tested on real rows of both).
        BenchmarkSpec(
            "dapo_math",
            "open-r1/DAPO-Math-17k-Processed",
            "en",
            "train",
            ("prompt",),
            ("solution", "reward_model.ground_truth", "label"),
            id_key="extra_info.index",
        ),
        # Fields from the dataset card as given in the brief (problem, solution, answer, subject, level,
        # unique_id); "answer" (not the full solution) is the gold, as in the official _extract_answer_text.
        BenchmarkSpec(
            "math500",
            "HuggingFaceH4/MATH-500",
            None,
            "test",
            ("problem",),
            ("answer",),
            id_key="unique_id",
        ),
        # Confirmed (dataset card): id int64, problem, solution, answer (string), url, year; split "train".
        BenchmarkSpec(
            "aime2024",
            "HuggingFaceH4/aime_2024",
            None,
            "train",
            ("problem",),
            ("answer",),
            id_key="id",
        ),
        # Inferred from the sibling MathArena cards (aime_2023_II, aime_2024_I/II, aime_2026): problem_idx
        # int64, problem, answer (int64 there); split "train". Not read from aime_2025's own card.
        BenchmarkSpec(
            "aime2025",
            "MathArena/aime_2025",
            None,
            "train",
            ("problem",),
            ("answer",),
            id_key="problem_idx",
        ),
        # math-ai/amc23 / minervamath / olympiadbench: single "test" split (repo file listings: test parquet
        # / test.jsonl); columns question + answer from third-party loaders, not the cards themselves.
        # Fallback candidates mirror the official extractor's order.
        BenchmarkSpec(
            "amc23",
            "math-ai/amc23",
            None,
            "test",
            ("question", "problem"),
            ("answer", "final_answer"),
            id_key="id",
        ),
        BenchmarkSpec(
            "minerva",
            "math-ai/minervamath",
            None,
            "test",
            ("question", "problem"),
            ("answer", "final_answer"),
        ),
        BenchmarkSpec(
            "olympiadbench",
            "math-ai/olympiadbench",
            None,
            "test",
            ("question", "problem"),
            ("final_answer", "answer"),
            id_key="id",
        ),
        # Confirmed (several loaders): config gpqa_diamond, split "train", columns "Question",
        # "Correct Answer", "Incorrect Answer 1..3". "Record ID" is from the original GPQA CSV (unconfirmed
        # on the hub copy; rows without it fall back to the row index).
        BenchmarkSpec(
            "gpqa_diamond",
            "Idavidrein/gpqa",
            "gpqa_diamond",
            "train",
            ("Question",),
            ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"),
            kind="gpqa",
            id_key="Record ID",
        ),
    )
}


def get_spec(name: str, **overrides: Any) -> BenchmarkSpec:
    """The registered spec for ``name`` with ``overrides`` applied; unknown names raise ``ValueError``."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    spec = BENCHMARKS[name]
    for key in ("question_keys", "answer_keys"):
        if isinstance(overrides.get(key), str):
            overrides[key] = (overrides[key],)
        elif key in overrides:
            overrides[key] = tuple(overrides[key])
    return dataclasses.replace(spec, **overrides) if overrides else spec


__all__ = ["BENCHMARKS", "GPQA_LETTERS", "GPQA_TEMPLATE", "MATH_SUFFIX", "BenchmarkSpec", "get_spec"]
