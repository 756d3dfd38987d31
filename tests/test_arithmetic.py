"""The addition task of experiment=smollm2-add (gdro/data/arithmetic.py) and the held-out answer-format metrics."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from hydra.utils import instantiate

from gdro.algorithm.heldout import format_rates
from gdro.data.arithmetic import ADD_PROMPT, AddTask, operand_range
from gdro.grading.answers import last_number
from gdro.grading.rewards import MathVerifyReward
from tests.conftest import compose_cfg

PAIR = re.compile(r"What is (\d+) \+ (\d+)\?")


def _pairs(problems):
    return [tuple(int(x) for x in PAIR.match(p.prompt).groups()) for p in problems]


def test_splits_are_deterministic_disjoint_and_correct():
    task = AddTask(train_size=300)
    test, train = task.test(), task.train()
    assert [p.uid for p in test] == [p.uid for p in AddTask(train_size=300).test()]
    assert train == AddTask(train_size=300).train()
    assert train != AddTask(train_size=300, seed=7).train()
    assert Counter(p.level for p in test) == {1: 50, 2: 64, 3: 64}  # level 1 has 100 pairs: half held out
    assert Counter(p.level for p in train) == {1: 100, 2: 100, 3: 100}  # uniform, exact
    assert len(set(_pairs(test))) == len(test)  # distinct held-out pairs
    assert not set(_pairs(test)) & set(_pairs(train))  # never trained on
    for p, (a, b) in zip(test + train, _pairs(test + train)):
        lo, hi = operand_range(p.level)
        assert lo <= a < hi and lo <= b < hi and p.answer == str(a + b)
        assert p.prompt == ADD_PROMPT.format(a=a, b=b)
    assert test[0].prompt.endswith("Put the final answer in \\boxed{}.")


def test_operand_ranges():
    assert operand_range(1) == (0, 10) and operand_range(2) == (10, 100) and operand_range(3) == (100, 1000)


@pytest.mark.parametrize("kwargs,key", [
    ({"min_level": 0}, "min_level"), ({"max_level": 10}, "max_level"), ({"min_level": 3, "max_level": 2}, "max_level"),
    ({"train_size": 0}, "train_size"), ({"test_per_level": 0}, "test_per_level"), ({"level_dist": "x"}, "level_dist"),
    ({"prompt": "What is {a}?"}, "prompt"), ({"prompt": "{a} + {b} = {c}"}, "prompt"), ({"prompt": "{a}+{b} {}"}, "prompt"),
])
def test_bad_settings_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        AddTask(**kwargs)


def test_the_reward_of_the_preset_reads_the_stated_sum():
    """answer_mode=number with the end token required (experiment=smollm2-add), on the model's own styles of answer:
    the last number counts, boxed or not; a right sum cut off at the limit does not; restating the question does
    not either, where answer_mode=any (math-verify evaluates the expression) scores it as right: why the preset
    reads numbers."""
    texts = ["47 + 56 = 103", "The answer is \\boxed{103}.", "47 + 56 = 221", "47 + 56 = 103", "47 + 56",
             "47 + 56 = 1,03", "It is 103.0", "x103", "The sum: 1,234 apples", "47 + 56 = 103.  Check: 103 - 56 = 47"]
    finished = np.array([True, True, True, False, True, True, True, True, True, True])
    golds = ["103"] * 8 + ["1234", "103"]
    number = MathVerifyReward(answer_mode="number", require_eos=True).score(texts, golds, finished).correct.tolist()
    assert number == [True, True, False, False, False, False, True, False, True, False]
    anything = MathVerifyReward(answer_mode="any", require_eos=True).score(texts[:5], golds[:5], finished[:5])
    assert anything.correct.tolist() == [True, True, False, False, True]  # the restated question scores


@pytest.mark.parametrize("text,number", [
    ("47 + 56 = 103", "103"), ("-9", "-9"), ("x = -1,250.5.", "-1250.5"), ("v2 or 3x", None), ("none", None),
    ("1, 2, 3", "3"), ("1.5e3", "1.5e3"), ("3.14.", "3.14"), ("1,2345", "2345"), ("a 12.", "12"),
])
def test_last_number(text, number):
    assert last_number(text) == number


def test_format_rates_count_boxes_and_end_tokens_per_level():
    texts = ["\\boxed{9}", "9", "\\boxed{", "x \\boxed{1} y", "12"]
    finished = np.array([True, False, True, True, False])
    groups = np.array([0, 0, 1, 2, 2])  # problems 0, 1 at level 1; problem 2 at level 3
    out = format_rates(texts, finished, groups, [1, 1, 3])
    # final_box: finished with the answer in a final box: "\\boxed{9}" and "x \\boxed{1} y" (2 of 5)
    assert out == pytest.approx({"eval/boxed": 40.0, "eval/finished": 60.0, "eval/final_box": 40.0,
                                 "eval/boxed/level_1": 100 / 3, "eval/finished/level_1": 200 / 3,
                                 "eval/boxed/level_3": 50.0, "eval/finished/level_3": 50.0})


def test_the_preset_composes_to_what_its_comments_say():
    cfg = compose_cfg(["experiment=smollm2-add"])
    assert cfg.model.fallback.endswith("smollm2-135m-instruct") and cfg.model.hub_kernels is False
    assert cfg.sampler._target_.endswith("UniformSampler") and cfg.allocator._target_.endswith("FixedAllocator")
    assert (cfg.reward.answer_mode, cfg.reward.require_eos, cfg.loss.beta_kl) == ("number", True, 0.0)
    assert (cfg.steps, cfg.prompts_per_step, cfg.rollouts_per_prompt, cfg.threads) == (30, 8, 8, 1)
    assert cfg.eval.format_metrics is True and cfg.eval.k == 1
    task = instantiate(cfg.data)
    assert isinstance(task, AddTask) and len(task.train()) == 64 and len(task.test()) == 178
