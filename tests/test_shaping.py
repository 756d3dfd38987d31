"""Reward shaping beside correctness (gdro/grading/shaping.py): the format term (``reward.format_weight``) and
DAPO's soft overlong punishment (``reward.overlong_buffer``, arXiv 2503.14476 Eq. 13), against hand-computed
values, through the real math-verify reward; evaluation scores correctness alone; bad values name their key."""

from __future__ import annotations

import numpy as np
import pytest

from gdro.grading.answers import final_box
from gdro.grading.reward_config import RewardConfig
from gdro.grading.rewards import MathVerifyReward
from gdro.grading.shaping import format_flags, overlong_penalty


@pytest.mark.parametrize(("text", "want"), [
    ("47 + 56 = \\boxed{103}", True),
    ("so the sum is \\boxed{103}.", True),  # punctuation after the box
    ("\\boxed{1} then \\boxed{103}", True),  # the last box holds the final answer
    ("\\boxed{103}, so 104", False),  # a number after the box: the box is not the final answer
    ("\\boxed{}", False),  # empty
    ("\\boxed{  }", False),  # blank
    ("\\boxed{103", False),  # unclosed
    ("103", False),  # no box
    ("\\boxed{\\frac{1}{2}} done", True),  # nested braces, words after
    ("\\boxed{x} is 2x", True),  # "2x" is not a number (glued to a letter)
])
def test_final_box_by_hand(text, want):
    assert final_box(text) is want


def test_format_flags_need_the_end_token_and_read_the_graders_window():
    texts = ["\\boxed{5}", "\\boxed{5}", "\\boxed{5}" + " pad" * 10, "x"]
    got = format_flags(texts, [True, False, True, True], tail_chars=300, require_eos=True)
    assert got.tolist() == [True, False, True, False]
    # the box falls out of a 20-character window: not what the grader reads
    assert format_flags(texts[2:3], [True], tail_chars=20, require_eos=True).tolist() == [False]
    # without require_eos a truncated completion may still be formatted
    assert format_flags(texts[1:2], [False], tail_chars=None, require_eos=False).tolist() == [True]


def test_overlong_penalty_is_eq_13_by_hand():
    # L_max = 20, L_cache = 8: no penalty up to 12 tokens, then -(|y| - 12) / 8, and -1 beyond 20
    lengths = [0, 5, 12, 13, 16, 20, 21]
    want = [0.0, 0.0, 0.0, -1 / 8, -4 / 8, -1.0, -1.0]
    np.testing.assert_allclose(overlong_penalty(lengths, max_tokens=20, buffer=8), want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(overlong_penalty(lengths, max_tokens=20, buffer=8, factor=0.5),
                               [0.5 * w for w in want], rtol=0, atol=1e-15)
    for buffer in (0, 20, 25):
        with pytest.raises(ValueError, match="overlong buffer must be > 0 and < the length limit 20"):
            overlong_penalty(lengths, max_tokens=20, buffer=buffer)


def test_the_reward_adds_both_terms_and_keeps_correctness_apart():
    """Four completions, gold 12 (reward.answer_mode=number, the SmolLM2 setting), L_max 16, L_cache 4, weight 0.5:
    right and boxed, 10 tokens: 1 + 0.5 = 1.5; right, unboxed, 13 tokens: 1 - 1/4 = 0.75; boxed but a number after the
    box (read as the answer, 13: wrong), 16 tokens: 0 + 0 - 1 = -1; truncated (no end token), 16 tokens: 0 + 0 - 1."""
    reward = MathVerifyReward(answer_mode="number", format_weight=0.5, overlong_buffer=4, overlong_max_tokens=16)
    texts = ["so \\boxed{12}.", "it is 12", "\\boxed{12} then 13", "\\boxed{12"]
    batch = reward.score(texts, ["12"] * 4, [True, True, True, False], [10, 13, 16, 16])
    np.testing.assert_allclose(batch.rewards, [1.5, 0.75, -1.0, -1.0], rtol=0, atol=1e-15)
    assert batch.correct.tolist() == [True, True, False, False]  # correctness alone: what the controllers read
    assert (batch.n_formatted, batch.n_overlong, batch.n_truncated) == (1, 3, 1)
    metrics = reward.metrics(batch)
    assert metrics["reward/format_frac"] == 0.25 and metrics["reward/overlong_frac"] == 0.75
    assert metrics["reward/accuracy"] == 0.5  # accuracy is logged apart from the shaped reward
    # evaluation scores correctness alone (and needs no lengths)
    plain = reward.for_eval().score(texts, ["12"] * 4, [True, True, True, False])
    assert plain.rewards.tolist() == [1.0, 1.0, 0.0, 0.0] and plain.correct.tolist() == batch.correct.tolist()


def test_defaults_add_nothing_and_still_count_the_format():
    reward = MathVerifyReward()
    batch = reward.score(["\\boxed{7}", "7", "\\boxed{8}"], ["7"] * 3, [True] * 3)
    assert batch.rewards.tolist() == [1.0, 0.0, 0.0]  # boxed mode: the unboxed 7 is unparsable
    assert batch.n_formatted == 2 and batch.n_overlong == 0
    same_window = MathVerifyReward(eval_tail_chars=300)  # unshaped, one window: evaluation uses the reward itself
    assert same_window.for_eval() is same_window
    assert MathVerifyReward(eval_tail_chars=300, format_weight=1.0).for_eval().config.format_weight == 0.0


def test_overlong_needs_the_lengths():
    reward = MathVerifyReward(overlong_buffer=4, overlong_max_tokens=16)
    with pytest.raises(ValueError, match="overlong_buffer > 0 needs the completions' token lengths"):
        reward.score(["\\boxed{1}"], ["1"], [True])
    with pytest.raises(ValueError, match="lengths must have one entry per completion"):
        reward.score(["\\boxed{1}"], ["1"], [True], [3, 4])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"format_weight": -0.1}, "format_weight must be a finite number >= 0"),
    ({"format_weight": float("nan")}, "format_weight must be a finite number >= 0"),
    ({"overlong_factor": -1.0}, "overlong_factor must be a finite number >= 0"),
    ({"overlong_buffer": -2}, "overlong_buffer must be an integer >= 0"),
    ({"overlong_buffer": 1.5}, "overlong_buffer must be an integer >= 0"),
    ({"overlong_buffer": 4}, "overlong_buffer=4 needs overlong_max_tokens"),
    ({"overlong_buffer": 16, "overlong_max_tokens": 16}, "overlong_buffer=16 needs overlong_max_tokens"),
])
def test_bad_values_name_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RewardConfig(**kwargs)
