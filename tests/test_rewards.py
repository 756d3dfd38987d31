"""math-verify reward: equivalences, rejections, failure counts, bounded time on junk, cache, threads, config.

Real math-verify throughout. Time is guarded by pytest-timeout, never asserted (slow junk prints its time).
"""

from __future__ import annotations

import random
import signal
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gdro.rewards import MathVerifyReward, RewardBatch, RewardConfig, last_boxed, tail


@pytest.fixture(scope="module")
def reward() -> MathVerifyReward:
    return MathVerifyReward()


def one(reward: MathVerifyReward, text: str, gold: str, finished: bool = True) -> RewardBatch:
    return reward.score([text], [gold], [finished])


def _junk() -> list[str]:
    rng = random.Random(0)
    garbage = "".join(rng.choice("abc{}\\^_$0123456789 ()+-*/=!") for _ in range(200_000))
    return [
        garbage,
        "\\boxed{" * 5000,
        "\\boxed{9^{9^{9^{9^{9}}}}}",
        "x " * 1000 + "\\boxed{10^{10^{10}}}",
        "\\boxed{((9!)!)!}",
        "\\boxed{\\binom{10^{9}}{10^{5}}}",
        "}" * 100_000 + "\\boxed{" + "{" * 100_000,
    ]


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\frac12}", "\\frac{1}{2}"),
        ("\\boxed{\\dfrac{1}{2}}", "0.5"),
        ("\\boxed{389192}", "389192"),
        ("\\boxed{389,192}", "389192"),
        ("\\boxed{389192.0}", "389192"),
        ("so we get \\boxed{389192}. Done, and that is all.", "389192"),
        ("The answer is \\boxed{12}", "12"),
        ("first \\boxed{7}, then corrected: \\boxed{12}", "12"),
        ("\\boxed{x = 12}", "12"),
        ("\\boxed{\\boxed{12}}", "12"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\boxed{2^{10}}", "1024"),
        ("\\boxed{5}", "\\boxed{5}"),  # an already boxed gold still parses
    ],
)
def test_equivalent_forms_accepted(reward, text, gold):
    b = one(reward, text, gold)
    assert b.correct.tolist() == [True] and b.rewards.tolist() == [1.0]
    assert (b.n_unparsable, b.n_truncated, b.n_timeout, b.n_bad_gold) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("\\boxed{389191}", "389192"),
        ("\\boxed{38919}", "389192"),  # a prefix of the digits is a different number
        ("\\boxed{3891920}", "389192"),
        ("\\boxed{-389192}", "389192"),
        ("\\boxed{12345678901234567}", "12345678901234568"),  # beyond float64's 15-16 digits
        ("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}"),
        ("\\boxed{12} but later \\boxed{13}", "12"),  # only the final box counts
        ("the answer is 12", "12"),  # boxed mode: an unboxed answer is not read
    ],
)
def test_wrong_answers_rejected(reward, text, gold):
    b = one(reward, text, gold)
    assert b.correct.tolist() == [False] and b.rewards.tolist() == [0.0]


def test_plus_minus_one_rewards():
    r = MathVerifyReward(correct=1.0, incorrect=-1.0)
    b = r.score(["\\boxed{4}", "\\boxed{5}", "nothing"], ["4", "4", "4"], [True, True, True])
    assert b.rewards.dtype == np.float64 and b.correct.dtype == np.bool_
    assert b.rewards.tolist() == [1.0, -1.0, -1.0]
    assert b.correct.tolist() == [True, False, False]


def test_require_eos_truncated_is_incorrect_and_counted():
    texts, golds = ["\\boxed{4}", "\\boxed{4}", "\\boxed{5}"], ["4"] * 3
    b = MathVerifyReward().score(texts, golds, [False, True, False])
    assert b.correct.tolist() == [False, True, False] and b.n_truncated == 2 and b.n_unparsable == 0
    b = MathVerifyReward(require_eos=False).score(texts, golds, np.array([False, True, False]))
    assert b.correct.tolist() == [True, True, False] and b.n_truncated == 0


def test_unparsable_counted_and_incorrect(reward):
    texts = ["no box here", "", "\\boxed{}", "\\boxed{ }", "\\boxed{12", "   "]
    b = reward.score(texts, ["12"] * len(texts), [True] * len(texts))
    assert not b.correct.any() and b.n_unparsable == len(texts) and b.n_timeout == 0
    assert reward.metrics(b)["reward/unparsable_frac"] == 1.0


def test_any_mode_reads_unboxed_answers():
    r = MathVerifyReward(answer_mode="any")
    b = r.score(
        ["so the final answer is $\\frac{1}{2}$", "\\boxed{12}", "I give up"], ["0.5", "12", "12"], [True] * 3
    )
    assert b.correct.tolist() == [True, True, False] and b.n_unparsable == 1


def test_tail_never_splits_a_number():
    text = "x" * 50 + " 389192"
    assert tail(text, 4, whole_tokens=True) == ""  # "9192" would be a different number
    assert tail(text, 7, whole_tokens=True) == " 389192"
    assert tail("short", 300, whole_tokens=True) == "short"
    b = MathVerifyReward(answer_mode="any", tail_chars=4).score([text], ["9192"], [True])
    assert not b.correct[0] and b.n_unparsable == 1
    # boxed: a box cut by the window is not found at all
    b = MathVerifyReward(tail_chars=8).score(["\\boxed{389192}"], ["89192"], [True])
    assert not b.correct[0] and b.n_unparsable == 1


def test_only_tail_is_read():
    text = "\\boxed{12}" + " filler" * 100
    assert not MathVerifyReward().score([text], ["12"], [True]).correct[0]
    assert MathVerifyReward(tail_chars=10_000).score([text], ["12"], [True]).correct[0]


def test_last_boxed():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{2}{3}} c") == "\\frac{2}{3}"
    assert last_boxed("\\boxed{1} then \\boxed{2") == "1"
    assert last_boxed("\\boxed{\\{1,2\\}}") == "\\{1,2\\}"
    assert last_boxed("\\boxed{\\boxed{3}}") == "3"
    assert last_boxed("} } \\boxed{3} }") == "3"
    assert last_boxed("\\boxed{" * 5000) is None
    assert last_boxed("no box") is None


def _score_junk(r: MathVerifyReward) -> tuple[RewardBatch, float]:
    junk = _junk()
    t0 = time.perf_counter()
    b = r.score(junk, ["389192"] * len(junk), [True] * len(junk))
    return b, time.perf_counter() - t0


@pytest.mark.timeout(60)
def test_junk_is_incorrect_in_bounded_time():
    b, dt = _score_junk(MathVerifyReward())
    print(f"junk batch of {len(b.rewards)}: {dt:.2f} s, timeouts={b.n_timeout}, unparsable={b.n_unparsable}")
    assert not b.correct.any()
    assert b.n_timeout >= 4  # the towers, factorials and binomial are rejected as too large to verify


@pytest.mark.timeout(60)
def test_main_thread_deadline_fires_and_keeps_outer_timer():
    """A slow symbolic answer hits the deadline; a pending outer ITIMER_REAL timer survives (math-verify's own
    timeouts would cancel it with signal.alarm(0))."""
    fired = []

    def outer(signum, frame):
        fired.append(signum)

    previous = signal.signal(signal.SIGALRM, outer)
    signal.setitimer(signal.ITIMER_REAL, 50.0)
    try:
        r = MathVerifyReward(timeout_s=0.05)  # the answer needs ~1.6 s untimed here
        b = r.score(["\\boxed{(y+1)^{1000} - (y-1)^{1000}}"], ["389192"], [True])
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert signal.getsignal(signal.SIGALRM) is outer
        assert 0 < remaining <= 50.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert b.n_timeout == 1 and not b.correct[0] and not fired


@pytest.mark.timeout(60)
def test_non_main_thread_scores_and_rejects_junk():
    out: dict = {}

    def work():
        r = MathVerifyReward()
        out["ok"] = r.score(["\\boxed{0.5}", "\\boxed{3}"], ["\\frac{1}{2}", "4"], [True, True])
        out["junk"] = _score_junk(r)

    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert out["ok"].correct.tolist() == [True, False]
    b, dt = out["junk"]
    print(f"junk batch in a thread: {dt:.2f} s")
    assert not b.correct.any() and b.n_timeout >= 4


def test_cache_gives_identical_results_and_is_bounded():
    texts = ["\\boxed{4}", "\\boxed{0.5}", "x", "\\boxed{9^{9^{9^{9}}}}", "\\boxed{4}", "\\boxed{5}"]
    golds = ["4", "\\frac{1}{2}", "4", "4", "4", "4"]
    finished = [True, True, True, True, False, True]
    r = MathVerifyReward(cache_size=2)
    first, second = r.score(texts, golds, finished), r.score(texts, golds, finished)
    fresh = MathVerifyReward().score(texts, golds, finished)
    for b in (second, fresh):
        np.testing.assert_array_equal(b.rewards, first.rewards)
        np.testing.assert_array_equal(b.correct, first.correct)
        assert (b.n_unparsable, b.n_truncated, b.n_timeout) == (
            first.n_unparsable,
            first.n_truncated,
            first.n_timeout,
        )
    assert first.correct.tolist() == [True, True, False, False, False, False]
    assert (first.n_unparsable, first.n_truncated, first.n_timeout) == (1, 1, 1)
    assert len(r._results) <= 2 and len(r._golds) <= 2


def test_bad_gold_counted(reward):
    b = reward.score(["\\boxed{4}", "\\boxed{}", "\\boxed{4}"], ["", "}", "4"], [True] * 3)
    assert b.correct.tolist() == [False, False, True] and b.n_bad_gold == 2 and b.n_unparsable == 0


def test_metrics(reward):
    b = reward.score(["\\boxed{4}", "\\boxed{5}", "none", "\\boxed{4}"], ["4"] * 4, [True, True, True, False])
    m = reward.metrics(b)
    assert m == {
        "reward/accuracy": 0.25,
        "reward/unparsable_frac": 0.25,
        "reward/truncated_frac": 0.25,
        "reward/timeout_count": 0.0,
        "reward/bad_gold_count": 0.0,
    }
    empty = reward.score([], [], [])
    assert empty.rewards.shape == (0,) and reward.metrics(empty)["reward/accuracy"] == 0.0


def test_length_mismatch_raises(reward):
    with pytest.raises(ValueError, match="equal lengths"):
        reward.score(["a", "b"], ["1"], [True, True])


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"timeout_s": 0}, "timeout_s must be > 0"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"tail_chars": 0}, "tail_chars must be > 0"),
        ({"correct": 0.0, "incorrect": 0.0}, "correct must be > incorrect"),
        ({"correct": float("nan")}, "correct"),
        ({"answer_mode": "last"}, "answer_mode must be one of"),
        ({"cache_size": 0}, "cache_size must be > 0"),
    ],
)
def test_config_validation_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        RewardConfig(**kwargs)
    with pytest.raises(ValueError, match=key):
        MathVerifyReward(**kwargs)  # Hydra passes plain keyword arguments


def test_construction_forms():
    assert MathVerifyReward(RewardConfig(correct=2.0)).config.correct == 2.0
    assert MathVerifyReward(correct=2.0).config == RewardConfig(correct=2.0)
    assert MathVerifyReward(incorrect=-1.0).incorrect == -1.0  # hyperparameters read as attributes too
    with pytest.raises(AttributeError):
        _ = MathVerifyReward().nonexistent
    with pytest.raises(TypeError):
        MathVerifyReward(RewardConfig(), correct=2.0)
    with pytest.raises(TypeError):
        MathVerifyReward(corect=2.0)


TOKENS = [
    "\\boxed{",
    "}",
    "{",
    "\\frac",
    "12",
    "1",
    "2",
    "^",
    " ",
    ".",
    ",",
    "x",
    "=",
    "!",
    "-",
    "\\",
    "$",
    "(",
    ")",
]


@pytest.mark.timeout(120)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(TOKENS), max_size=40).map("".join), max_size=4))
def test_arbitrary_text_gives_a_valid_batch(texts):
    r = MathVerifyReward(timeout_s=0.2, correct=1.0, incorrect=-1.0)
    b = r.score(texts, ["12"] * len(texts), [True] * len(texts))
    assert b.rewards.shape == (len(texts),) and set(b.rewards.tolist()) <= {1.0, -1.0}
    np.testing.assert_array_equal(b.rewards == 1.0, b.correct)
    assert b.n_unparsable + b.n_timeout <= len(texts) - int(b.correct.sum())
