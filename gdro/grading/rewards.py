"""Verifiable math reward: math-verify on the final answer, under a bounded-time policy.

What counts is the **final** answer: in ``answer_mode="boxed"`` the last complete ``\\boxed{...}`` found in
the last ``tail_chars`` characters of a completion; in ``"any"`` math-verify's default LaTeX +
plain-expression extraction over that same tail; in ``"number"`` the last number written in that tail
(:func:`last_number`: nothing is evaluated, so an answer that restates ``47 + 56`` is not read as 103, as ``"any"``
reads it).

Training and evaluation read a completion differently, on purpose. Training keeps the official code's window
(``tail_chars: 300``: verl's ``math_dapo`` reads the last 300 characters), a deliberate part of the paper's reward;
``tail_chars: null`` reads the whole completion. Evaluation (:meth:`MathVerifyReward.for_eval`, used by
:func:`gdro.algorithm.heldout.evaluate`) reads ``eval_tail_chars`` (default ``null``: the whole completion), so a correct
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

Bounded time: math-verify always runs here with its own timeouts off (``None``) and ``raise_on_error=False``, so
bad input is its documented "return [] / False" (= unparsable / incorrect) and no exception type has to be guessed
(why its own timeouts are not used: :mod:`gdro.grading.deadline`; its "Timeout is disabled" notice is dropped:
:mod:`gdro.grading.mathverify`). In the **main thread** each parse and each verify runs under gdro's deadline on the
CPU time the scoring thread spends (:func:`~gdro.grading.deadline.deadline`), so a busy machine does not change a
verdict; in **every thread** a magnitude guard rejects an answer whose exact value would need more than
:data:`~gdro.grading.magnitude.MAX_DIGITS` digits, scored as a timeout (:mod:`gdro.grading.magnitude`). A completion
scored afresh in the main thread costs at most ``2 * timeout_s`` (one deadline on parse + magnitude guard, one on
verify; ``3 * timeout_s`` when its gold is parsed for the first time) plus a few milliseconds: extraction is linear
in ``tail_chars``, the deadline repeats every 10 ms until it lands (one long C call overruns it), and a cached result
costs O(1). **Off the main thread** there is no time bound, only the ``tail_chars`` cap and the magnitude guard:
score in the main thread (or in worker processes) when that matters.

Exact-match fast paths (``fast_path``, on by default; ``"boxed"`` and ``"number"`` modes;
:mod:`gdro.grading.fast_path`): a last box holding the gold verbatim scores correct, and a plain integer unequal to a
plain-integer gold incorrect, with status ``ok`` and no math-verify call (``fast_hits``, ``fast_rejects`` count
them), after truncation, bad gold and a missing or blank box are decided.

The reward never raises on model text. Results are ``ok``, ``unparsable``, ``timeout`` or ``error``: any
other ``Exception`` while scoring one completion (in parse, the magnitude guard or verify; none is known
since the zero-Float fix in ``magnitude.digits``, but sympy and math-verify change) is logged (a warning, once per
exception type per instance, with a short repr of the answer) and the completion scores exactly as an
unparsable one (incorrect), but is counted apart, in ``RewardBatch.n_error`` and ``reward/error_frac``, so
that bugs show up instead of hiding among junk answers (the failure kinds are disjoint). A gold whose parse
raises counts as bad gold. ``BaseException`` (our ``Deadline``, ``KeyboardInterrupt``, pytest-timeout's
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
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy
from latex2sympy2_extended.math_normalization import extract_boxed_content
from math_verify import parse, verify

from gdro.common.interfaces import RewardBatch  # the record (defined with the contracts)
from gdro.grading.answers import last_box_span, last_number, tail
from gdro.grading.deadline import Deadline, deadline
from gdro.grading.fast_path import eligible_gold, plain_gold, unequal_integers, verbatim
from gdro.grading.golds import (
    ALT_SEP,
    BOXED,
    Gold,
    GoldTable,
    agree_at_figures,
    normalize_text,
    numbers_agree,
    prepare_gold,
    read,
    rewrite_numbers,
)
from gdro.grading.magnitude import HUGE_EXPONENT, too_large
from gdro.grading.mathverify import LATEX_AND_EXPR, LATEX_ONLY, warm_up
from gdro.grading.reward_config import RewardConfig
from gdro.grading.shaping import format_flags, overlong_penalty

logger = logging.getLogger(__name__)

OK, UNPARSABLE, TIMEOUT, ERROR = "ok", "unparsable", "timeout", "error"


def _several_items(parsed: list) -> bool:
    """Whether a parsed gold holds several items: a set of two or more (``3, 5``; ``(2,2),(6,2)``)."""
    return any(isinstance(p, sympy.FiniteSet) and len(p.args) > 1 for p in parsed)


class MathVerifyReward:
    """math-verify reward with a bounded-time policy (see the module docstring).

    Construct with plain keyword arguments (as Hydra's ``_target_`` does) or with a :class:`RewardConfig`.
    An instance caches results and is not thread-safe: give each thread its own.
    """

    def __init__(self, config: RewardConfig | None = None, /, **kwargs: Any) -> None:
        if config is not None and kwargs:
            raise TypeError("pass either a RewardConfig or keyword arguments, not both")
        self.config = config if config is not None else RewardConfig(**kwargs)
        self._extraction = LATEX_ONLY if self.config.answer_mode == "boxed" else LATEX_AND_EXPR
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
        self, completions: Sequence[str], golds: Sequence[str], finished: Sequence[bool],
        lengths: Sequence[int] | None = None,
    ) -> RewardBatch:
        """Score each completion against its gold (without ``\\boxed``: ``"389192"``, ``"\\frac{1}{2}"``).

        The reward is ``correct`` or ``incorrect``, plus the shaping terms (gdro.grading.shaping): ``format_weight``
        for a formatted completion and, with ``overlong_buffer``, DAPO's overlong punishment of its ``lengths``
        (tokens, needed then). ``RewardBatch.correct`` is correctness alone."""
        if not len(completions) == len(golds) == len(finished):
            raise ValueError(
                f"completions, golds and finished must have equal lengths, "
                f"got {len(completions)}, {len(golds)}, {len(finished)}"
            )
        if lengths is not None and len(lengths) != len(completions):
            raise ValueError(f"lengths must have one entry per completion, got {len(lengths)} for {len(completions)}")
        if self.config.overlong_buffer and lengths is None:
            raise ValueError("reward.overlong_buffer > 0 needs the completions' token lengths (score(..., lengths=))")
        warm_up()
        cfg = self.config
        n = len(completions)
        correct = np.zeros(n, dtype=bool)
        counts = {UNPARSABLE: 0, TIMEOUT: 0, ERROR: 0, "truncated": 0, "bad_gold": 0}
        for i, (text, gold, done) in enumerate(zip(completions, golds, finished)):
            if cfg.require_eos and not done:
                counts["truncated"] += 1
                continue
            plain = plain_gold(gold, cfg)  # a plain integer always parses: math-verify's parse only if needed
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
            if plain and unequal_integers(answer, gold):
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
        formatted = format_flags(completions, finished, tail_chars=cfg.tail_chars, require_eos=cfg.require_eos)
        if cfg.format_weight:
            rewards = rewards + cfg.format_weight * formatted
        n_overlong = 0
        if cfg.overlong_buffer:
            penalty = overlong_penalty(lengths, max_tokens=cfg.overlong_max_tokens, buffer=cfg.overlong_buffer,
                                       factor=cfg.overlong_factor)
            rewards, n_overlong = rewards + penalty, int((np.asarray(lengths) > cfg.overlong_max_tokens
                                                          - cfg.overlong_buffer).sum())
        return RewardBatch(
            rewards=rewards,
            correct=correct,
            n_unparsable=counts[UNPARSABLE],
            n_truncated=counts["truncated"],
            n_timeout=counts[TIMEOUT],
            n_bad_gold=counts["bad_gold"],
            n_error=counts[ERROR],
            n_formatted=int(formatted.sum()),
            n_overlong=n_overlong,
        )

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
        """Take golds a loader prepared (:attr:`gdro.data.benchmark_rows.LoadReport.golds`): no parse at scoring."""
        for gold, prepared in table.golds.items():
            self._remember(self._golds, gold, prepared)

    def for_eval(self) -> MathVerifyReward:
        """The evaluation reward: the same rules and prepared golds, reading ``eval_tail_chars`` and ``eval_boxes``
        (module docstring).

        Cached, so repeated evaluations share one result cache; ``self`` when the two windows are equal and
        ``eval_boxes`` is ``"last"``, as in training.
        """
        join = self.config.eval_boxes == "join"
        if self.config.eval_tail_chars == self.config.tail_chars and not join and not self.config.shaped:
            return self
        if self._eval is None:  # correctness alone: no shaping term in evaluation
            self._eval = MathVerifyReward(dataclasses.replace(self.config, tail_chars=self.config.eval_tail_chars,
                                                              format_weight=0.0, overlong_buffer=0))
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
        """Whether ``answer`` (a non-blank last box) is the gold verbatim (:func:`gdro.grading.fast_path.verbatim`)
        and the gold eligible (a plain-integer gold, unprepared: ``prepared=None``, is): math-verify's verdict known."""
        return verbatim(answer, gold, self.config) and (prepared is None or self._fast_gold(gold, prepared))

    def _fast_gold(self, gold: str, prepared: Gold) -> bool:
        """:func:`gdro.grading.fast_path.eligible_gold`, cached per gold."""
        hit = self._fast_golds.get(gold)
        if hit is not None:
            self._fast_golds.move_to_end(gold)
            return hit
        eligible = eligible_gold(gold, prepared)
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
            except Deadline:
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
        """Parse + magnitude guard, then verify, each under its own deadline (may raise ``Deadline``).

        An e-notation gold (:attr:`Gold.measured`) also accepts a number that rounds to it at its significant
        figures (:func:`gdro.grading.golds.agree_at_figures`), where math-verify's exact comparison says no.
        """

        if HUGE_EXPONENT.search(answer):
            return TIMEOUT, False
        text = f"{BOXED}{answer}}}" if self.config.answer_mode == "boxed" else answer  # (named in the error log)

        def parse_and_guard() -> tuple[str, list]:
            pred = self._read_answer(answer)
            return (UNPARSABLE if not pred else TIMEOUT if too_large(pred) else OK), pred

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
        handler raises when the context re-arms that timer on exit; ``Deadline`` (a BaseException) passes.
        """
        with deadline(self.config.timeout_s):
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
            "reward/format_frac": batch.n_formatted / n,  # in the format term's format, whatever its weight
            "reward/overlong_frac": batch.n_overlong / n,  # in the overlong punishment's buffer or beyond (0: off)
        }
