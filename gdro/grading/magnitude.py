"""The magnitude guard: an answer whose exact value would need more than :data:`MAX_DIGITS` decimal digits is rejected
before sympy evaluates it (:func:`too_large`; the reward scores it as a timeout, in every thread).

In a **non-main thread**, where signals are unavailable (:mod:`gdro.grading.deadline`), the guard and the
``tail_chars`` cap are the only bounds on time: the guard rejects e.g. ``9^{9^{9^{9^9}}}``, which otherwise keeps
``verify`` busy for over a minute. This is a heuristic bound: a short symbolic answer can still be slow there
(measured: ``(x+1)^{1000}`` 4 s, an ``\\int`` over 30 s, ``\\prod_{i=1}^{10^6} i`` 17 s: sums and products are not
measured). A power's size is its base's digits times its exponent: an integer exponent is bounded by its digits, any
other number by its value, read with ``evalf`` at 15 digits and bounded working precision when it is built from
numbers and elementary functions, so cheap values such as ``2^{\\sqrt2+\\sqrt3}`` pass and ``2^{\\sqrt2\\cdot10^{6}}``
does not (:func:`_exponent_size`). Score in the main thread (or in worker processes) when that matters. The guard
applies in every thread, so junk of that kind scores the same in any thread.

Known slow values (huge powers, factorials, binomials) are kept away from sympy this way, where one long C call
would overrun the main thread's deadline too (:mod:`gdro.grading.deadline`). A decimal literal with a huge exponent
(:data:`HUGE_EXPONENT`) is rejected before it is parsed at all.
"""

from __future__ import annotations

import math
import re
from typing import Any

import sympy
from sympy.matrices import MatrixBase

__all__ = ["HUGE_EXPONENT", "MAX_DIGITS", "digits", "too_large"]

# An answer whose exact value needs more decimal digits than this is rejected unverified (counted as timeout).
MAX_DIGITS = 100_000
_MAX_DEPTH = 100  # an expression tree deeper than this is not measured: rejected like a too large one
_LOG10_2 = math.log10(2)
# A decimal literal with an E exponent of 6+ digits ("2E852868", "1.5E+900000", "2E-852868"): sympy turns it into an
# exact number in one C call that the deadline cannot interrupt (measured 6-28 s; one such answer cost a training
# step 22 s). Its exact value needs more than MAX_DIGITS digits, so it scores as the magnitude guard would have it.
HUGE_EXPONENT = re.compile(r"[0-9][eE][+-]?0*[1-9][0-9]{5,}")  # (a lowercase e too: gdro.grading.golds reads it as 10^)


def digits(e: Any, depth: int = 0) -> float:
    """Upper bound on the decimal digits of the numbers an exact evaluation of ``e`` involves; never raises.

    Always >= 0, so the sum over sub-expressions bounds them all, and ``10**digits(x) >= |x|`` for a number
    ``x``, so it bounds exponents and factorial arguments too. 0 for symbols, zero, infinities, NaN, ``zoo``
    and unknowns; ``inf`` for a tree deeper than ``_MAX_DEPTH``. A ``Float`` counts its integer part (its
    mantissa is held at its own precision), read from the mpf tuple: no ``float()`` overflow, no ``log10(0)``.
    """
    if depth > _MAX_DEPTH:
        return math.inf
    depth += 1
    if isinstance(e, sympy.Rational):
        return max(abs(e.p).bit_length(), e.q.bit_length()) * _LOG10_2
    if isinstance(e, sympy.Float):  # man * 2**exp with bc bits of man; man == 0 for zero (and inf/nan mpfs)
        _sign, man, exp, bc = e._mpf_
        bits = max(exp + bc, 0) if man else 0
        return bits * _LOG10_2 if bits < 2**1000 else math.inf
    if isinstance(e, sympy.Pow):
        d_exp = digits(e.exp, depth)
        if d_exp > 300:
            return math.inf
        size = _exponent_size(e.exp)  # |exponent| when it is a number that is not an integer, else None
        if size is None:
            return max(digits(e.base, depth), 1.0) * 10.0**d_exp
        return max(digits(e.base, depth), 1.0) * max(size, 1.0) + d_exp
    if isinstance(e, (sympy.factorial, sympy.gamma)):  # n! < n^n, and gamma(n) = (n-1)!
        d_n = digits(e.args[0], depth)
        return math.inf if d_n > 300 else 10.0**d_n * max(d_n, 1.0)
    if isinstance(e, sympy.binomial):  # C(n, k) <= n^min(n, k) for an integer n >= 0; else |C| <= (|n| + k)^k
        n, k = e.args  # (sympy evaluates a negative or symbolic n through k-term products: k! is involved)
        d_n, d_k = digits(n, depth), digits(k, depth)
        d_terms = min(d_n, d_k) if isinstance(n, sympy.Integer) and n >= 0 else d_k
        return math.inf if d_terms > 300 else 10.0**d_terms * (max(d_n, d_k) + 1.0)
    if isinstance(e, MatrixBase):  # math-verify's matrices are mutable, not sympy.Basic: no .args
        return sum((digits(x, depth) for x in e), 0.0)
    return sum((digits(a, depth) for a in getattr(e, "args", ())), 0.0)


# The nodes of an exponent that is measured by its value: numbers, pi/e/i, + * ^, and elementary functions.
_NUMBER_NODES = (sympy.Number, sympy.NumberSymbol, sympy.core.numbers.ImaginaryUnit, sympy.Add, sympy.Mul, sympy.Pow)
_ELEMENTARY = frozenset(f"sympy.functions.elementary.{m}" for m in ("exponential", "trigonometric", "hyperbolic"))
_EXPONENT_DIGITS = 15  # the value of an exponent is read to this many digits (mpmath, via evalf: bounded precision)


def _exponent_size(e: Any) -> float | None:
    """``|e|`` for an exponent that is a number but not an integer, evaluated numerically; ``None`` otherwise.

    ``digits`` bounds a power ``b^e`` by ``digits(b) * |e|``. For an integer exponent ``|e| <= 10**digits(e)``
    is tight; for any other it is not (``digits(sqrt(2)) = 4``, so ``2^{\\sqrt2+\\sqrt3}`` was bounded by 10^8
    digits and refused, though its value is 6.24), so such an exponent, when built only from numbers, ``pi``,
    ``e``, ``i``, ``+ * ^`` and elementary functions (a tree ``digits`` has already measured: its numbers have at
    most 300 digits), is read by its value: ``evalf`` to :data:`_EXPONENT_DIGITS` digits, whose working precision
    is bounded (``maxn``). A value too large for a float is ``inf`` (refused); an exponent that cannot be evaluated
    (symbols, integrals, sums, ...) or whose value is not a finite complex number is ``None``: the integer bound
    applies. Never raises an ``Exception``.
    """
    if isinstance(e, sympy.Integer) or not isinstance(e, sympy.Basic):
        return None
    if not isinstance(e, sympy.Number) and not all(
            isinstance(node, _NUMBER_NODES) or type(node).__module__ in _ELEMENTARY
            for node in sympy.preorder_traversal(e)):
        return None
    try:
        if isinstance(e, sympy.Rational):
            value = abs(e.p / e.q)
        else:
            value = abs(complex(e.evalf(_EXPONENT_DIGITS, maxn=4 * _EXPONENT_DIGITS)))
    except OverflowError:
        return math.inf
    except Exception:  # noqa: BLE001 -- not a number evalf can give (unevaluated, nan, ...): the integer bound
        return None
    return value if not math.isnan(value) else None


def too_large(parsed: list) -> bool:
    """Whether any sympy value of ``parsed`` (an answer or a gold as math-verify parsed it) needs more than
    :data:`MAX_DIGITS` digits (:func:`digits`); may raise what sympy raises."""
    return any(digits(p) > MAX_DIGITS for p in parsed if isinstance(p, (sympy.Basic, MatrixBase)))
