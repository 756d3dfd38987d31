"""The reward's fast paths: verdicts known without calling math-verify
(:class:`~gdro.grading.rewards.MathVerifyReward` takes them when ``fast_path`` is on, in ``"boxed"`` and ``"number"``
modes).

Exact-match fast path (``fast_path``, on by default). When the last box holds the gold string verbatim (or, for a
gold without backslashes, up to surrounding whitespace), the gold parses and is eligible (no ``boxed`` or ``answer``
inside it, not rejected by the magnitude guard; checked once per gold), the completion scores correct with status
``ok`` without calling math-verify: math-verify would parse the answer from the same ``\\boxed{...}`` text as the
gold (its patterns ranked before the box one all need "final answer"), so it reaches the same string and ``verify``
accepts equal strings. Truncation, bad gold and a missing or blank box are decided before it. It is not cached: a
cache hit costs the same. ``fast_hits`` counts its hits.
Its mirror for wrong answers to integer golds: when the gold and the last box's content are both plain integers of
at most 12 digits (``-?[0-9]+`` up to surrounding whitespace) with different values, the completion scores incorrect
with status ``ok`` (``fast_rejects`` counts these). math-verify parses both to sympy Integers and compares them
exactly; on 3,009 such pairs (leading zeros, signs, ±1 at 12 digits) its verdict equalled integer equality.
Equal values written differently (``0217`` against ``217``) still go to math-verify. Toy golds and DAPO-Math's
are integers, so most wrong answers on both skip math-verify.
"""

from __future__ import annotations

from gdro.grading.golds import PLAIN_INT, Gold
from gdro.grading.magnitude import too_large
from gdro.grading.reward_config import RewardConfig

__all__ = ["eligible_gold", "plain_gold", "unequal_integers", "verbatim"]


def plain_gold(gold: str, config: RewardConfig) -> bool:
    """Whether the fast paths can decide against ``gold`` without parsing it: ``fast_path`` on, ``"boxed"``
    or ``"number"`` mode, and the gold a plain integer (``PLAIN_INT`` up to surrounding whitespace, at most 12 digits), which
    math-verify parses to an Integer and the magnitude guard accepts, so it is good and fast-path eligible.
    Against such a gold, a last box holding the gold's digits (up to whitespace) is correct, and one holding a
    plain integer of another value is incorrect (see the module docstring); anything else goes to
    math-verify."""
    return config.fast_path and config.answer_mode != "any" and isinstance(gold, str) \
        and PLAIN_INT.fullmatch(gold.strip()) is not None


def unequal_integers(answer: str, gold: str) -> bool:
    """Whether ``answer`` is a plain integer of another value than a plain-integer ``gold`` (a :func:`plain_gold`):
    the completion is incorrect (the integer fast path)."""
    return PLAIN_INT.fullmatch(answer.strip()) is not None and int(answer) != int(gold)


def verbatim(answer: str, gold: str, config: RewardConfig) -> bool:
    """Whether ``answer`` (a non-blank last box) is the gold verbatim, as the fast path reads it: ``fast_path`` is
    on; ``answer_mode`` "boxed" or "number" (a bare number: math-verify reads it as the gold written alone, the same
    value); the gold is a ``str``; and the answer equals the gold exactly, or, for a gold without any backslash, after
    stripping surrounding whitespace from both. The answer is then parsed from the same text ``\\boxed{gold}`` as the
    gold was (or from one differing only in surrounding whitespace, which carries no meaning without LaTeX
    commands), so math-verify would reach the same expression and the same fallback string, and ``verify`` accepts
    equal strings, provided the gold parses and is :func:`eligible_gold`."""
    if not config.fast_path or config.answer_mode == "any" or not isinstance(gold, str):
        return False
    return answer == gold or ("\\" not in gold and answer.strip() == gold.strip())


def eligible_gold(gold: str, prepared: Gold) -> bool:
    """Whether a parsed gold is fast-path eligible. Ineligible: a gold containing ``boxed`` (math-verify reads a box
    inside it, ``last_boxed`` does not) or ``answer`` (math-verify's "final answer is ..." patterns rank before its box
    pattern, and differently for gold and answer), and a gold the magnitude guard rejects (an answer equal to it scores
    as a timeout, incorrect). A guard that raises makes the gold ineligible. Like the gold's parse, the guard on a gold
    runs with no time bound."""
    if "boxed" in gold or "answer" in gold.lower():
        return False
    try:
        return not too_large(prepared.parsed)
    except Exception:  # noqa: BLE001 -- math-verify's path then meets (logs, counts) it
        return False
