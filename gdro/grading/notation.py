"""Notations that math-verify's LaTeX parser misreads, rewritten before it parses (issue #39, item 7).

:func:`gdro.grading.golds.read` applies :func:`normalize` to a gold and to the content of an answer's last
``\\boxed{}`` alike (``"boxed"`` mode), so one reading applies to both sides. Each rule fires only on its own
notation, and a text with no letter, no backslash and no non-ASCII character (a plain integer, as the toy task's
answers are) is returned unchanged before any rule is tried:

* **Unicode superscripts** (:func:`superscripts`): ``x²`` is ``x^{2}``, ``cm⁻¹`` is ``cm^{-1}``; math-verify could
  not read ``g(x) = x² - 2x + 2`` at all.
* **Ordinals** (:func:`ordinal`): a box that holds one ordinal (``12^{\\mathrm{th}}``, ``12^{th}``, ``12^\\text{th}``,
  ``12\\text{th}``, ``12th``), alone or followed by words (``\\text{ grade}``), is its number: math-verify read
  ``12^{\\mathrm{th}}`` as ``12^{}`` (unreadable) and ``12^{th}`` as ``12^{t h}``. The suffix must be the number's own
  (``1st``, ``2nd``, ``3rd``, ``11th``, ``12th``, ``13th``, ``21st``), so ``12^{nd}`` stays a power; an ordinal inside a
  larger expression (``2^{nd} + 1``) is left alone.
* **Spacing before units** (:func:`spacing_before_text`): a spacing command (``\\,``, ``\\;``, ``\\:``, ``\\!``,
  ``\\ ``, ``~``) right before ``\\text{}``/``\\mathrm{}``, or ending the text, is a plain space: math-verify drops
  the units in ``\\text{}`` but kept the ``\\,``, and then read ``15,000 \\,`` as the set ``{15, 0}``.
* **Relations between names** (:func:`word_relation`): a text made only of words joined by relation signs, each
  word plain capitals (``SRMC``) or letters in ``\\text{}``/``\\mathrm{}`` (``\\text{LRMC}``), is read the same
  whether or not its words are wrapped. math-verify reads ``\\text{SRMC}`` as one name and plain ``SRMC`` as the
  product of its letters, so ``\\text{SRMC} = \\text{LRMC}`` never matched the gold ``SRMC=LRMC``. When a word has
  three letters or more (an acronym: ``SRMC``, ``LRAC``) every word of two letters or more is read as one name
  (``\\text{MR}``), so ``SRMC = RLMC`` (an anagram) no longer matches; otherwise (``AB = CD``, ``P = MC``: a
  geometry segment is two capitals) the words are read as plain letters, as math-verify reads the unwrapped text.

Units after a power of ten (``1.70 \\times 10^{4} cm^{-1}``) are read by the unit-text rule of
:mod:`gdro.grading.golds` (``units_as_text``), and an answer written as an assignment (``r = 3.275 \\times 10^{12}``)
is compared by its right-hand side there too (``numbers_agree``, ``agree_at_figures``), as math-verify compares it.
"""

from __future__ import annotations

import re

__all__ = ["normalize", "ordinal", "spacing_before_text", "superscripts", "word_relation"]

_SUPER = "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ"
_SUPER_TO_ASCII = str.maketrans(_SUPER, "0123456789+-=()ni")
_SUPER_RUN = re.compile(f"[{_SUPER}]+")

_SPACE = r"(?:\s|(?<!\\)\\[,;:! ]|~)"  # whitespace or a spacing command (not after a line break's \\)
_WRAP = r"\\(?:text|mathrm|textrm|mbox)\s*\{"  # a command whose argument math-verify reads as text
_SUFFIX = r"(?:st|nd|rd|th)"
_ORDINAL = re.compile(
    r"\s*(?P<number>\d+)(?P<mark>\s*\^\s*\{\s*(?:" + _WRAP + r"\s*" + _SUFFIX + r"\s*\}|\\rm\s*" + _SUFFIX
    + r"|" + _SUFFIX + r")\s*\}|\s*\^\s*" + _WRAP + r"\s*" + _SUFFIX + r"\s*\}|\s*" + _WRAP + r"\s*-?" + _SUFFIX
    + r"\s*\}|" + _SUFFIX + r")(?![A-Za-z])"
    r"(?P<rest>" + _SPACE + r"*" + _WRAP + r"[A-Za-z .,-]*\}[\s.]*|" + _SPACE + r"*[A-Za-z][A-Za-z .-]*|[\s.]*)"
)
_SPACES = re.compile(_SPACE + r"+")  # a run of spacing: no backtracking
_WRAP_AT = re.compile(_WRAP)
_RELATION = r"(?:=|<|>|\\[lgn]eq?(?![A-Za-z]))"
_OPERAND = r"(?:" + _WRAP + r"\s*[A-Za-z]+\s*\}|[A-Z]+(?![A-Za-z]))"
_WORD_RELATION = re.compile(
    _SPACE + r"*" + _OPERAND + _SPACE + r"*(?:" + _RELATION + _SPACE + r"*" + _OPERAND + _SPACE + r"*)+"
)
_TOKEN = re.compile(r"(?P<rel>" + _RELATION + r")|" + _WRAP + r"\s*(?P<wrapped>[A-Za-z]+)\s*\}|(?P<plain>[A-Z]+)")


def superscripts(text: str) -> str:
    """``text`` with each run of Unicode superscripts written as a LaTeX superscript: ``x²`` is ``x^{2}``."""
    if text.isascii():
        return text
    return _SUPER_RUN.sub(lambda m: "^{" + m.group().translate(_SUPER_TO_ASCII) + "}", text)


def _suffix_of(n: int) -> str:
    """The English ordinal suffix of ``n`` (its last two digits decide)."""
    if n % 100 in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def ordinal(text: str) -> str:
    """A text that is one ordinal, maybe followed by words, as its number and the words: ``12^{\\mathrm{th}}
    \\text{ grade}`` is ``12 \\text{ grade}``; anything else (a suffix not the number's own) unchanged."""
    match = _ORDINAL.fullmatch(text)
    if match is None or match.group("mark").rstrip(" }")[-2:] != _suffix_of(int(match.group("number")[-2:])):
        return text
    rest = match.group("rest").strip()
    return match.group("number") + (f" {rest}" if rest else "")


def spacing_before_text(text: str) -> str:
    """``text`` with a run of spacing that holds a spacing command, before ``\\text{}``/``\\mathrm{}``, as one space,
    and none such at its end: ``15,000 \\, \\text{kcal}`` is ``15,000 \\text{kcal}``."""
    if "\\" not in text and "~" not in text:
        return text
    out, start = [], 0
    for run in _SPACES.finditer(text):
        if "\\" not in run.group() and "~" not in run.group():
            continue
        end = run.end() == len(text)
        if end or _WRAP_AT.match(text, run.end()):
            out += [text[start : run.start()], "" if end else " "]
            start = run.end()
    return "".join(out) + text[start:] if out else text


def word_relation(text: str) -> str:
    """A relation between words read the same whether its words are wrapped in ``\\text{}`` or not (module
    docstring): ``\\text{SRMC}=\\text{LRMC}`` and ``SRMC = LRMC`` are both ``\\text{SRMC} = \\text{LRMC}``,
    ``\\text{P}=\\text{MC}`` is ``P = MC``; anything else unchanged."""
    if _WORD_RELATION.fullmatch(text) is None:
        return text
    tokens = [(m.group("rel"), m.group("wrapped") or m.group("plain")) for m in _TOKEN.finditer(text)]
    names = any(word is not None and len(word) >= 3 for _, word in tokens)
    if not names and "\\" not in text:  # plain capitals, read as letters: math-verify's own reading
        return text
    return " ".join(rel if rel is not None else f"\\text{{{word}}}" if names and len(word) > 1 else word
                   for rel, word in tokens)


_RULES = (("superscript", superscripts), ("ordinal", ordinal), ("unit-spacing", spacing_before_text),
          ("names", word_relation))


def normalize(text: str) -> tuple[str, tuple[str, ...]]:
    """``(text rewritten by the rules above, the names of those that applied)``; a text with no letter, backslash
    or non-ASCII character (a plain number) is returned as it is."""
    if text.isascii() and "\\" not in text and not any(c.isalpha() for c in text):
        return text, ()
    used: tuple[str, ...] = ()
    for name, rule in _RULES:
        rewritten = rule(text)
        if rewritten != text:
            text, used = rewritten, (*used, name)
    return text, used
