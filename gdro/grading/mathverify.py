"""math-verify as the reward runs it: its extraction configs (:data:`LATEX_ONLY` for ``answer_mode="boxed"``,
:data:`LATEX_AND_EXPR` otherwise), its once-per-process warm-up before any bounded call (:func:`warm_up`), and its
"Timeout is disabled" notice dropped (gdro bounds the time itself: :mod:`gdro.grading.deadline`).
"""

from __future__ import annotations

import logging

from math_verify import ExprExtractionConfig, LatexExtractionConfig

__all__ = ["LATEX_AND_EXPR", "LATEX_ONLY", "warm_up"]

logger = logging.getLogger(__name__)


class _DropTimeoutDisabledNotice(logging.Filter):
    """math-verify warns once that its own timeouts are off; gdro.grading.deadline bounds the time instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledNotice())

LATEX_ONLY = (LatexExtractionConfig(boxed_match_priority=0),)
LATEX_AND_EXPR = (LatexExtractionConfig(), ExprExtractionConfig())


_WARM = False


def warm_up() -> None:
    """Once per process, an unbounded parse and verify of a fixed expression before any bounded one: the first call
    in a process loads math-verify's grammars and sympy. Seen: longer than the time bound, so that the first gold
    needing a parse was scored as bad and its completion as wrong, in one of two runs that were otherwise equal."""
    global _WARM
    if _WARM:
        return
    _WARM = True
    import math_verify

    try:
        math_verify.verify(math_verify.parse("$\\frac{1}{2}$", LATEX_AND_EXPR, parsing_timeout=None),
                           math_verify.parse("$0.5$", LATEX_AND_EXPR, parsing_timeout=None), timeout_seconds=None)
    except Exception as err:  # noqa: BLE001 (a warm-up only: scoring reports its own errors)
        logger.debug("math-verify warm-up failed: %s", err)
