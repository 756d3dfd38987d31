"""Verifiable math reward: math-verify on the final answer, under a bounded-time policy.

What counts is the **final** answer: in ``answer_mode="boxed"`` the last complete ``\\boxed{...}`` found in
the last ``tail_chars`` characters of a completion; in ``"any"`` math-verify's default LaTeX +
plain-expression extraction over that same tail. A completion that hit the length limit without EOS scores
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
  guessed. In the **main thread** each parse and each verify runs under our own deadline
  (``signal.setitimer``: float seconds; a pending outer ITIMER_REAL timer is re-armed afterwards with its
  remaining time; the one exception we raise, ``_Deadline``, is a ``BaseException`` so math-verify's
  ``except Exception`` cannot swallow it).
* In a **non-main thread** signals are unavailable: time is bounded only by the ``tail_chars`` cap and by a
  magnitude guard that rejects answers whose exact value would need more than ``_MAX_DIGITS`` digits (e.g.
  ``9^{9^{9^{9^9}}}``, which otherwise keeps ``verify`` busy for over a minute). This is a heuristic bound:
  a short symbolic answer can still be slow there (measured: ``(x+1)^{1000}`` 4 s, an ``\\int`` over 30 s).
  Score in the main thread (or in worker processes) when that matters. The guard applies in every thread, so
  junk of that kind scores the same in any thread.
* math-verify logs "Timeout is disabled ..." once per process (parse and verify each); that is expected
  here.

Results are a pure function of (answer text, gold), so they are cached exactly in a per-instance LRU; a
timeout is cached as well (the same junk is not re-tried), and cached results count in the batch's counters
exactly like fresh ones. Model text is never executed: in ``"boxed"`` mode only math-verify's LaTeX parser
sees it; ``"any"`` adds math-verify's expression extraction, which hands sympy's ``parse_expr`` only
digit/operator strings.
"""

from __future__ import annotations

import logging
import math
import re
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify


class _DropTimeoutDisabledNotice(logging.Filter):
    """math-verify warns once that its own timeouts are off; ours (below) bound the time instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledNotice())

ANSWER_MODES = ("boxed", "any")
# An answer whose exact value needs more decimal digits than this is rejected unverified (counted as timeout).
_MAX_DIGITS = 100_000
_BOXED = "\\boxed{"
_LEADING_TOKEN = re.compile(r"^\S*")
_LATEX_ONLY = (LatexExtractionConfig(boxed_match_priority=0),)
_LATEX_AND_EXPR = (LatexExtractionConfig(), ExprExtractionConfig())

OK, UNPARSABLE, TIMEOUT = "ok", "unparsable", "timeout"


@dataclass(frozen=True)
class RewardConfig:
    """Hyperparameters of :class:`MathVerifyReward` (defaults: conf/reward/math-verify.yaml)."""

    correct: float = 1.0  # reward of a verified answer (paper: +1)
    incorrect: float = 0.0  # reward of anything else (paper: -1)
    require_eos: bool = True  # finished=False (length limit hit) scores as incorrect, counted as truncated
    tail_chars: int = 300  # only the last N characters are parsed: the final answer is what counts
    timeout_s: float = 1.0  # per parse and per verify (main thread only; see module docstring)
    answer_mode: str = "boxed"  # "boxed": last \boxed{...}; "any": math-verify's LaTeX + expr extraction
    cache_size: int = 65_536  # LRU entries of (answer text, gold) -> result, and of parsed golds

    def __post_init__(self) -> None:
        if not (math.isfinite(self.correct) and math.isfinite(self.incorrect)):
            raise ValueError(f"correct and incorrect must be finite, got {self.correct}, {self.incorrect}")
        if not self.correct > self.incorrect:
            raise ValueError(
                f"correct must be > incorrect, got correct={self.correct}, incorrect={self.incorrect}"
            )
        if not self.tail_chars > 0:
            raise ValueError(f"tail_chars must be > 0, got {self.tail_chars}")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(f"timeout_s must be > 0 and finite, got {self.timeout_s}")
        if self.answer_mode not in ANSWER_MODES:
            raise ValueError(f"answer_mode must be one of {ANSWER_MODES}, got {self.answer_mode!r}")
        if not self.cache_size > 0:
            raise ValueError(f"cache_size must be > 0, got {self.cache_size}")


@dataclass(frozen=True)
class RewardBatch:
    """Scores of N completions: ``rewards`` float64 (N,), ``correct`` bool (N,), counts of failure kinds."""

    rewards: np.ndarray
    correct: np.ndarray
    n_unparsable: int  # no answer could be extracted (no box, empty, parse error)
    n_truncated: int  # finished=False with require_eos (scored incorrect without parsing)
    n_timeout: int  # deadline hit, or answer too large to verify in bounded time
    n_bad_gold: int  # gold could not be parsed: its completions score incorrect (fix the data)


class _Deadline(BaseException):
    """Raised by our SIGALRM handler; a BaseException, so math-verify's ``except Exception`` lets it pass."""


_RETRY_S = 0.01  # after the deadline the alarm repeats every 10 ms until disarmed


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`_Deadline` in the body after ``seconds`` (main thread; elsewhere a no-op).

    The alarm *repeats* every ``_RETRY_S`` after the deadline until the body exits: a signal handler's
    exception can be swallowed when it lands inside a callback that ignores errors (e.g. a ``gc`` callback),
    and the repeat makes sure the body is still interrupted. The handler raises only while ``armed``, which is
    cleared first on exit, so no ``_Deadline`` escapes the context. A pending outer ITIMER_REAL timer is
    honoured: if it is due first we stop then, and it is re-armed afterwards with its remaining time (at least
    1 µs), so its own handler still runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    armed = [True]

    def _raise_deadline(signum: int, frame: Any) -> None:
        if armed[0]:
            raise _Deadline

    old_handler = signal.signal(signal.SIGALRM, _raise_deadline)
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds, _RETRY_S)
    if 0 < outer_delay < seconds:
        signal.setitimer(signal.ITIMER_REAL, outer_delay, _RETRY_S)
    start = time.monotonic()
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler if old_handler is not None else signal.SIG_DFL)
        if outer_delay > 0:
            remaining = max(outer_delay - (time.monotonic() - start), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, remaining, outer_interval)


def tail(text: str, n: int, *, whole_tokens: bool = False) -> str:
    """The last ``n`` characters of ``text``.

    With ``whole_tokens`` a token cut by the window (a leading non-whitespace run not preceded by whitespace)
    is dropped, so that "... 389192" is never read as "9192". ``answer_mode="any"`` uses it; "boxed" needs no
    trimming, since any box found in a plain window is complete.
    """
    if len(text) <= n:
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
    return None if best is None else text[best[0] : best[1]]


def _digits(e: Any) -> float:
    """Upper bound on the decimal digits needed to hold ``e`` exactly (0 for symbols and unknowns)."""
    if isinstance(e, sympy.Rational):
        return max(abs(e.p).bit_length(), e.q.bit_length()) * math.log10(2)
    if isinstance(e, sympy.Float):
        return math.log10(abs(float(e))) if e != 0 else 0.0
    if isinstance(e, sympy.Pow):
        d_exp = _digits(e.exp)
        return math.inf if d_exp > 300 else max(_digits(e.base), 1.0) * 10.0**d_exp
    if isinstance(e, sympy.factorial):  # n! < n^n
        d_n = _digits(e.args[0])
        return math.inf if d_n > 300 else 10.0**d_n * max(d_n, 1.0)
    if isinstance(e, sympy.binomial):  # C(n, k) <= n^min(k, n-k); k bounds it well enough
        d_n, d_k = _digits(e.args[0]), _digits(e.args[1])
        return math.inf if min(d_n, d_k) > 300 else 10.0 ** min(d_n, d_k) * max(d_n, 1.0)
    return sum((_digits(a) for a in getattr(e, "args", ())), 0.0)


def _too_large(parsed: list) -> bool:
    return any(_digits(p) > _MAX_DIGITS for p in parsed if isinstance(p, sympy.Basic))


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
        self._golds: OrderedDict[str, list] = OrderedDict()

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
        cfg = self.config
        n = len(completions)
        correct = np.zeros(n, dtype=bool)
        counts = {UNPARSABLE: 0, TIMEOUT: 0, "truncated": 0, "bad_gold": 0}
        for i, (text, gold, done) in enumerate(zip(completions, golds, finished)):
            if cfg.require_eos and not done:
                counts["truncated"] += 1
                continue
            gold_parsed = self.parse_gold(gold)
            if not gold_parsed:
                counts["bad_gold"] += 1
                continue
            if cfg.answer_mode == "boxed":
                answer = last_boxed(tail(text, cfg.tail_chars))
            else:
                answer = tail(text, cfg.tail_chars, whole_tokens=True)
            if not answer or not answer.strip():
                counts[UNPARSABLE] += 1
                continue
            status, ok = self._check(answer, gold, gold_parsed)
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
        )

    def parse_gold(self, gold: str) -> list:
        """math-verify's parse of ``\\boxed{gold}`` (LaTeX + plain expressions), cached; [] if unparsable.

        Use it at data-preparation time to drop problems whose gold does not parse (they can never be solved).
        """
        hit = self._golds.get(gold)
        if hit is not None:
            self._golds.move_to_end(gold)
            return hit
        try:
            with _deadline(self.config.timeout_s):
                parsed = parse(f"{_BOXED}{gold}}}", _LATEX_AND_EXPR, parsing_timeout=None)
        except _Deadline:
            parsed = []
        self._remember(self._golds, gold, parsed)
        return parsed

    def _check(self, answer: str, gold: str, gold_parsed: list) -> tuple[str, bool]:
        """(status, correct) of one extracted answer text against a parsed gold; cached per (answer, gold)."""
        key = (answer, gold)
        hit = self._results.get(key)
        if hit is not None:
            self._results.move_to_end(key)
            return hit
        text = f"{_BOXED}{answer}}}" if self.config.answer_mode == "boxed" else answer
        try:
            with _deadline(self.config.timeout_s):
                pred = parse(text, self._extraction, parsing_timeout=None)
            if not pred:
                result = (UNPARSABLE, False)
            elif _too_large(pred):
                result = (TIMEOUT, False)
            else:
                with _deadline(self.config.timeout_s):
                    result = (OK, bool(verify(gold_parsed, pred, timeout_seconds=None)))
        except _Deadline:
            result = (TIMEOUT, False)
        self._remember(self._results, key, result)
        return result

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
            "reward/timeout_count": float(batch.n_timeout),
            "reward/bad_gold_count": float(batch.n_bad_gold),
        }
