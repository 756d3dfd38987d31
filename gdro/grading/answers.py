"""How a completion's final answer is read, before any scoring: the tail window the grader reads (:func:`tail`),
the last complete ``\\boxed{}`` (:func:`last_boxed`, :func:`last_box_span`), the last number written
(:func:`last_number`), and whether the answer is in the format the format term rewards (:func:`final_box`).

Pure string functions, linear in the text: no math-verify, no time bound needed (gdro.grading.rewards scores what
they read).
"""

from __future__ import annotations

import re

from gdro.grading.golds import BOXED as _BOXED

__all__ = ["final_box", "last_box_span", "last_boxed", "last_number", "tail"]

_LEADING_TOKEN = re.compile(r"^\S*")


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


def final_box(text: str) -> bool:
    """Whether ``text`` ends its answer in the format a format term rewards (``reward.format_weight``): a complete,
    non-empty ``\\boxed{...}`` (the one :func:`last_boxed` reads) with no number written after its closing brace, so
    the box holds the final answer: ``"... = \\boxed{103}."`` is; ``"\\boxed{103}, so 104"``, ``"\\boxed{}"`` and an
    unclosed ``"\\boxed{103"`` are not."""
    span = last_box_span(text)
    if span is None or not text[span[0] : span[1]].strip():
        return False
    return last_number(text[span[1] + 1 :]) is None
