"""Verifiable math reward: math-verify on the final answer, under a bounded-time policy.

What counts is the **final** answer: in ``answer_mode="boxed"`` the last complete ``\\boxed{...}`` found in
the last ``tail_chars`` characters of a completion; in ``"any"`` math-verify's default LaTeX +
plain-expression extraction over that same tail; in ``"number"`` the last number written in that tail
(:func:`last_number`: nothing is evaluated, so an answer that restates ``47 + 56`` is not read as 103, as ``"any"``
reads it).

Training and evaluation read a completion differently, on purpose. Training keeps the official code's window
(``tail_chars: 300``: verl's ``math_dapo`` reads the last 300 characters), a deliberate part of the paper's reward;
``tail_chars: null`` reads the whole completion. Evaluation (:meth:`MathVerifyReward.for_eval`, used by
:func:`gdro.evaluation.heldout.evaluate`) reads ``eval_tail_chars`` (default ``null``: the whole completion), so a correct
final box followed by a check of it, in text or code, is not dropped (34 such boxes in one real set of 7,565).
With ``eval_boxes: join`` evaluation also reads a gold of several items from the boxes that end the completion,
joined as math-verify's own extraction joins them (``\\boxed{(2,2)}`` and ``\\boxed{(6,2)}`` for ``(2,2),(6,2)``);
training and the default read the last box only (:meth:`MathVerifyReward._boxed_answer`).

Answers and golds are read by gdro's rules before math-verify (:mod:`gdro.grading.golds`): Python/scientific floats
(``4.5e33``) are their value, ``-1./3`` is ``-1/3``, a percent sign on either side accepts both readings
(``x%`` ≡ ``x`` ≡ ``x/100``), a relation is read from its right-hand side, a gold math-verify cannot read is
compared as normalised text and reported. **Golds are prepared once with no time bound** (:meth:`use_golds`
takes a loader's :class:`~gdro.grading.golds.GoldTable`; a gold met first while scoring is prepared then, unbounded), so
a verdict never depends on how loaded the machine was when a long gold was parsed. A completion that hit the length limit without EOS scores
as incorrect when ``require_eos`` is set (tiny models otherwise learn to fill the window with guesses).

Bounded time, and why it is done here rather than by math-verify's own
``parsing_timeout``/``timeout_seconds``:

* math-verify's timeouts call ``signal.alarm(t)``: ``t`` must be an ``int`` -- a float such as 1.0 raises a
  ``TypeError`` that ``parse`` swallows, so *every* answer silently becomes unparsable; each call ends with
  ``signal.alarm(0)``, which cancels any other pending SIGALRM timer (pytest-timeout's signal method, a
  caller's own alarm); in a non-main thread they raise ``ValueError``; and a timeout is only logged (with
  the whole prediction text) and returned as ``[]``/``False`` unless ``raise_on_error=True``, which also
  re-raises every bad-input error sympy can produce.
* So math-verify always runs here with its timeouts off (``None``) and ``raise_on_error=False``: bad input
  is math-verify's documented "return [] / False" (= unparsable / incorrect) and no exception type has to be
  guessed. In the **main thread** each parse and each verify runs under our own deadline, a bound on the CPU time
  the scoring thread spends, so that a busy machine does not change a verdict (:func:`_deadline`)
  (``signal.setitimer``: float seconds; a pending outer ITIMER_REAL timer is re-armed afterwards with its
  remaining time; the one exception we raise, ``_Deadline``, is a ``BaseException`` so math-verify's
  ``except Exception`` cannot swallow it).
* In a **non-main thread** signals are unavailable: time is bounded only by the ``tail_chars`` cap and by a
  magnitude guard that rejects answers whose exact value would need more than ``_MAX_DIGITS`` digits (e.g.
  ``9^{9^{9^{9^9}}}``, which otherwise keeps ``verify`` busy for over a minute). This is a heuristic bound:
  a short symbolic answer can still be slow there (measured: ``(x+1)^{1000}`` 4 s, an ``\\int`` over 30 s,
  ``\\prod_{i=1}^{10^6} i`` 17 s: sums and products are not measured). A power's size is its base's digits times
  its exponent: an integer exponent is bounded by its digits, any other number by its value, read with ``evalf``
  at 15 digits and bounded working precision when it is built from numbers and elementary functions, so cheap
  values such as ``2^{\\sqrt2+\\sqrt3}`` pass and ``2^{\\sqrt2\\cdot10^{6}}`` does not (:func:`_exponent_size`).
  Score in the main thread (or in worker processes) when that matters. The guard applies in every thread, so
  junk of that kind scores the same in any thread.
* math-verify logs "Timeout is disabled ..." once per process (parse and verify each); that is expected
  here.

Time per completion. In the **main thread** a completion scored afresh costs at most ``2 * timeout_s`` (one
deadline on parse + magnitude guard, one on verify; ``3 * timeout_s`` when its gold is parsed for the first
time) plus a few milliseconds: extraction is linear in ``tail_chars``, the deadline repeats every 10 ms until
it lands, and a cached result costs O(1). The deadline interrupts Python code only, so one long C call (a
big-integer operation, a regex) overruns it until it returns; the magnitude guard keeps the known ones
(huge powers, factorials, binomials) away from sympy. **Off the main thread** there is no time bound, only
the heuristics above.

Exact-match fast path (``fast_path``, on by default; ``"boxed"`` and ``"number"`` modes). When the last box holds the gold
string verbatim (or, for a gold without backslashes, up to surrounding whitespace), the gold parses and is
eligible (no ``boxed`` or ``answer`` inside it, not rejected by the magnitude guard; checked once per gold), the
completion scores correct with status ``ok`` without calling math-verify: math-verify would parse the answer from
the same ``\\boxed{...}`` text as the gold (its patterns ranked before the box one all need "final answer"), so
it reaches the same string and ``verify`` accepts equal strings. Truncation, bad gold and a missing or blank box
are decided before it, as before. It is not cached: a cache hit costs the same. ``fast_hits`` counts its hits.
Its mirror for wrong answers to integer golds: when the gold and the last box's content are both plain integers of
at most 12 digits (``-?[0-9]+`` up to surrounding whitespace) with different values, the completion scores incorrect
with status ``ok`` (``fast_rejects`` counts these). math-verify parses both to sympy Integers and compares them
exactly; on 3,009 such pairs (leading zeros, signs, ±1 at 12 digits) its verdict equalled integer equality.
Equal values written differently (``0217`` against ``217``) still go to math-verify. Toy golds and DAPO-Math's
are integers, so most wrong answers on both skip math-verify.

The reward never raises on model text. Results are ``ok``, ``unparsable``, ``timeout`` or ``error``: any
other ``Exception`` while scoring one completion (in parse, the magnitude guard or verify; none is known
since the zero-Float fix in ``_digits``, but sympy and math-verify change) is logged (a warning, once per
exception type per instance, with a short repr of the answer) and the completion scores exactly as an
unparsable one (incorrect), but is counted apart, in ``RewardBatch.n_error`` and ``reward/error_frac``, so
that bugs show up instead of hiding among junk answers (the failure kinds are disjoint). A gold whose parse
raises counts as bad gold. ``BaseException`` (our ``_Deadline``, ``KeyboardInterrupt``, pytest-timeout's
failure) is never caught, and the ``except`` never encloses the deadline's exit, where a pending outer timer
is re-armed, so an exception raised by the caller's own SIGALRM handler propagates.

Results are a pure function of (answer text, gold), so they are cached exactly in a per-instance LRU (nearly:
math-verify's verdict on a few degenerate answers, e.g. ``\\frac{0.0}{0.0}`` against ``0``, depends on what
sympy's global cache holds, i.e. on what the process scored before; the LRU pins the first one); a
timeout and an error are cached as well (the same junk is not re-tried), and cached results count in the
batch's counters exactly like fresh ones. Model text is never executed: in ``"boxed"`` mode only
math-verify's LaTeX parser sees it; ``"any"`` adds math-verify's expression extraction, which hands sympy's
``parse_expr`` only digit/operator strings.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import math
import re
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy
from latex2sympy2_extended.math_normalization import extract_boxed_content
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy.matrices import MatrixBase

from gdro.grading.golds import (
    ALT_SEP,
    BOXED,
    PLAIN_INT,
    Gold,
    GoldTable,
    agree_at_figures,
    normalize_text,
    numbers_agree,
    prepare_gold,
    read,
    rewrite_numbers,
)
from gdro.interfaces import RewardBatch  # the record (defined with the contracts); re-exported here

logger = logging.getLogger(__name__)


class _DropTimeoutDisabledNotice(logging.Filter):
    """math-verify warns once that its own timeouts are off; ours (below) bound the time instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledNotice())

ANSWER_MODES = ("boxed", "any", "number")
EVAL_BOXES = ("last", "join")
# An answer whose exact value needs more decimal digits than this is rejected unverified (counted as timeout).
_MAX_DIGITS = 100_000
_MAX_DEPTH = 100  # an expression tree deeper than this is not measured: rejected like a too large one
_MAX_TIMEOUT_S = 86_400.0  # setitimer overflows near 1e12 s; a day is far beyond any useful deadline
_LOG10_2 = math.log10(2)
_BOXED = BOXED
_PLAIN_INT = PLAIN_INT  # integers math-verify compares exactly (fast reject path)
# A decimal literal with an E exponent of 6+ digits ("2E852868", "1.5E+900000", "2E-852868"): sympy turns it into an
# exact number in one C call that the deadline cannot interrupt (measured 6-28 s; one such answer cost a training
# step 22 s). Its exact value needs more than _MAX_DIGITS digits, so it scores as the magnitude guard would have it.
_HUGE_EXPONENT = re.compile(r"[0-9][eE][+-]?0*[1-9][0-9]{5,}")  # (a lowercase e too: gdro.grading.golds reads it as 10^)
_LEADING_TOKEN = re.compile(r"^\S*")
_LATEX_ONLY = (LatexExtractionConfig(boxed_match_priority=0),)
_LATEX_AND_EXPR = (LatexExtractionConfig(), ExprExtractionConfig())

OK, UNPARSABLE, TIMEOUT, ERROR = "ok", "unparsable", "timeout", "error"


@dataclass(frozen=True)
class RewardConfig:
    """Hyperparameters of :class:`MathVerifyReward` (defaults: conf/reward/math-verify.yaml)."""

    correct: float = 1.0  # reward of a verified answer (paper: +1)
    incorrect: float = 0.0  # reward of anything else (paper: -1)
    require_eos: bool = True  # finished=False (length limit hit) scores as incorrect, counted as truncated
    tail_chars: int | None = 300  # training reads only the last N characters (official code); None = all
    eval_tail_chars: int | None = None  # evaluation's window (for_eval); None = the whole completion
    eval_boxes: str = "last"  # evaluation: "last" box; "join": boxes joined when the gold holds several items
    timeout_s: float = 1.0  # per parse and per verify (main thread only; see module docstring)
    answer_mode: str = "boxed"  # "boxed": last \boxed{...}; "any": math-verify's LaTeX + expr extraction;
    # "number": the last number written (no expression evaluated: "47 + 56" reads as 56, never as 103)
    cache_size: int = 65_536  # LRU entries of (answer text, gold) -> result, and of parsed golds
    fast_path: bool = True  # boxed answer == gold string: correct; unequal plain integers: incorrect (no math-verify)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.correct) and math.isfinite(self.incorrect)):
            raise ValueError(f"correct and incorrect must be finite, got {self.correct}, {self.incorrect}")
        if not self.correct > self.incorrect:
            raise ValueError(
                f"correct must be > incorrect, got correct={self.correct}, incorrect={self.incorrect}"
            )
        for key in ("tail_chars", "eval_tail_chars"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise ValueError(f"{key} must be > 0 or null (the whole completion), got {value}")
        if not 0 < self.timeout_s <= _MAX_TIMEOUT_S:
            raise ValueError(f"timeout_s must be > 0 and <= {_MAX_TIMEOUT_S:g} s, got {self.timeout_s}")
        if self.answer_mode not in ANSWER_MODES:
            raise ValueError(f"answer_mode must be one of {ANSWER_MODES}, got {self.answer_mode!r}")
        if self.eval_boxes not in EVAL_BOXES:
            raise ValueError(f"eval_boxes must be one of {EVAL_BOXES}, got {self.eval_boxes!r}")
        if not self.cache_size > 0:
            raise ValueError(f"cache_size must be > 0, got {self.cache_size}")


class _Deadline(BaseException):
    """Raised by our SIGALRM handler; a BaseException, so math-verify's ``except Exception`` lets it pass."""


_RETRY_S = 0.01  # after the deadline the alarm repeats every 10 ms until disarmed


def _in_finalizer(frame: Any) -> bool:
    """Whether ``frame`` runs in a gc callback, a ``__del__`` or ``sys.unraisablehook``.

    An exception raised there is only reported ("Exception ignored in ..."), never seen by the body, and a
    slow hook (pytest's formats a traceback) would be interrupted in turn.
    """
    hooks = (*gc.callbacks, sys.unraisablehook)
    codes = {getattr(getattr(h, "__func__", getattr(h, "func", h)), "__code__", None) for h in hooks}
    while frame is not None:
        if frame.f_code in codes or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`_Deadline` in the body once it has used ``seconds`` of CPU time (main thread; elsewhere a no-op).

    The bound is on the CPU time of the scoring thread (``time.thread_time``), not on the wall clock: a wall-clock
    alarm fires after ``seconds``, and if the thread has used less CPU than that (the machine was busy: the wall
    ran, the parse did not), it is re-armed for the CPU time left. So a verdict does not depend on how loaded the
    machine is: measured, a long answer that timed out on a machine loaded 4x beyond its cores under a wall-clock
    bound scores the same as on an idle one. (A body that waits rather than computes is therefore not
    interrupted by the bound; parsing and verifying never wait.)

    The alarm *repeats* every ``_RETRY_S`` after the deadline until the body exits: where the signal lands in
    a gc callback, a ``__del__`` or the unraisable hook the handler does not raise (the exception would only
    be reported), and the repeat makes sure the body is still interrupted. The handler raises only while
    armed: from our ``setitimer`` on entry until the first step of the exit, so no ``_Deadline`` escapes the
    context (a SIGALRM before that ``setitimer`` is an outer timer's: it goes to that timer's handler). A
    pending outer ITIMER_REAL timer is honoured: if it is due first we stop then, and it is re-armed
    afterwards with its remaining time (at least 1 µs), so its own handler still runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    phase = ["setup"]  # -> "armed" -> "done"
    previous: list[Any] = [None]

    def _raise_deadline(signum: int, frame: Any) -> None:
        if phase[0] == "armed":
            if _in_finalizer(frame):
                return
            cpu_left = seconds - (time.thread_time() - cpu_start)
            outer_left = outer_delay - (time.monotonic() - start) if outer_delay > 0 else math.inf
            if cpu_left > 0 and outer_left > 0:  # a busy machine: wall time passed, our CPU time did not
                signal.setitimer(signal.ITIMER_REAL, max(min(cpu_left, outer_left), 1e-6), _RETRY_S)
                return
            raise _Deadline
        elif phase[0] == "setup" and callable(previous[0]):
            previous[0](signum, frame)

    previous[0] = signal.signal(signal.SIGALRM, _raise_deadline)
    outer_delay, outer_interval, start, cpu_start = 0.0, 0.0, time.monotonic(), time.thread_time()
    try:
        outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds, _RETRY_S)
        phase[0] = "armed"
        if 0 < outer_delay < seconds:
            signal.setitimer(signal.ITIMER_REAL, outer_delay, _RETRY_S)
        yield
    finally:
        phase[0] = "done"
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous[0] if previous[0] is not None else signal.SIG_DFL)
        if outer_delay > 0:
            remaining = max(outer_delay - (time.monotonic() - start), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, remaining, outer_interval)


def tail(text: str, n: int | None, *, whole_tokens: bool = False) -> str:
    """The last ``n`` characters of ``text`` (all of it for ``None``).

    With ``whole_tokens`` a token cut by the window (a leading non-whitespace run not preceded by whitespace)
    is dropped, so that "... 389192" is never read as "9192". ``answer_mode="any"`` uses it; "boxed" needs no
    trimming, since any box found in a plain window is complete.
    """
    if n is None or len(text) <= n:
        return text
    window = text[-n:]
    if whole_tokens and not text[-n - 1].isspace():
        window = _LEADING_TOKEN.sub("", window, count=1)
    return window


def last_boxed(text: str) -> str | None:
    """Content of the box that starts last among those that close in ``text``; None if no box closes.

    An unclosed later box is skipped ("\\boxed{1} ... \\boxed{2" gives "1"); of nested boxes the inner one
    wins (the same answer after math-verify's normalisation); escaped braces ``\\{``/``\\}`` do not count.
    One pass with a stack of open braces, so linear in ``len(text)`` whatever the nesting.
    """
    span = last_box_span(text)
    return None if span is None else text[span[0] : span[1]]


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\w|\.\d)")


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (``answer_mode="number"``), thousands commas dropped: ``"47 + 56 =
    103."`` gives ``"103"``, ``"-1,250.5"`` ``"-1250.5"``, ``"1.5e3"`` itself. Nothing is evaluated, so restating the question (``"47 +
    56"``) reads as ``"56"``. A digit run glued to letters (``x2``, ``2x``) is not a number; None if there is none."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def last_box_span(text: str) -> tuple[int, int] | None:
    """``(start, end)`` of the content of the box :func:`last_boxed` reads (``text[end]`` is its closing brace)."""
    opened: list[int] = []  # body start of each open brace; -1 for a brace that is not a box
    best = None
    i = text.find(_BOXED)  # braces before the first box cannot change which boxes close
    while 0 <= i < len(text):
        ch = text[i]
        if ch == "\\":
            if text.startswith(_BOXED, i):
                i += len(_BOXED)
                opened.append(i)
                continue
            i += 2
            continue
        if ch == "{":
            opened.append(-1)
        elif ch == "}" and opened:
            body = opened.pop()
            if body >= 0 and (best is None or body > best[0]):
                best = (body, i)
        i += 1
    return best


def _digits(e: Any, depth: int = 0) -> float:
    """Upper bound on the decimal digits of the numbers an exact evaluation of ``e`` involves; never raises.

    Always >= 0, so the sum over sub-expressions bounds them all, and ``10**_digits(x) >= |x|`` for a number
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
        d_exp = _digits(e.exp, depth)
        if d_exp > 300:
            return math.inf
        size = _exponent_size(e.exp)  # |exponent| when it is a number that is not an integer, else None
        if size is None:
            return max(_digits(e.base, depth), 1.0) * 10.0**d_exp
        return max(_digits(e.base, depth), 1.0) * max(size, 1.0) + d_exp
    if isinstance(e, (sympy.factorial, sympy.gamma)):  # n! < n^n, and gamma(n) = (n-1)!
        d_n = _digits(e.args[0], depth)
        return math.inf if d_n > 300 else 10.0**d_n * max(d_n, 1.0)
    if isinstance(e, sympy.binomial):  # C(n, k) <= n^min(n, k) for an integer n >= 0; else |C| <= (|n| + k)^k
        n, k = e.args  # (sympy evaluates a negative or symbolic n through k-term products: k! is involved)
        d_n, d_k = _digits(n, depth), _digits(k, depth)
        d_terms = min(d_n, d_k) if isinstance(n, sympy.Integer) and n >= 0 else d_k
        return math.inf if d_terms > 300 else 10.0**d_terms * (max(d_n, d_k) + 1.0)
    if isinstance(e, MatrixBase):  # math-verify's matrices are mutable, not sympy.Basic: no .args
        return sum((_digits(x, depth) for x in e), 0.0)
    return sum((_digits(a, depth) for a in getattr(e, "args", ())), 0.0)


# The nodes of an exponent that is measured by its value: numbers, pi/e/i, + * ^, and elementary functions.
_NUMBER_NODES = (sympy.Number, sympy.NumberSymbol, sympy.core.numbers.ImaginaryUnit, sympy.Add, sympy.Mul, sympy.Pow)
_ELEMENTARY = frozenset(f"sympy.functions.elementary.{m}" for m in ("exponential", "trigonometric", "hyperbolic"))
_EXPONENT_DIGITS = 15  # the value of an exponent is read to this many digits (mpmath, via evalf: bounded precision)


def _exponent_size(e: Any) -> float | None:
    """``|e|`` for an exponent that is a number but not an integer, evaluated numerically; ``None`` otherwise.

    ``_digits`` bounds a power ``b^e`` by ``digits(b) * |e|``. For an integer exponent ``|e| <= 10**_digits(e)``
    is tight; for any other it is not (``_digits(sqrt(2)) = 4``, so ``2^{\\sqrt2+\\sqrt3}`` was bounded by 10^8
    digits and refused, though its value is 6.24), so such an exponent, when built only from numbers, ``pi``,
    ``e``, ``i``, ``+ * ^`` and elementary functions (a tree ``_digits`` has already measured: its numbers have at
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


def _several_items(parsed: list) -> bool:
    """Whether a parsed gold holds several items: a set of two or more (``3, 5``; ``(2,2),(6,2)``)."""
    return any(isinstance(p, sympy.FiniteSet) and len(p.args) > 1 for p in parsed)


def _too_large(parsed: list) -> bool:
    return any(_digits(p) > _MAX_DIGITS for p in parsed if isinstance(p, (sympy.Basic, MatrixBase)))


_WARM = False


def _warm_up() -> None:
    """Once per process, an unbounded parse and verify of a fixed expression before any bounded one: the first call
    in a process loads math-verify's grammars and sympy. Seen: longer than the time bound, so that the first gold
    needing a parse was scored as bad and its completion as wrong, in one of two runs that were otherwise equal."""
    global _WARM
    if _WARM:
        return
    _WARM = True
    import math_verify

    try:
        math_verify.verify(math_verify.parse("$\\frac{1}{2}$", _LATEX_AND_EXPR, parsing_timeout=None),
                           math_verify.parse("$0.5$", _LATEX_AND_EXPR, parsing_timeout=None), timeout_seconds=None)
    except Exception as err:  # noqa: BLE001 (a warm-up only: scoring reports its own errors)
        logger.debug("math-verify warm-up failed: %s", err)


class MathVerifyReward:
    """math-verify reward with a bounded-time policy (see the module docstring).

    Construct with plain keyword arguments (as Hydra's ``_target_`` does) or with a :class:`RewardConfig`.
    An instance caches results and is not thread-safe: give each thread its own.
    """

    def __init__(self, config: RewardConfig | None = None, /, **kwargs: Any) -> None:
        if config is not None and kwargs:
            raise TypeError("pass either a RewardConfig or keyword arguments, not both")
        self.config = config if config is not None else RewardConfig(**kwargs)
        self._extraction = _LATEX_ONLY if self.config.answer_mode == "boxed" else _LATEX_AND_EXPR
        self._results: OrderedDict[tuple[str, str], tuple[str, bool]] = OrderedDict()
        self._golds: OrderedDict[str, Gold] = OrderedDict()  # prepared once, unbounded (gdro.grading.golds)
        self._fast_golds: OrderedDict[str, bool] = OrderedDict()  # gold -> eligible for the fast path
        self.fast_hits = 0  # completions scored correct by the exact-match fast path (no math-verify call)
        self.fast_rejects = 0  # completions scored incorrect by the integer fast path (no math-verify call)
        self._logged_errors: set[type] = set()  # exception types already logged (once each)
        self._eval: MathVerifyReward | None = None  # for_eval's reward, made on first use
        self._join_boxes = False  # for_eval's reward under eval_boxes="join" (see _boxed_answer)

    def __getattr__(self, name: str) -> Any:
        """The hyperparameters read as attributes too: ``reward.incorrect is reward.config.incorrect``."""
        if name in RewardConfig.__dataclass_fields__ and "config" in self.__dict__:
            return getattr(self.config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def score(
        self, completions: Sequence[str], golds: Sequence[str], finished: Sequence[bool]
    ) -> RewardBatch:
        """Score each completion against its gold (without ``\\boxed``: ``"389192"``, ``"\\frac{1}{2}"``)."""
        if not len(completions) == len(golds) == len(finished):
            raise ValueError(
                f"completions, golds and finished must have equal lengths, "
                f"got {len(completions)}, {len(golds)}, {len(finished)}"
            )
        _warm_up()
        cfg = self.config
        n = len(completions)
        correct = np.zeros(n, dtype=bool)
        counts = {UNPARSABLE: 0, TIMEOUT: 0, ERROR: 0, "truncated": 0, "bad_gold": 0}
        for i, (text, gold, done) in enumerate(zip(completions, golds, finished)):
            if cfg.require_eos and not done:
                counts["truncated"] += 1
                continue
            plain = self._plain_gold(gold)  # a plain integer always parses: math-verify's parse only if needed
            prepared = None if plain else self.prepare(gold)
            if prepared is not None and not prepared.parsed:
                counts["bad_gold"] += 1
                continue
            if cfg.answer_mode == "boxed":
                answer = self._boxed_answer(tail(text, cfg.tail_chars), prepared)
            elif cfg.answer_mode == "number":
                answer = last_number(tail(text, cfg.tail_chars, whole_tokens=True))
            else:
                answer = tail(text, cfg.tail_chars, whole_tokens=True)
            if not answer or not answer.strip():
                counts[UNPARSABLE] += 1
                continue
            if self._fast_match(answer, gold, prepared):
                self.fast_hits += 1
                correct[i] = True
                continue
            if plain and _PLAIN_INT.fullmatch(answer.strip()) and int(answer) != int(gold):
                self.fast_rejects += 1
                continue
            if prepared is None:
                prepared = self.prepare(gold)
                if not prepared.parsed:  # (cannot happen for a plain integer; kept so that no path skips the check)
                    counts["bad_gold"] += 1
                    continue
            status, ok = self._check(answer, gold, prepared)
            if status != OK:
                counts[status] += 1
            correct[i] = ok
        rewards = np.where(correct, cfg.correct, cfg.incorrect).astype(np.float64)
        return RewardBatch(
            rewards=rewards,
            correct=correct,
            n_unparsable=counts[UNPARSABLE],
            n_truncated=counts["truncated"],
            n_timeout=counts[TIMEOUT],
            n_bad_gold=counts["bad_gold"],
            n_error=counts[ERROR],
        )

    def parse_gold(self, gold: str) -> list:
        """The gold read by gdro's rules and math-verify (:meth:`prepare`); [] if it cannot be read at all."""
        return self.prepare(gold).parsed

    def prepare(self, gold: str) -> Gold:
        """The gold prepared once with **no time bound** (:func:`gdro.grading.golds.prepare_gold`), cached.

        A gold is data, not model text: a long one must not be counted as bad because its parse met a busy
        machine. An exception while reading it is logged and the gold counts as bad (``parsed == []``).
        """
        hit = self._golds.get(gold)
        if hit is not None:
            self._golds.move_to_end(gold)
            return hit
        try:
            prepared = prepare_gold(gold)
        except Exception as exc:  # noqa: BLE001 -- a bad gold is reported and scored incorrect, never raised
            self._log_error(exc, gold, "bad_gold_count")
            prepared = Gold(parsed=[], text_only=True, rules=())
        self._remember(self._golds, gold, prepared)
        return prepared

    def use_golds(self, table: GoldTable) -> None:
        """Take golds a loader prepared (:attr:`gdro.data.benchmarks.LoadReport.golds`): no parse at scoring."""
        for gold, prepared in table.golds.items():
            self._remember(self._golds, gold, prepared)

    def for_eval(self) -> MathVerifyReward:
        """The evaluation reward: the same rules and prepared golds, reading ``eval_tail_chars`` and ``eval_boxes``
        (module docstring).

        Cached, so repeated evaluations share one result cache; ``self`` when the two windows are equal and
        ``eval_boxes`` is ``"last"``, as in training.
        """
        join = self.config.eval_boxes == "join"
        if self.config.eval_tail_chars == self.config.tail_chars and not join:
            return self
        if self._eval is None:
            self._eval = MathVerifyReward(dataclasses.replace(self.config, tail_chars=self.config.eval_tail_chars))
            self._eval._golds = self._golds
            self._eval._join_boxes = join
        return self._eval

    def _boxed_answer(self, window: str, prepared: Gold | None) -> str | None:
        """The last box's content (:func:`last_boxed`); in the evaluation form under ``eval_boxes: join``, when the
        gold holds several items (a set of two or more, as ``(2,2),(6,2)`` or ``3, 5`` parse), the boxes ending at
        that box as math-verify's own extraction joins them: boxes near each other, or parted by ``,``, ``;``,
        ``and`` or ``or``, joined by commas (``\\boxed{(2,2)}`` and ``\\boxed{(6,2)}`` read ``(2,2),(6,2)``;
        ``extract_boxed_content`` of math-verify's LaTeX normaliser, on the text up to the end of the last box)."""
        span = last_box_span(window)
        if span is None:
            return None
        answer = window[span[0] : span[1]]
        if not self._join_boxes or prepared is None or not _several_items(prepared.parsed):
            return answer
        joined = extract_boxed_content(window[: span[1] + 1], mode="last")
        return answer if joined == answer.strip() else joined

    def _fast_match(self, answer: str, gold: str, prepared: Gold | None) -> bool:
        """Whether ``answer`` (a non-blank last box) is the gold verbatim, so math-verify's verdict is known.

        Rule (all of it): ``fast_path`` is on; ``answer_mode`` "boxed" or "number" (a bare number: math-verify
        reads it as the gold written alone, the same value); the gold is a ``str`` that parses
        (checked by the caller) and is fast-path eligible (:meth:`_fast_gold`; a plain-integer gold, passed
        unprepared as ``prepared=None``, always is: :meth:`_plain_gold`); and the answer equals the gold
        exactly, or, for a gold without any backslash, after stripping surrounding whitespace from both. The
        answer is then parsed from the same text ``\\boxed{gold}`` as the gold was (or from one differing
        only in surrounding whitespace, which carries no meaning without LaTeX commands), so math-verify would
        reach the same expression and the same fallback string, and ``verify`` accepts equal strings.
        """
        cfg = self.config
        if not cfg.fast_path or cfg.answer_mode == "any" or not isinstance(gold, str):
            return False
        if answer != gold and ("\\" in gold or answer.strip() != gold.strip()):
            return False
        return prepared is None or self._fast_gold(gold, prepared)

    def _plain_gold(self, gold: str) -> bool:
        """Whether the fast paths can decide against ``gold`` without parsing it: ``fast_path`` on, ``"boxed"``
        or ``"number"`` mode, and the gold a plain integer (``_PLAIN_INT`` up to surrounding whitespace, at most 12 digits), which
        math-verify parses to an Integer and the magnitude guard accepts, so it is good and fast-path eligible.
        Against such a gold, a last box holding the gold's digits (up to whitespace) is correct, and one holding a
        plain integer of another value is incorrect (see the module docstring); anything else goes to
        math-verify."""
        cfg = self.config
        return cfg.fast_path and cfg.answer_mode != "any" and isinstance(gold, str) \
            and _PLAIN_INT.fullmatch(gold.strip()) is not None

    def _fast_gold(self, gold: str, prepared: Gold) -> bool:
        """Whether a parsed gold is fast-path eligible; cached per gold. Ineligible: a gold containing
        ``boxed`` (math-verify reads a box inside it, ``last_boxed`` does not) or ``answer`` (math-verify's
        "final answer is ..." patterns rank before its box pattern, and differently for gold and answer), and a
        gold the magnitude guard rejects (an answer equal to it scores as a timeout, incorrect). A guard that
        raises makes the gold ineligible. Like the gold's parse, the guard on a gold runs with no time bound."""
        hit = self._fast_golds.get(gold)
        if hit is not None:
            self._fast_golds.move_to_end(gold)
            return hit
        if "boxed" in gold or "answer" in gold.lower():
            eligible = False
        else:
            try:
                eligible = not _too_large(prepared.parsed)
            except Exception:  # noqa: BLE001 -- math-verify's path then meets (logs, counts) it
                eligible = False
        self._remember(self._fast_golds, gold, eligible)
        return eligible

    def _check(self, answer: str, gold: str, prepared: Gold) -> tuple[str, bool]:
        """(status, correct) of one extracted answer text against a prepared gold; cached per (answer, gold).

        A gold math-verify cannot read (reported when prepared) is compared with the last box as normalised
        text (:func:`gdro.grading.golds.normalize_text`), each alternative apart; in ``"any"`` mode by math-verify.
        """
        key = (answer, gold)
        hit = self._results.get(key)
        if hit is not None:
            self._results.move_to_end(key)
            return hit
        if prepared.text_only and self.config.answer_mode == "boxed":
            said = normalize_text(answer)
            result = (OK, any(said == normalize_text(alt) for alt in gold.split(ALT_SEP)))
        else:
            try:
                result = self._verdict(answer, prepared)
            except _Deadline:
                result = (TIMEOUT, False)
        self._remember(self._results, key, result)
        return result

    def _read_answer(self, answer: str) -> list:
        """math-verify's parse of an answer by gdro's rules (:mod:`gdro.grading.golds`): the last box's content in
        ``"boxed"`` mode (percent, Python numbers, relations), the tail's numbers rewritten in ``"any"`` mode."""

        def parse_fn(text: str) -> list:
            return parse(text, self._extraction, parsing_timeout=None)

        if self.config.answer_mode == "boxed":
            return read(answer, parse_fn)[0]
        return parse_fn(rewrite_numbers(answer))

    def _verdict(self, answer: str, gold: Gold) -> tuple[str, bool]:
        """Parse + magnitude guard, then verify, each under its own deadline (may raise ``_Deadline``).

        An e-notation gold (:attr:`Gold.measured`) also accepts a number that rounds to it at its significant
        figures (:func:`gdro.grading.golds.agree_at_figures`), where math-verify's exact comparison says no.
        """

        if _HUGE_EXPONENT.search(answer):
            return TIMEOUT, False
        text = f"{_BOXED}{answer}}}" if self.config.answer_mode == "boxed" else answer  # (named in the error log)

        def parse_and_guard() -> tuple[str, list]:
            pred = self._read_answer(answer)
            return (UNPARSABLE if not pred else TIMEOUT if _too_large(pred) else OK), pred

        out = self._bounded(parse_and_guard, text, "error_frac")
        if isinstance(out, Exception):
            return ERROR, False
        status, pred = out
        if status != OK:
            return status, False
        def compare() -> bool:
            if verify(gold.parsed, pred, timeout_seconds=None) and numbers_agree(gold.parsed, pred):
                return True
            return gold.measured is not None and agree_at_figures(gold.measured, pred)

        ok = self._bounded(compare, text, "error_frac")
        return (ERROR, False) if isinstance(ok, Exception) else (OK, ok)

    def _bounded(self, fn: Callable[[], Any], text: str, metric: str) -> Any:
        """``fn()`` under the deadline; an ``Exception`` from it is logged and returned, never raised.

        The ``except`` sits inside the deadline's context, so it cannot catch what a pending outer SIGALRM
        handler raises when the context re-arms that timer on exit; ``_Deadline`` (a BaseException) passes.
        """
        with _deadline(self.config.timeout_s):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 -- model text must never end a run; logged and counted
                self._log_error(exc, text, metric)
                return exc

    def _log_error(self, exc: Exception, text: str, metric: str) -> None:
        """Warn once per exception type, formatting only str args (printing a huge sympy object can hang)."""
        kind = type(exc)
        if kind in self._logged_errors:
            return
        self._logged_errors.add(kind)
        msg = exc.args[0][:200] if exc.args and isinstance(exc.args[0], str) else ""
        if not isinstance(text, str):  # a gold of another type
            text = f"<{type(text).__name__}>"
        short = text if len(text) <= 80 else f"{text[:60]}...{text[-17:]}"
        logger.warning(
            "%s(%r) while scoring %r (%d chars): scored incorrect, counted in reward/%s "
            "(further %s are not logged)",
            kind.__name__,
            msg,
            short,
            len(text),
            metric,
            kind.__name__,
        )

    def _remember(self, cache: OrderedDict, key: Any, value: Any) -> None:
        cache[key] = value
        if len(cache) > self.config.cache_size:
            cache.popitem(last=False)

    def metrics(self, batch: RewardBatch) -> dict[str, float]:
        """``reward/*`` metrics of one scored batch (fractions are 0.0 for an empty batch)."""
        n = max(len(batch.rewards), 1)
        return {
            "reward/accuracy": float(batch.correct.sum()) / n,
            "reward/unparsable_frac": batch.n_unparsable / n,
            "reward/truncated_frac": batch.n_truncated / n,
            "reward/error_frac": batch.n_error / n,
            "reward/timeout_count": float(batch.n_timeout),
            "reward/bad_gold_count": float(batch.n_bad_gold),
        }
