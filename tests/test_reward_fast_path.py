"""The reward's exact-match fast path (issue #11) never changes a verdict, a reward or a metric, and is taken.

Real math-verify throughout: each case scores the same completions with ``fast_path=True`` and with
``fast_path=False`` (the pure math-verify path) on fresh instances and compares everything. Counting calls wraps
the module-level ``parse``/``verify`` that ``gdro.grading.rewards`` calls, delegating to the real functions. About 15 s on
2 cores.
"""

from __future__ import annotations

import numpy as np
import pytest
from hydra.utils import instantiate

from gdro.common.interfaces import RewardBatch
from gdro.data.synthetic import CopyTask
from gdro.grading import rewards
from gdro.grading.answers import last_boxed, tail
from gdro.grading.rewards import MathVerifyReward
from tests.conftest import compose_cfg

SEED = 20250611
TIMEOUT_S = 5.0  # generous: no deadline may fire in these cases, so both paths see the same (untimed) verdicts
FIELDS = ("n_unparsable", "n_truncated", "n_timeout", "n_bad_gold", "n_error")


def _wrong(rng: np.random.Generator, a: str) -> str:
    """``a`` with one digit changed."""
    k = int(rng.integers(len(a)))
    d = str((int(a[k]) + int(rng.integers(1, 9))) % 9 + 1)
    return a[:k] + d + a[k + 1 :]


def _variants(rng: np.random.Generator, a: str) -> dict[str, str]:
    """Completions a model could emit for gold ``a``: right, wrong, unboxed, nested, twice, equivalent forms."""
    w = _wrong(rng, a)
    k = int(rng.integers(len(a) + 1))
    return {
        "exact": f"\\boxed{{{a}}}",
        "framed": f"The answer is \\boxed{{{a}}}.",
        "spaces": f"\\boxed{{ {a} }}",
        "space_right": f"\\boxed{{{a}  }}",
        "newline": f"\\boxed{{\n{a}}}",
        "spaced_digits": "\\boxed{" + " ".join(a) + "}",
        "spaced_digits_pad": "\\boxed{ " + " ".join(a) + " }",
        "wrong": f"\\boxed{{{w}}}",
        "missing_digit": f"\\boxed{{{a[:-1]}}}",
        "extra_digit": f"\\boxed{{{a}{a[-1]}}}",
        "no_box": a,
        "unclosed": f"\\boxed{{{a}",
        "empty": "\\boxed{}",
        "blank": "\\boxed{ }",
        "braces": f"\\boxed{{{{{a}}}}}",
        "boxed_boxed": f"\\boxed{{\\boxed{{{a}}}}}",
        "twice_last_right": f"\\boxed{{{w}}} no, \\boxed{{{a}}}",
        "twice_last_wrong": f"\\boxed{{{a}}} no, \\boxed{{{w}}}",
        "closed_then_unclosed": f"\\boxed{{{a}}} or \\boxed{{{w}",
        "decimal": f"\\boxed{{{a}.0}}",
        "comma": f"\\boxed{{{a[:k]},{a[k:]}}}",
        "leading_zero": f"\\boxed{{0{a}}}",
        "negative": f"\\boxed{{-{a}}}",
        "text": f"\\boxed{{\\text{{{a}}}}}",
        "mathbf": f"\\boxed{{\\mathbf{{{a}}}}}",
        "dollars": f"$\\boxed{{{a}}}$",
        "equation": f"\\boxed{{x = {a}}}",
        "escaped_brace": f"\\boxed{{\\{{{a}\\}}}}",
        "backslash_space": f"\\boxed{{{a}\\ }}",
        "box_outside_tail": f"\\boxed{{{a}}}" + "." * 400,
        "long_preamble": "." * 400 + f"\\boxed{{{a}}}",
    }


def _toy_completions(n: int) -> tuple[list[str], list[str], list[bool], list[str]]:
    """``n`` (completion, gold, finished, kind): every kind equally often, gold answers of the toy train split."""
    rng = np.random.default_rng(SEED)
    problems = CopyTask().train()
    kinds = list(_variants(rng, "12"))
    texts, golds, finished, names = [], [], [], []
    for i in range(n):
        gold = problems[int(rng.integers(len(problems)))].answer
        kind = kinds[i % len(kinds)]
        texts.append(_variants(rng, gold)[kind])
        golds.append(gold)
        finished.append(bool(rng.random() < 0.9))  # some hit the length limit
        names.append(kind)
    return texts, golds, finished, names


def _assert_same(fast: RewardBatch, slow: RewardBatch, r_fast: MathVerifyReward, r_slow: MathVerifyReward):
    np.testing.assert_array_equal(fast.correct, slow.correct)
    np.testing.assert_array_equal(fast.rewards, slow.rewards)
    assert fast.rewards.dtype == slow.rewards.dtype == np.float64
    for field in FIELDS:
        assert getattr(fast, field) == getattr(slow, field), field
    assert r_fast.metrics(fast) == r_slow.metrics(slow)


def _pair(**kwargs) -> tuple[MathVerifyReward, MathVerifyReward]:
    kwargs.setdefault("timeout_s", TIMEOUT_S)
    return MathVerifyReward(fast_path=True, **kwargs), MathVerifyReward(fast_path=False, **kwargs)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("require_eos", [True, False])
def test_toy_completions_score_identically_with_and_without_the_fast_path(require_eos):
    texts, golds, finished, kinds = _toy_completions(1600)
    r_fast, r_slow = _pair(require_eos=require_eos, correct=1.0, incorrect=-1.0)
    fast, slow = r_fast.score(texts, golds, finished), r_slow.score(texts, golds, finished)
    _assert_same(fast, slow, r_fast, r_slow)
    mismatched = [(k, t, g) for k, t, g, a, b in zip(kinds, texts, golds, fast.correct, slow.correct) if a != b]
    assert not mismatched
    assert r_slow.fast_hits == 0 and r_fast.fast_hits > 0
    # every completion in its own score() call too (no batch effects, e.g. through the cache)
    one_fast, one_slow = _pair(require_eos=require_eos)
    for t, g, f in zip(texts[:300], golds[:300], finished[:300]):
        _assert_same(one_fast.score([t], [g], [f]), one_slow.score([t], [g], [f]), one_fast, one_slow)
    # the fast path is taken exactly where the last box holds the gold up to surrounding whitespace
    boxes = [last_boxed(tail(t, r_fast.tail_chars)) for t in texts]
    eligible = [a is not None and a.strip() == g and (f or not require_eos) for a, g, f in zip(boxes, golds, finished)]
    hit_kinds = {"exact", "framed", "spaces", "space_right", "newline", "long_preamble", "twice_last_right",
                 "boxed_boxed", "dollars", "closed_then_unclosed"}  # (and spaced digits of a 1-digit gold)
    assert {k for k, e in zip(kinds, eligible) if e} >= hit_kinds
    assert r_fast.fast_hits == sum(eligible)
    assert slow.correct[np.array(eligible)].all()


# Golds of other tasks (MATH-style), with answers equal to them as strings; each verbatim answer is correct under
# math-verify too.
PAPER_GOLDS = [
    "\\frac{1}{2}", "3\\sqrt{2}", "(1,2)", "\\dfrac{3}{4}", "-5", "0", "0.5", "2\\pi", "\\pi", "x^2+1", "y = 2x+1",
    "\\{1,2\\}", "[1,2]", "(-\\infty, 0)", "\\sqrt[3]{2}", "1+i", "\\text{odd}", "\\text{(A)}", "A", "10\\%",
    "\\$5", "5^\\circ", "1,000", "\\infty", "\\emptyset", "\\mathbb{R}", "\\frac{\\sqrt{3}}{2}", "2\\sqrt{2}",
    "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\left( 3, \\frac{\\pi}{2} \\right)", "[0, 1)", "x + 1",
    "\\text{Sunday}", "5 \\text{ cm}", "12:00", ".5", "2/3", "0001", "nan", "\\frac{1}{2}, \\frac{1}{3}",
]  # fmt: skip
# Golds where string equality is not enough (or the gold is bad): the fast path must stay out of the way.
TRICKY_GOLDS = [
    "\\{",  # math-verify's brace matching ignores the escape: surrounding whitespace changes its verdict
    "\\pm \\; \\{",
    "+ \\cup \\frac \\{ +",
    "\\div \\displaystyle \\prod \\\\boxed{ } 0.0",  # a box inside the gold: math-verify reads an empty one
    "(10^{3})!",  # rejected by the magnitude guard: an equal answer scores as a timeout
    "\\binom{10^{6}}{10^{3}}",
    "4!!!",
    "10^{-10^{6}}",  # (10^{-10^{3}}, 1,001 digits, was refused too: the guard bounded its exponent by 10^5.2)
    "final answer is 5",  # "final answer" patterns rank before the box pattern in math-verify
    "the answer is 3",
    "5\\",
    "1\\ ",
    "}",  # bad golds: never correct
    "",
    "  ",
    "{",
    "\\boxed{5}",
]  # fmt: skip


def _frames(g: str) -> list[str]:
    """Completions whose last box holds ``g`` verbatim, padded, or reformatted."""
    return [
        f"\\boxed{{{g}}}",
        f"So the answer is \\boxed{{{g}}}.",
        f"\\boxed{{ {g} }}",
        f"\\boxed{{{g.strip()}}}",
        f"\\boxed{{\n{g.strip()}  }}",
        f"\\boxed{{{g.replace(' ', '')}}}",
        f"\\boxed{{{g}}}\\boxed{{{g}}}",
        f"\\boxed{{1}} then \\boxed{{{g}}}",
    ]


@pytest.mark.timeout(300)
def test_paper_golds_verbatim_answers_are_correct_on_both_paths():
    r_fast, r_slow = _pair()
    texts = [f"\\boxed{{{g}}}" for g in PAPER_GOLDS]
    fast = r_fast.score(texts, PAPER_GOLDS, [True] * len(texts))
    slow = r_slow.score(texts, PAPER_GOLDS, [True] * len(texts))
    _assert_same(fast, slow, r_fast, r_slow)
    assert slow.correct.all(), [g for g, c in zip(PAPER_GOLDS, slow.correct) if not c]
    assert r_fast.fast_hits == len(PAPER_GOLDS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("golds", [PAPER_GOLDS, TRICKY_GOLDS], ids=["paper", "tricky"])
def test_framed_and_padded_answers_score_identically(golds):
    texts, gs = [], []
    for g in golds:
        for other in golds[:6] + [g]:  # the right gold and some wrong ones
            for t in _frames(g):
                texts.append(t)
                gs.append(other)
    r_fast, r_slow = _pair()
    fast, slow = r_fast.score(texts, gs, [True] * len(texts)), r_slow.score(texts, gs, [True] * len(texts))
    _assert_same(fast, slow, r_fast, r_slow)
    for t, g, a, b in zip(texts, gs, fast.correct, slow.correct):
        assert a == b, (t, g)


# ("\\{" and "1\\ " are eligible verbatim; "\\{" not padded)
INELIGIBLE = [g for g in TRICKY_GOLDS if "\\{" not in g and g != "1\\ "]


def test_ineligible_golds_never_take_the_fast_path():
    r = MathVerifyReward(timeout_s=TIMEOUT_S)
    texts = [f"\\boxed{{{g}}}" for g in INELIGIBLE] + [f"\\boxed{{ {g} }}" for g in TRICKY_GOLDS if "\\{" in g]
    golds = INELIGIBLE + [g for g in TRICKY_GOLDS if "\\{" in g]
    b = r.score(texts, golds, [True] * len(texts))
    assert r.fast_hits == 0
    # the "\\{" golds math-verify cannot read: compared as normalised text, where surrounding spaces carry no meaning
    assert all(r.prepare(g).text_only for g in golds[len(INELIGIBLE) :]) and b.correct[len(INELIGIBLE) :].all()


class _Calls:
    """Counts calls of the module-level math-verify functions ``gdro.grading.rewards`` uses; delegates to them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.parse: list[str] = []
        self.verify = 0
        real_parse, real_verify = rewards.parse, rewards.verify

        def parse(text, *args, **kwargs):
            self.parse.append(text)
            return real_parse(text, *args, **kwargs)

        def verify(*args, **kwargs):
            self.verify += 1
            return real_verify(*args, **kwargs)

        monkeypatch.setattr(rewards, "parse", parse)
        monkeypatch.setattr(rewards, "verify", verify)


def test_exact_boxed_correct_answers_call_no_math_verify_verification(monkeypatch):
    golds = [p.answer for p in CopyTask().train()[:256]]
    texts = [f"Copy done: \\boxed{{{g}}}" for g in golds]
    calls = _Calls(monkeypatch)
    r = MathVerifyReward()
    b = r.score(texts, golds, [True] * len(texts))
    assert b.correct.all() and b.rewards.tolist() == [1.0] * len(golds)
    assert (b.n_unparsable, b.n_truncated, b.n_timeout, b.n_bad_gold, b.n_error) == (0, 0, 0, 0, 0)
    assert r.fast_hits == len(golds)
    assert calls.verify == 0
    assert not calls.parse  # plain-integer golds are not even parsed
    assert not r._results  # nothing went through math-verify's path

    # the pure math-verify path verifies each distinct (answer, gold) once
    calls_off = _Calls(monkeypatch)
    r_off = MathVerifyReward(fast_path=False)
    b_off = r_off.score(texts, golds, [True] * len(texts))
    np.testing.assert_array_equal(b_off.correct, b.correct)
    assert r_off.fast_hits == 0 and calls_off.verify == len(set(golds))


def test_fast_path_is_off_for_truncated_bad_gold_and_any_mode(monkeypatch):
    r = MathVerifyReward()
    b = r.score(["\\boxed{4}", "\\boxed{}", "\\boxed{}"], ["4", "", "}"], [False, True, True])
    assert not b.correct.any() and (b.n_truncated, b.n_bad_gold) == (1, 2) and r.fast_hits == 0
    calls = _Calls(monkeypatch)
    r_any = MathVerifyReward(answer_mode="any")
    assert r_any.score(["\\boxed{4}"], ["4"], [True]).correct.tolist() == [True]
    assert r_any.fast_hits == 0 and calls.verify == 1


def test_fast_path_config_switch():
    assert MathVerifyReward().fast_path is True
    for override, expected in (([], True), (["reward.fast_path=false"], False)):
        r = instantiate(compose_cfg(override).reward)
        assert isinstance(r, MathVerifyReward) and r.fast_path is expected
        b = r.score(["\\boxed{4}"], ["4"], [True])
        assert b.correct.tolist() == [True] and r.fast_hits == int(expected)


def _int_pairs(n: int) -> list[tuple[str, str]]:
    """(answer, gold) plain-integer pairs a model could produce: other numbers, ±1, a leading zero, a sign, a digit
    dropped or added, padded; and ±1 around 10-12-digit golds (where a float comparison would call them equal)."""
    rng = np.random.default_rng(SEED)

    def digits(k: int) -> str:
        return "".join(str(d) for d in rng.integers(0, 10, k))

    pairs = []
    for i in range(n):
        g = digits(int(rng.integers(1, 13)))
        a = [digits(int(rng.integers(1, 13))), str(max(int(g) + int(rng.choice([-1, 1])), 0)), "0" + g, "-" + g,
             g[:-1] or "0", g + digits(1), f" {g} ", g][i % 8]
        pairs.append((a, g))
    for k in (10, 11, 12):
        g = "9" * k
        pairs += [(str(int(g) + 1), g), (str(int(g) - 1), g), ("-" + g, g), (g, "-" + g)]
    return pairs


@pytest.mark.timeout(300)
def test_integer_reject_path_agrees_with_math_verify(monkeypatch):
    pairs = _int_pairs(2400)
    texts = [f"So \\boxed{{{a}}}" for a, _ in pairs]
    golds = [g for _, g in pairs]
    r_fast, r_slow = _pair()
    calls = _Calls(monkeypatch)
    fast = r_fast.score(texts, golds, [True] * len(texts))
    fast_verifies = calls.verify
    slow = r_slow.score(texts, golds, [True] * len(texts))
    _assert_same(fast, slow, r_fast, r_slow)
    # where both are plain integers of <= 12 digits the verdict is integer equality, and unequal ones skip math-verify
    want = np.array([int(a) == int(g) for a, g in pairs])
    np.testing.assert_array_equal(slow.correct, want)
    short = np.array([max(len(a.strip().lstrip("-")), len(g.lstrip("-"))) <= 12 for a, g in pairs])
    rejected = int((~want & short).sum())
    assert r_fast.fast_rejects == rejected > 1000  # (13-digit answers go to math-verify)
    assert r_slow.fast_rejects == 0
    # the rest (equal values; the exact-match ones need no verify either) go through math-verify at most once each
    assert fast_verifies <= len({(a.strip(), g) for (a, g), w in zip(pairs, want) if w})


def test_integer_reject_path_stays_out_of_other_answers():
    cases = [("0.5", "1"), ("1/2", "2"), ("1,000", "1000"), ("1000.0", "1000"), ("10^3", "1000"), ("2 1 7", "217"),
             ("1234567890123", "1234567890124"), ("x", "5"), ("5", "\\frac{1}{2}"), ("+5", "5")]
    texts, golds = [f"\\boxed{{{a}}}" for a, _ in cases], [g for _, g in cases]
    r_fast, r_slow = _pair()
    fast, slow = r_fast.score(texts, golds, [True] * len(cases)), r_slow.score(texts, golds, [True] * len(cases))
    _assert_same(fast, slow, r_fast, r_slow)
    assert r_fast.fast_rejects == 0  # decided by math-verify
    assert fast.correct.tolist() == [False, False, True, True, True, False, False, False, False, True]
