"""math-verify reward: equivalences, rejections, failure counts, bounded time on junk, cache, threads, config.

Real math-verify throughout. Time is guarded by pytest-timeout, never asserted (slow junk prints its time).
The adversarial fuzz, which does check the documented time bound per completion, is in test_reward_fuzz.py.
"""

from __future__ import annotations

import gc
import logging
import math
import random
import signal
import sys
import threading
import time

import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gdro.common.interfaces import RewardBatch
from gdro.grading import rewards
from gdro.grading.answers import last_boxed, tail
from gdro.grading.magnitude import MAX_DIGITS, digits
from gdro.grading.reward_config import RewardConfig
from gdro.grading.rewards import MathVerifyReward


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
        "\\boxed{\\begin{pmatrix}9^{9^{9}} & 2\\end{pmatrix}}",  # a matrix is not a sympy.Basic
        "\\boxed{\\Gamma(10^{6})}",
        "\\boxed{\\binom{-5}{10^{6}}}",  # small value, but sympy multiplies out 10^6 terms
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
    assert not b.correct.any() and b.n_error == 0
    assert b.n_timeout >= 7  # the towers, factorials, binomials, gamma and matrix are rejected as too large


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
    assert not b.correct.any() and b.n_timeout >= 7 and b.n_error == 0


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


# (boxed answer, correct against gold "0", correct against gold "1"): math-verify's own verdicts. Before the
# fix each of these raised "ValueError: math domain error" out of score() (a zero Float reached log10(0)).
ZERO_ANSWERS = [
    ("0.0", True, False),
    ("-0.0", True, False),
    ("0.00", True, False),
    ("\\frac{0.0}{1}", True, False),
    ("x = 0.0", True, False),
    ("(0.0, 1)", False, False),
    ("\\$0.0", True, False),
    ("0.0^\\circ", True, False),
    ("\\sqrt{0.0}", True, False),
    ("0.0 \\times 10^{5}", True, False),
    ("0.0!", False, True),
    ("0.0^{0.0}", False, True),
    ("\\frac{1}{0.0}", False, False),
]


@pytest.mark.parametrize(("answer", "is_zero", "is_one"), ZERO_ANSWERS)
def test_zero_valued_answers_score_without_raising(reward, answer, is_zero, is_one):
    b = reward.score([f"so \\boxed{{{answer}}}"] * 2, ["0", "1"], [True, True])
    assert b.correct.tolist() == [is_zero, is_one]
    assert (b.n_unparsable, b.n_timeout, b.n_error, b.n_bad_gold) == (0, 0, 0, 0)


def test_tiny_and_order_dependent_floats_score_without_raising():
    # 1e-401 underflows float(): log10(0) again before the fix (needs a tail longer than the default 300)
    tiny = "\\boxed{0." + "0" * 400 + "1}"
    b = MathVerifyReward(tail_chars=1000).score([tiny] * 3, ["0", "1", "10^{-401}"], [True] * 3)
    assert b.correct.tolist() == [False, False, True] and b.n_error == 0
    # 0.0/0.0 against 0: math-verify's verdict depends on what sympy scored before in the process (its global
    # cache), so only "does not raise" is asserted
    b = MathVerifyReward().score(["\\boxed{\\frac{0.0}{0.0}}"], ["0"], [True])
    assert b.n_error == 0 and b.n_unparsable == 0


@pytest.mark.parametrize(
    "value",
    [
        sympy.Float(0),
        sympy.Float("-0.0"),
        sympy.Float("1e-400"),
        sympy.Float("1e400"),
        sympy.Float("1e-100000"),
        sympy.nan,
        sympy.zoo,
        sympy.oo,
        -sympy.oo,
        sympy.Pow(sympy.Float(0), -1, evaluate=False),
        sympy.Pow(10, sympy.Float("-1e5"), evaluate=False),
        sympy.factorial(sympy.Float(0), evaluate=False),
        sympy.binomial(sympy.Float(0), sympy.Float("1e-300"), evaluate=False),
        sympy.Matrix([[sympy.Float(0), sympy.nan]]),
    ],
    ids=repr,
)
def test_digits_never_raises_and_is_non_negative(value):
    d = digits(value)
    assert d >= 0 and not math.isnan(d)


def test_digits_bounds_huge_values_and_deep_trees():
    assert digits(sympy.Float("1e100000")) >= 100_000
    tower = sympy.Pow(9, sympy.Pow(9, 9, evaluate=False), evaluate=False)
    assert digits(sympy.Matrix([[tower, 2]])) > MAX_DIGITS  # a Matrix is not a sympy.Basic
    deep = sympy.Symbol("x")
    for _ in range(300):  # deeper than the guard measures: inf (rejected), never a RecursionError
        deep = sympy.Pow(deep, 2, evaluate=False)
    assert digits(deep) == math.inf


@settings(max_examples=200, deadline=None)
@given(st.integers(-(10**60), 10**60), st.integers(1, 10**60), st.integers(-400, 400))
def test_digits_is_an_upper_bound_on_magnitude(p, q, k):
    """10**digits(x) >= |x| for rationals and Floats of any exponent (it bounds exponents, so it must)."""
    x = sympy.Rational(p, q)
    if x != 0:
        assert digits(x) >= math.log10(abs(x.p)) - math.log10(x.q) - 1e-9
    f = sympy.Float(f"{p}e{k}")
    assert digits(f) >= 0
    if p != 0:
        assert digits(f) >= math.log10(abs(p)) + k - 1e-9


@settings(max_examples=100, deadline=None)
@given(st.integers(-60, 200), st.integers(0, 200))
def test_digits_bounds_powers_factorials_binomials(n, k):
    def exact(e):
        v = abs(e.doit())
        return math.log10(int(v)) if v > 1 else 0.0  # exact int: no float overflow

    for e in [
        sympy.Pow(max(abs(n), 2), k, evaluate=False),
        sympy.factorial(abs(n), evaluate=False),
        sympy.binomial(n, k, evaluate=False),
    ]:
        assert digits(e) >= exact(e) - 1e-9, e


# Irrational powers, nested radicals and transcendental constants: cheap to compare, so each must match itself. The
# first three (and the other powers whose exponent is an irrational sum or quotient) were refused by the magnitude
# guard, which bounded sqrt(2) by 10^4, so 2^{sqrt2+sqrt3} by 10^8 digits: scored as a timeout, never correct.
IRRATIONAL = [
    "2^{\\frac{1+\\sqrt5}{2}}", "2^{\\sqrt2+\\sqrt3}", "10^{\\frac{-5+\\sqrt{13}}{6}}", "7^{\\frac{\\sqrt{3}-1}{2}}",
    "2^{\\sqrt{2}^{\\sqrt{2}}}", "4^{\\frac{1}{\\sqrt{2}}}", "2^{\\frac{\\sqrt{5}-1}{2}}\\pi", "3^{\\frac{1}{\\sqrt{3}+1}}",
    "3^{\\sqrt2}", "e^{\\pi}", "2^{1/3}", "\\pi^{e}", "e^{\\sqrt{2}}", "2^{\\sqrt{2}}\\cdot 3^{\\sqrt{3}}",
    "\\left(\\sqrt{2}\\right)^{\\sqrt{2}}", "5^{\\log_2 3}", "2^{\\pi}", "e^{-\\frac{\\pi}{2}}", "3^{2-\\sqrt{2}}",
    "\\left(1+\\sqrt{2}\\right)^{\\sqrt{3}}", "\\sqrt{2}^{\\sqrt{3}+1}", "10^{-\\sqrt{3}}", "\\pi^{\\sqrt{2}}", "e^{e}",
    "2^{\\sqrt{2}}+2^{-\\sqrt{2}}", "\\log_{2}(3)^{\\sqrt{5}}", "10^{10^{\\sqrt{5}}}",
    "\\sqrt{2+\\sqrt{3}}", "\\sqrt{5+2\\sqrt{6}}", "\\sqrt[3]{2+\\sqrt{5}}+\\sqrt[3]{2-\\sqrt{5}}",
    "\\sqrt{1+\\sqrt{1+\\sqrt{1+\\sqrt{1+\\sqrt{1+\\sqrt{2}}}}}}", "\\frac{\\sqrt{6}+\\sqrt{2}}{4}", "\\sqrt[4]{3+2\\sqrt{2}}",
    "\\sqrt{3+\\sqrt{5+\\sqrt{7}}}", "(\\sqrt{3}+\\sqrt{2})^{\\frac{1}{3}}",
    "\\ln 2+\\pi^{2}", "\\sqrt{\\pi}\\, e^{-1/4}", "\\cos\\frac{\\pi}{7}", "\\frac{\\pi^2}{6}", "e^{\\pi\\sqrt{163}}",
]  # fmt: skip


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "math-verify"])
def test_irrational_powers_nested_radicals_and_constants_match_themselves(fast):
    r = MathVerifyReward(fast_path=fast)
    b = r.score([f"So \\boxed{{{g}}}" for g in IRRATIONAL], IRRATIONAL, [True] * len(IRRATIONAL))
    assert b.correct.all() and b.n_timeout == 0 and b.n_error == 0, [
        g for g, ok in zip(IRRATIONAL, b.correct) if not ok]


@pytest.mark.parametrize(
    ("answer", "gold", "correct"),
    [
        ("4^{\\frac{1+\\sqrt5}{4}}", "2^{\\frac{1+\\sqrt5}{2}}", True),
        ("2^{(1+\\sqrt{5})/2}", "2^{\\frac{1+\\sqrt5}{2}}", True),
        ("2^{\\sqrt3+\\sqrt2}", "2^{\\sqrt2+\\sqrt3}", True),
        ("2^{\\sqrt{2}}\\cdot 2^{\\sqrt{3}}", "2^{\\sqrt2+\\sqrt3}", True),
        ("10^{(\\sqrt{13}-5)/6}", "10^{\\frac{-5+\\sqrt{13}}{6}}", True),
        ("\\sqrt{2}+\\sqrt{3}", "\\sqrt{5+2\\sqrt{6}}", True),
        ("2^{\\sqrt2}", "2^{\\sqrt3}", False),
        ("2^{\\sqrt3}", "3^{\\sqrt2}", False),
        ("2^{\\frac{1-\\sqrt5}{2}}", "2^{\\frac{1+\\sqrt5}{2}}", False),
        ("2^{\\frac{1+\\sqrt6}{2}}", "2^{\\frac{1+\\sqrt5}{2}}", False),
        ("2^{\\frac{1+\\sqrt5}{2}}+10^{-6}", "2^{\\frac{1+\\sqrt5}{2}}", False),
        ("2^{\\sqrt2+\\sqrt{3.0001}}", "2^{\\sqrt2+\\sqrt3}", False),
        ("10^{\\frac{-5+\\sqrt{14}}{6}}", "10^{\\frac{-5+\\sqrt{13}}{6}}", False),
        ("2^{1.41421}", "2^{\\sqrt{2}}", False),  # an exponent rounded to 6 digits: 2.665140 against 2.665144
        ("2.6651", "2^{\\sqrt{2}}", False),
        ("\\pi^{e}", "e^{\\pi}", False),
    ],
)
def test_irrational_powers_equal_values_match_distinct_ones_do_not(answer, gold, correct):
    b = one(MathVerifyReward(), f"\\boxed{{{answer}}}", gold)
    assert b.correct.tolist() == [correct] and b.n_timeout == 0 and b.n_error == 0


# Powers whose non-integer exponent is huge: the guard must still refuse them (scripts/reward_worst_case.py times them)
HUGE_POWERS = [
    "2^{10^{6}+\\sqrt{2}}", "2^{\\sqrt{2}\\cdot 10^{6}}", "2^{-\\sqrt{2}\\cdot 10^{6}}", "2^{\\frac{10^{7}}{3}}",
    "2^{10^{100}\\sqrt2}", "9^{9^{9^{\\sqrt2}}}", "2^{\\pi^{\\pi^{\\pi}}}", "2^{e^{e^{e^{10}}}}", "2^{\\exp(10^{300})}",
    "3^{\\sinh(10^{5})}", "(1+\\sqrt2)^{10^{5}\\pi}", "2^{\\sqrt{10^{600}}}", "10^{10^{5.1}}", "2^{\\tan(10^{300})}",
    "2^{\\frac{1}{\\sqrt{2}-1.4142135623730951}}",
]  # fmt: skip


@pytest.mark.timeout(120)
def test_irrational_exponents_of_huge_size_are_still_refused_in_a_thread():
    """The guard reads a non-integer exponent by its value (evalf, bounded precision): a huge one is still refused,
    where no deadline applies too, and reading it stays cheap (timed here: printed, not asserted)."""
    huge = HUGE_POWERS
    out: dict = {}

    def work():
        t0 = time.perf_counter()
        out["b"] = MathVerifyReward().score([f"\\boxed{{{h}}}" for h in huge], ["389192"] * len(huge),
                                            [True] * len(huge))
        out["dt"] = time.perf_counter() - t0

    th = threading.Thread(target=work)
    th.start()
    th.join()
    print(f"{len(huge)} huge irrational powers in a thread: {out['dt']:.2f} s")
    assert out["b"].n_timeout == len(huge) and not out["b"].correct.any()


@pytest.mark.parametrize(
    ("answer", "gold", "correct"),
    [
        ("3.275 \\times 10^{12}", "3.3e12", True),  # e-notation: a measured gold, compared at its figures
        ("3.275 \\times 10^{12}", "3.3E12", True),
        ("-3.275 \\times 10^{12}", "-3.3e12", True),
        ("3.275 \\times 10^{12}", "-3.3e12", False),
        ("3.2499 \\times 10^{12}", "3.3e12", False),
        ("2.998 \\times 10^{8}", "3e8", True),  # one figure is compared at two
        ("3.2 \\times 10^{8}", "3e8", False),
        ("3.275 \\times 10^{12}", "3.3 \\times 10^{12}", False),  # written exactly: compared exactly
        ("3.275 \\times 10^{12}", "3300000000000", False),
        ("0.49", "0.5", False),
        ("0.51", "0.5", False),
        ("0.33", "\\frac{1}{3}", False),
        ("1 000", "1000", True),
        ("12 345.5", "12345.5", True),
        ("1 000", "1", False),
        ("2 3", "23", False),  # not groups of three
        ("15,000 dollars", "15000", True),
        ("\\$15,000 dollars", "15000", True),
        ("5 xy", "5xy", True),  # a product, still: unit text adds a reading, never replaces one
        ("5 x", "5", False),  # a lone letter is a symbol
        ("2 pi", "2", False),
    ],
)
def test_numbers_as_people_write_them(answer, gold, correct):
    b = one(MathVerifyReward(fast_path=False), f"\\boxed{{{answer}}}", gold)
    assert b.correct.tolist() == [correct] and b.n_timeout == 0 and b.n_error == 0


SEVERAL = "The solutions are $\\boxed{(2,2)}$ and $\\boxed{(6,2)}$."


def test_several_boxes_training_reads_the_last_evaluation_may_join_them():
    """``\\boxed{(2,2)}`` and ``\\boxed{(6,2)}`` for the gold ``(2,2),(6,2)``: the last box alone is wrong (the usual
    contract, kept for training and as evaluation's default); ``eval_boxes: join`` reads the boxes as math-verify's
    extraction joins them, in evaluation only, and only for a gold of several items."""
    gold = "(2,2),(6,2)"
    texts = [SEVERAL, "So \\boxed{(2,2)}, \\boxed{(6,2)}", "\\boxed{(2,2)}\n\\boxed{(6,2)}", "$\\boxed{(6,2)}$ or $\\boxed{(2,2)}$",
             "$\\boxed{(2,2)}$ and $\\boxed{(6,3)}$", "\\boxed{(6,2)}", ("\\boxed{(2,2)} is one; the long check shows nothing "
             "more, and the other one we found is \\boxed{(6,2)}"), "$\\boxed{(2,2)}$ and $\\boxed{(6,2)}$ and $\\boxed{(9,9)}$"]
    joined = [True, True, True, True, False, False, False, False]
    default = MathVerifyReward()
    for r in (default, default.for_eval(), MathVerifyReward(eval_boxes="join")):
        assert r.score(texts, [gold] * len(texts), [True] * len(texts)).correct.tolist() == [False] * len(texts)
    ev = MathVerifyReward(eval_boxes="join").for_eval()
    assert ev.score(texts, [gold] * len(texts), [True] * len(texts)).correct.tolist() == joined
    assert MathVerifyReward(eval_boxes="join", eval_tail_chars=300).for_eval()._join_boxes
    # a gold of one item keeps the last box: a corrected answer is not joined with the first try
    texts = ["first \\boxed{7}, then corrected: \\boxed{12}", "$\\boxed{(2,2)}$ and $\\boxed{(6,2)}$"]
    assert ev.score(texts, ["12", "(6,2)"], [True, True]).correct.tolist() == [True, True]
    assert ev.score(texts, ["7", "(2,2)"], [True, True]).correct.tolist() == [False, False]
    with pytest.raises(ValueError, match="eval_boxes must be one of"):
        RewardConfig(eval_boxes="all")


def test_eval_boxes_is_a_key_of_gdro_eval_and_training_configs():
    """``gdro-eval reward.eval_boxes=join`` (and the trainer's periodic evaluation) reach the evaluation scorer."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from tests.conftest import CONF

    for app in ("eval_app", "train"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name=app, overrides=["reward.eval_boxes=join"])
        r = instantiate(cfg.reward)
        assert r.config.eval_boxes == "join" and r.for_eval()._join_boxes and not r._join_boxes
        assert r.for_eval().score([SEVERAL], ["(2,2),(6,2)"], [True]).correct.tolist() == [True]


def _prefix_guard(parsed: list) -> bool:
    """The magnitude guard as it was before the fix: log10 of a Float, which raises on a zero."""
    return any(math.log10(abs(float(p))) > 5 for p in parsed if isinstance(p, sympy.Float))


def test_exception_while_scoring_is_counted_as_error_logged_once_and_cached(monkeypatch, caplog):
    """No known answer makes scoring raise any more; the pre-fix guard brings back a real one (a zero Float
    reaching log10), to check that such a bug costs one completion, not the run."""
    calls = []

    def guard(parsed: list) -> bool:
        calls.append(1)
        return _prefix_guard(parsed)

    monkeypatch.setattr(rewards, "too_large", guard)
    r = MathVerifyReward(correct=1.0, incorrect=-1.0, fast_path=False)  # math-verify's path (and its guard) only
    texts = ["\\boxed{0.0}", "\\boxed{-0.0}", "\\boxed{4}", "\\boxed{0.5}", "no box"]
    golds = ["0", "0", "4", "\\frac{1}{2}", "4"]
    with caplog.at_level(logging.WARNING, logger="gdro.grading.rewards"):
        first = r.score(texts, golds, [True] * 5)
        second = r.score(texts, golds, [True] * 5)
    for b in (first, second):  # the second from the cache: counted the same, guard not run again
        assert b.correct.tolist() == [False, False, True, True, False]
        assert b.rewards.tolist() == [-1.0, -1.0, 1.0, 1.0, -1.0]
        assert (b.n_error, b.n_unparsable, b.n_timeout, b.n_bad_gold) == (2, 1, 0, 0)
        m = r.metrics(b)
        assert m["reward/error_frac"] == 0.4 and m["reward/unparsable_frac"] == 0.2
    assert len(calls) == 4
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "gdro.grading.rewards"]
    assert len(logged) == 1  # once per exception type
    assert "ValueError" in logged[0] and "math domain error" in logged[0] and "\\\\boxed{0.0}" in logged[0]


def test_keyboard_interrupt_while_scoring_propagates(monkeypatch):
    def interrupted(parsed: list) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(rewards, "too_large", interrupted)
    r = MathVerifyReward(fast_path=False)  # the integer fast path would decide without the guard
    with pytest.raises(KeyboardInterrupt):
        r.score(["\\boxed{4}"], ["4"], [True])
    assert not r._results  # nothing cached


@pytest.mark.timeout(60)
@pytest.mark.parametrize("exc", [KeyboardInterrupt, TimeoutError])
def test_outer_alarm_handler_exception_propagates(exc):
    """A caller's own ITIMER_REAL timer due during scoring cuts our deadline short and is re-armed on its
    exit; what its handler raises then (KeyboardInterrupt, or a plain TimeoutError) leaves score(): it is not
    taken for an error inside scoring."""

    def outer(signum, frame):
        raise exc("outer timer")

    previous = signal.signal(signal.SIGALRM, outer)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    r = MathVerifyReward(timeout_s=5.0)
    try:
        with pytest.raises(exc, match="outer timer"):
            r.score(["\\boxed{(y+1)^{1000} - (y-1)^{1000}}"], ["389192"], [True])
            time.sleep(1.0)  # not reached when the handler ran inside score(), as it does
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not r._logged_errors


@pytest.mark.timeout(60)
def test_deadline_never_lands_in_a_gc_callback(monkeypatch):
    """Raised inside a gc callback (hypothesis installs one), ``Deadline`` would only be reported as
    unraisable, and a retry landing in pytest's unraisable hook fails the test; the handler skips such frames
    and waits for its 10 ms repeat."""
    reported: list = []
    MathVerifyReward().prepare("389192")  # math-verify's own caches warm: the gold parses within 20 ms

    def slow_callback(phase, info):
        time.sleep(0.003)

    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    gc.callbacks.append(slow_callback)
    try:
        # texts that share no sub-expression with each other or with other tests: sympy keeps what an interrupted
        # expansion completed, so a text already tried elsewhere (``(y+1)^{1000}``) can finish inside the deadline
        texts = [f"\\boxed{{(u+{i + 1})^{{1000}} - (u-{i + 1})^{{1000}}}}" for i in range(1, 11)]
        b = MathVerifyReward(timeout_s=0.02).score(texts, ["389192"] * 10, [True] * 10)
    finally:
        gc.callbacks.remove(slow_callback)
    assert b.n_timeout == 10 and not reported


class _Unformattable(str):
    """A gold whose formatting raises: an exception inside the gold's parse."""

    def __format__(self, spec: str) -> str:
        raise RuntimeError("cannot format")


def test_gold_parse_exception_counts_as_bad_gold(caplog):
    r = MathVerifyReward(fast_path=False)  # (the fast paths never parse a plain-integer gold)
    with caplog.at_level(logging.WARNING, logger="gdro.grading.rewards"):
        b = r.score(["\\boxed{5}", "\\boxed{4}"], [_Unformattable("5"), "4"], [True, True])
    assert b.correct.tolist() == [False, True] and b.n_bad_gold == 1 and b.n_error == 0
    assert r.prepare(_Unformattable("5")).parsed == []
    assert any(
        "RuntimeError" in rec.getMessage() and "bad_gold" in rec.getMessage() for rec in caplog.records
    )


def test_metrics(reward):
    b = reward.score(["\\boxed{4}", "\\boxed{5}", "none", "\\boxed{4}"], ["4"] * 4, [True, True, True, False])
    m = reward.metrics(b)
    assert m == {
        "reward/accuracy": 0.25,
        "reward/unparsable_frac": 0.25,
        "reward/truncated_frac": 0.25,
        "reward/error_frac": 0.0,
        "reward/timeout_count": 0.0,
        "reward/bad_gold_count": 0.0,
        "reward/format_frac": 0.5,  # two of four finished with a final box (the truncated one does not count)
        "reward/overlong_frac": 0.0,
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
        ({"timeout_s": 1e12}, "timeout_s must be > 0 and <= 86400"),  # setitimer overflows there
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
    assert b.n_unparsable + b.n_timeout + b.n_error <= len(texts) - int(b.correct.sum()) and b.n_error == 0


def test_deadline_counts_cpu_time_not_wall_time():
    """The time bound is on the scoring thread's CPU time: on a busy machine the wall clock runs while the parse
    does not, and a verdict must not depend on that. Waiting (no CPU) is never interrupted; computing is."""
    from gdro.grading.deadline import Deadline, deadline

    with deadline(0.05):
        time.sleep(0.3)  # six deadlines of wall time, almost no CPU time
    start = time.thread_time()
    with pytest.raises(Deadline), deadline(0.05):
        while time.thread_time() - start < 10.0:
            pass
    assert time.thread_time() - start < 5.0
