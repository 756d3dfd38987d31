"""Reading answers and golds the way their authors meant them: the rules math-verify does not apply.

Real benchmark golds and real model answers write numbers in ways math-verify's LaTeX parser misreads or cannot
read. These rules run before math-verify, on a gold and on the content of an answer's last ``\\boxed{}`` alike
(:func:`rewrite_numbers` also on the text of ``answer_mode="any"``), so that one reading applies to both sides:

* **Notations** (:mod:`gdro.grading.notation`, first): Unicode superscripts (``x²``), an ordinal (``12^{\\mathrm{th}}``
  is 12), spacing commands before units in ``\\text{}`` (``15,000 \\, \\text{kcal}``), a relation between names
  (``\\text{SRMC} = \\text{LRMC}`` reads as ``SRMC=LRMC``). A text without letters or commands is never touched.
* **Python / scientific floats** (:data:`SCI_FLOAT`): ``4.5e33``, ``1e-5``, ``2.7778e-6`` become
  ``4.5\\times10^{33}`` ... -- their value. math-verify reads a lowercase ``e`` as Euler's number (``4.5e33`` =
  4.5·e·33; it reads ``4.5E33`` right, which is left alone),
  so a correct ``4.5 \\times 10^{33}`` or ``0.00001`` could never match (58 of Minerva's 272 golds). A literal is
  rewritten only where it stands alone: a letter, ``.``, ``^``, ``{`` or ``_`` right after it
  (``3e^{-2t}``, ``2e-5t``) or a letter or ``.`` right before it leaves it alone.
* **Python float literals with a bare point**: ``-1./3`` is ``-1/3`` (Minerva's ``-1./3``, ``-3./2``).
* **NumPy / math functions**: ``np.arcsin(10/13)`` is ``\\arcsin(10/13)``; ``np.pi`` is ``\\pi`` (:data:`PY_FUNCS`).
* **A capital E with a subscript** is a symbol (an energy, ``E_{1}``), not Euler's number: it is read as
  ``\\mathcal{E}_{1}``. math-verify could not read ``E_{1},E_{2}`` at all and read
  ``\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}`` as ``2/3``, so that ``... E_{3}`` matched it.
* **Percent** (:func:`split_percent`): a trailing percent sign (``17.5%``, ``17.5\\%``, ``8 \\%``,
  ``17.5\\text{\\%}``) or word (``17.5 percent``, ``percentage``, ``pct``, bare or in ``\\text{}``) on **either
  side** means the value may be read as written or as a fraction: ``x%`` matches ``x``, ``x\\%`` and ``x/100``; the
  other side is compared with both readings. So gold ``17.5%`` accepts ``17.5``, ``17.5 pct``, ``17.5\\%`` and
  ``0.175``, and gold ``10`` accepts ``10\\%``; gold ``0.1`` accepts ``10\\%`` but not ``10`` (no percent sign
  anywhere). ``"boxed"`` mode only.
* **Digit groups** (:func:`join_digit_groups`): digits grouped by threes with a space, ``\\,``, ``\\ `` or ``~``
  (``1 000``, ``12\\,345.5``) are one number; math-verify read ``1 000`` as a product. ``"boxed"`` mode only.
* **Unit text** (:func:`units_as_text`): a number, or a number times a power of ten, followed by plain unit text
  (``15,000 kcal/m^2/yr``, ``1000 rad/s``, ``15,000 dollars``, ``1.70 \\times 10^{4} cm^{-1}``) is also read as the
  number alone, as math-verify reads units in ``\\text{}``; the text must hold a word of two letters or more that
  is not a mathematical name, or be a compound of SI unit letters (``m/s``), so ``5 x`` stays a product. The reading
  is added, not substituted (``5 xy`` still matches ``5xy``). ``"boxed"`` mode only.
* **Significant figures** (:func:`measured`): a gold that is one number in e-notation (``3.3e12``, ``4.6e-24``:
  Minerva's physics answers) is a measured quantity: a real answer that rounds to it at its significant figures
  (at least :data:`MIN_SIG_FIGS`) also matches, within half a unit in its last place (``3.275\\times10^{12}`` matches
  ``3.3e12``; ``3.2\\times10^{12}`` does not). No other gold is compared so: ``0.5`` or ``3.3\\times10^{12}``
  written out is exact, and ``0.49`` does not match ``0.5``. An answer written as an equation against such a gold
  (``r = 3.275 \\times 10^{12}``) is compared by its right-hand side, as math-verify compares it.
* **Relations**: a text that math-verify cannot read and that holds a top-level ``=`` is read from its right-hand
  side (``m_{\\max}=n^{2}-n-1`` is ``n^{2}-n-1``).
* **Text**: a gold that still cannot be read is compared as *normalised* text (:func:`normalize_text`: whitespace,
  ``\\left``/``\\right``, spacing commands and ``$`` dropped), never as raw text, and it is reported when the
  gold is prepared (:class:`GoldTable`; the benchmark loader's report counts it).
* **Small numbers** (:func:`numbers_agree`): math-verify compares numbers to 6 decimal places and chops
  differences below its 15-digit precision, so at small magnitudes any two numbers match (``2.88\\times10^{-19}``
  matched ``2.88\\times10^{-20}``, ``0.00000005`` matched ``10^{-8}``: a Minerva answer off by a factor of ten
  scored right). A match between two real numbers stands only if they also agree to :data:`REL_TOL` relative to
  the larger: math-verify's own precision at magnitudes of about 0.005 and above (it never changes a verdict
  there), carried down to smaller ones. An equation against a value is its right-hand side here too, as in
  math-verify (``r = 2.88\\times10^{-20}`` matched ``2.88e-19``).
* **Alternatives**: a gold holding several acceptable answers (a list gold whose row says it is not a multi-part
  answer) is stored as the alternatives joined by :data:`ALT_SEP`; any one of them matches.

Golds are prepared **once, with no time bound** (:func:`prepare_golds`, and :class:`~gdro.grading.rewards.MathVerifyReward`
for golds it meets first while scoring): a gold is data, not model text, and a long one (a Minerva gold takes up to
1 s cold) must not be counted as bad because the machine was busy. Model text keeps the reward's time bound.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse
from sympy.matrices import MatrixBase

from gdro.grading.notation import normalize as normalize_notation

BOXED = "\\boxed{"
PLAIN_INT = re.compile(r"-?[0-9]{1,12}")  # integers math-verify reads and compares exactly: nothing to prepare
ALT_SEP = " ||| "  # separates the alternatives of one gold ("3 ||| 5": either is correct)
LATEX_AND_EXPR = (LatexExtractionConfig(), ExprExtractionConfig())

# A float literal in Python / scientific notation standing alone (see the module docstring).
SCI_FLOAT = re.compile(r"(?<![A-Za-z0-9_.\\])(\d+(?:\.\d*)?|\.\d+)e([+-]?)(\d+)(?![A-Za-z0-9_.^{])")
_BARE_POINT = re.compile(r"(?<![0-9.])(\d+)\.(?![0-9A-Za-z])")  # "1./3" -> "1/3"; never "1.5", never "x."
PY_FUNCS = ("arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "sin", "cos", "tan", "exp", "log", "pi")
_PY_FUNC = re.compile(r"\b(?:np|numpy|math)\.(" + "|".join(PY_FUNCS) + r")\b")
_PERCENT_WORD = r"(?:percent(?:age)?|pct\.?)"  # 28 percent, 28 percentage, 28 pct
_PERCENT = re.compile(
    r"(?:\\[,;:! ]|\s)*(?:\\%|%|\\text\{\s*\\?%\s*\}|\\(?:text|mathrm)\{\s*" + _PERCENT_WORD + r"\s*\}"
    r"|(?<![A-Za-z])" + _PERCENT_WORD + r")\s*$"
)
_SUBSCRIPT_E = re.compile(r"(?<![\\A-Za-z])E_")
# Digits grouped by threes with a space (SI style: "1 000", "1\\,000", "12 345.5"): one number
_DIGIT_GROUPS = re.compile(r"(?<![\d.,])\d{1,3}(?:(?:\s*(?:\\[,;: ]|~)\s*|\s+)\d{3})+(?!\d)")
_GROUP_SEP = re.compile(r"\\[,;: ]|~|\s")
# A number followed by plain unit text ("15,000 kcal/m^2/yr", "1000 rad/s"): the text is units, not symbols
_UNIT_TEXT = re.compile(
    r"(?P<number>[-+]?(?:\\?\$)?\s*\d[\d,]*(?:\.\d+)?(?:\s*\\(?:times|cdot)\s*10\s*\^\s*(?:\{\s*[-+]?\d+\s*\}|\d))?)"
    r"(?P<sep>(?:\s|\\[,;: ]|~)+)"
    r"(?P<unit>[A-Za-z]+(?:\^\{?-?\d+\}?)?(?:(?:\s|\\[,;: ]|~|/|\*|\\cdot|-|\()+[A-Za-z]+(?:\^\{?-?\d+\}?)?)*\)?)"
    r"\.?\s*"
)  # (a separator before each word: one way to split the text, so no backtracking blow-up)
# Words math-verify reads as mathematics, never units; single letters are units only in a compound (m/s, N m)
_MATH_WORDS = frozenset({"pi", "infty", "inf", "oo", "nan", "sqrt", "ln", "log", "exp", "sin", "cos", "tan", "cot",
                         "sec", "csc", "mod", "and", "or", "to", "i", "e"})
_SI_LETTERS = frozenset("msgKNJWVALh")
# A gold that is one number in e-notation ("3.3e12", "4.6e-24", "2.75E11"): a measured quantity (Minerva)
_E_NOTATION = re.compile(r"\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)[eE][-+]?\d{1,4})\s*")
MIN_SIG_FIGS = 2  # a one-digit mantissa ("3e8", "1e-5") is compared at two significant figures
_SPACING = re.compile(r"\\[,;:! ]|\\(?:left|right|displaystyle)\b|\\q?quad\b|\s+|\$")


def rewrite_numbers(text: str) -> str:
    """``text`` with Python-style number literals and NumPy functions written as LaTeX (module docstring)."""
    if "e" in text:
        text = SCI_FLOAT.sub(lambda m: f"{m.group(1).rstrip('.') or '0'}\\times10^{{{m.group(2).lstrip('+')}{m.group(3)}}}", text)
    if "." in text:
        text = _PY_FUNC.sub(r"\\\1", text)
        text = _BARE_POINT.sub(r"\1", text)
    return text


def join_digit_groups(text: str) -> str:
    """``text`` with digits grouped by threes with spaces written as one number: ``"1 000"`` is ``"1000"``."""
    if not any(c.isspace() or c in "\\~" for c in text):
        return text
    return _DIGIT_GROUPS.sub(lambda m: _GROUP_SEP.sub("", m.group()), text)


def units_as_text(text: str) -> str:
    """A number followed by plain unit text, with the text in ``\\text{}`` (which math-verify drops):
    ``"15,000 kcal/m^2/yr"`` is ``"15,000 \\text{kcal/m^2/yr}"``; anything else unchanged.

    The unit text holds a word of two letters or more that is not a mathematical name (:data:`_MATH_WORDS`), or
    only SI unit letters in a compound (``m/s``, ``m s^{-2}``); a lone letter (``5 x``) is a symbol and stays.
    """
    match = _UNIT_TEXT.fullmatch(text)
    if match is None:
        return text
    unit = match.group("unit")
    words = re.findall(r"[A-Za-z]+", unit)
    if any(w.lower() in _MATH_WORDS for w in words):
        return text
    compound = len(words) > 1 or "/" in unit or "^" in unit
    if not any(len(w) > 1 for w in words) and not (compound and all(w in _SI_LETTERS for w in words)):
        return text
    return f"{match.group('number')}{match.group('sep')}\\text{{{unit}}}"


def split_percent(text: str) -> tuple[str, bool]:
    """``(text without a trailing percent sign, whether it had one)``; ``("17.5", True)`` for ``"17.5\\%"``."""
    match = _PERCENT.search(text)
    if match is None or match.start() == 0:
        return text, False
    return text[: match.start()].rstrip(), True


def normalize_text(text: str) -> str:
    """A text without the spacing that carries no meaning in LaTeX: how a gold math-verify cannot read is compared."""
    return _SPACING.sub("", text)


def readable(parsed: list) -> bool:
    """Whether math-verify read a value (a sympy object or a matrix), not only the fallback string."""
    return any(isinstance(p, (sympy.Basic, MatrixBase)) for p in parsed)


def _top_level_rhs(text: str) -> str | None:
    """The text after the last ``=`` outside braces/brackets, or None."""
    depth, cut = 0, None
    for i, ch in enumerate(text):
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        elif ch == "=" and depth == 0 and text[i - 1 : i] not in ("<", ">", "!", "\\"):
            cut = i
    rhs = text[cut + 1 :].strip() if cut is not None else ""
    return rhs or None


def read(content: str, parse_fn: Callable[[str], list]) -> tuple[list, tuple[str, ...]]:
    """``(parsed, rules)``: one box's content read by the rules above, then ``parse_fn(f"\\boxed{{...}}")``;
    ``rules`` names those that applied (``"percent"``, gdro.grading.notation's ``"superscript"``, ``"ordinal"``,
    ``"unit-spacing"``, ``"names"``, then ``"python-number"``, ``"digit-groups"``, ``"subscript-E"``, ``"relation"``,
    ``"unit-text"``).

    With a percent sign both readings are parsed (``x`` and ``x/100``) and concatenated: math-verify's ``verify``
    accepts when any gold element equals any answer element. Unit text after a number adds a reading too (the
    number alone; :func:`units_as_text`), so that ``5 xy`` still reads as the product it may be. ``parse_fn`` is math-verify's ``parse`` with the
    caller's extraction config and time policy.
    """
    body, percent = split_percent(content)
    body, rules = normalize_notation(body)  # superscripts, ordinals, spacing before units, names (gdro.grading.notation)
    rules = ("percent", *rules) if percent else rules
    rewritten = rewrite_numbers(body)
    if rewritten != body:
        body, rules = rewritten, (*rules, "python-number")
    rewritten = join_digit_groups(body)
    if rewritten != body:
        body, rules = rewritten, (*rules, "digit-groups")
    if "E_" in body:
        rewritten = _SUBSCRIPT_E.sub(r"\\mathcal{E}_", body)
        if rewritten != body:
            body, rules = rewritten, (*rules, "subscript-E")
    parsed = list(parse_fn(f"{BOXED}{body}}}"))
    if not readable(parsed):
        rhs = _top_level_rhs(body)
        if rhs is not None:
            rhs_parsed = list(parse_fn(f"{BOXED}{rhs}}}"))
            if readable(rhs_parsed):
                parsed, rules = rhs_parsed + parsed, (*rules, "relation")
    united = units_as_text(body)
    if united != body:
        unit_parsed = list(parse_fn(f"{BOXED}{united}}}"))
        if readable(unit_parsed):
            parsed, rules = parsed + unit_parsed, (*rules, "unit-text")
    if percent and readable(parsed):
        parsed = parsed + list(parse_fn(f"{BOXED}\\frac{{{body}}}{{100}}}}"))
    return parsed, rules


REL_TOL = 1e-4  # numbers that math-verify matched must agree this closely, relative to the larger


def _real_values(parsed: list) -> list:
    out = []
    for p in parsed:
        try:
            if isinstance(p, sympy.Basic) and p.is_number:
                value = p.evalf(20)
                if isinstance(value, sympy.Float) and value.is_finite:
                    out.append(value)
        except (ArithmeticError, TypeError, ValueError):  # 0.0/0.0 and kin: not a number to compare
            continue
    return out


def _right_sides(parsed: list, other: list) -> list:
    """``parsed`` with each equation as its right-hand side when ``other`` holds none, as math-verify compares an
    equation with a value (``r = 3.3 \\times 10^{12}`` against ``3.3e12``)."""
    if any(isinstance(o, sympy.Eq) for o in other):
        return parsed
    return [p.rhs if isinstance(p, sympy.Eq) else p for p in parsed]


def numbers_agree(gold: list, pred: list) -> bool:
    """Whether a match math-verify found may stand: True unless both sides are real numbers of which no gold and
    answer pair agrees to :data:`REL_TOL` relative to the larger (the module docstring's small-number rule); an
    equation on one side is its right-hand side (:func:`_right_sides`)."""
    golds, preds = _real_values(_right_sides(gold, pred)), _real_values(_right_sides(pred, gold))
    if not golds or not preds:
        return True
    return any(abs(g - p) <= REL_TOL * max(abs(g), abs(p)) for g in golds for p in preds)


@dataclass(frozen=True)
class Measured:
    """A gold given to its significant figures (e-notation): its exact value and half a unit in its last place."""

    value: sympy.Rational
    half_unit: sympy.Rational
    figures: int  # significant figures compared (at least MIN_SIG_FIGS)


def measured(gold: str) -> Measured | None:
    """The gold as a measured quantity when it is one number in e-notation (``3.3e12``, ``-4.6E-24``), else None.

    Its significant figures are the mantissa's digits without leading zeros (``1.70e4``: 3), at least
    :data:`MIN_SIG_FIGS`. An exact gold (``0.5``, ``\\frac{1}{2}``, ``3.3 \\times 10^{12}``) is never measured.
    """
    match = _E_NOTATION.fullmatch(gold)
    if match is None:
        return None
    number = Decimal(match.group(1))
    if not number:
        return None
    digits = number.as_tuple().digits
    figures = max(len(digits) - next(i for i, d in enumerate(digits) if d), MIN_SIG_FIGS)
    last = number.adjusted() - figures + 1  # the exponent of the last significant figure compared
    return Measured(sympy.Rational(str(number)), sympy.Rational(1, 2) * sympy.Rational(10) ** last, figures)


def agree_at_figures(gold: Measured, pred: list) -> bool:
    """Whether a real number of ``pred`` rounds to the measured gold at its significant figures: within half a unit
    in the gold's last place (ties included, whatever the rounding rule); an equation is read by its right-hand side
    (``r = 3.275 \\times 10^{12}``)."""
    slack = gold.half_unit * (1 + sympy.Rational(1, 10**12))  # the answer's value is read at 20 digits
    return any(abs(p - gold.value) <= slack for p in _real_values(_right_sides(pred, [])))


def _parse_unbounded(text: str) -> list:
    return parse(text, LATEX_AND_EXPR, parsing_timeout=None)


@dataclass(frozen=True)
class Gold:
    """A gold as prepared once: math-verify's reading (all alternatives concatenated) and how it was read."""

    parsed: list
    text_only: bool  # math-verify read no value: compared as normalised text (reported)
    rules: tuple[str, ...]  # the rules above that applied ("percent", "python-number", "subscript-E", ...)
    measured: Measured | None = None  # an e-notation gold: also matched at its significant figures


def prepare_gold(gold: str) -> Gold:
    """Read one gold with no time bound (module docstring). ``[]`` parsed and ``text_only`` for a blank gold."""
    parsed: list = []
    rules: tuple[str, ...] = ()
    alts = [a.strip() for a in gold.split(ALT_SEP)] if ALT_SEP in gold else [gold]
    for alt in alts:
        got, used = read(alt, _parse_unbounded)
        parsed += got
        rules += tuple(r for r in used if r not in rules)
    if len(alts) > 1:
        rules += ("alternatives",)
    figures = measured(gold) if len(alts) == 1 else None
    if figures is not None:
        rules += ("significant-figures",)
    return Gold(parsed=parsed, text_only=not readable(parsed), rules=rules, measured=figures)


@dataclass
class GoldTable:
    """Golds prepared once (no time bound), keyed by gold string; what could not be read is listed, not hidden."""

    golds: dict[str, Gold] = field(default_factory=dict)

    def add(self, golds: Iterable[str]) -> GoldTable:
        for gold in golds:
            if isinstance(gold, str) and gold not in self.golds and not PLAIN_INT.fullmatch(gold.strip()):
                self.golds[gold] = prepare_gold(gold)
        return self

    def get(self, gold: str) -> Gold | None:
        return self.golds.get(gold)

    @property
    def text_only(self) -> list[str]:
        """Golds math-verify cannot read: compared as normalised text."""
        return [g for g, p in self.golds.items() if p.text_only]

    @property
    def rewritten(self) -> list[str]:
        return [g for g, p in self.golds.items() if p.rules and not p.text_only]

    def summary(self) -> str:
        text = self.text_only
        shown = "; ".join(repr(g if len(g) <= 40 else g[:37] + "...") for g in text[:3]) + ("; ..." if len(text) > 3 else "")
        return (f"golds: {len(self.golds)} prepared, {len(self.rewritten)} read by gdro's rules, {len(text)} "
                f"compared as normalised text" + (f" ({shown})" if text else ""))

    def merged(self, other: GoldTable) -> GoldTable:
        return GoldTable({**self.golds, **other.golds})


def prepare_golds(golds: Iterable[Any]) -> GoldTable:
    """A :class:`GoldTable` of ``golds`` (plain integers, which need no preparation, are left out)."""
    return GoldTable().add(golds)


__all__ = [
    "ALT_SEP",
    "Gold",
    "GoldTable",
    "Measured",
    "agree_at_figures",
    "join_digit_groups",
    "measured",
    "normalize_text",
    "numbers_agree",
    "prepare_gold",
    "prepare_golds",
    "read",
    "readable",
    "rewrite_numbers",
    "split_percent",
    "units_as_text",
]
