"""math-verify's verdict as a TRL-style reward function (gdro.grading.functions): ``reward=functions``' default entry,
so that a run with your own functions instead of ``reward=math-verify`` keeps a correctness to start from.

``math_verified(prompts, completions, answer, **columns)``: 1.0 where the completion's last ``\\boxed{}`` verifies
against ``answer`` (the row's gold; math-verify's rules and time bound, ``reward=math-verify``'s defaults, without
``require_eos``: a reward function is not told whether a completion finished), 0.0 where it does not, None where the
row has no gold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gdro.grading.rewards import MathVerifyReward

__all__ = ["math_verified"]

_REWARD: list[MathVerifyReward] = []  # one per process, made on first use (its caches are kept between calls)


def math_verified(prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[Any] | None = None,
                  **columns: Any) -> list[float | None]:
    """1.0 / 0.0 per completion by math-verify against ``answer``; None where there is no gold (module docstring)."""
    if not _REWARD:
        _REWARD.append(MathVerifyReward(require_eos=False))
    texts = [c[-1].get("content", "") if isinstance(c, list) and c else c for c in completions]
    golds = list(answer) if answer is not None else [None] * len(texts)
    out: list[float | None] = [None] * len(texts)
    rows = [i for i, g in enumerate(golds) if g is not None and str(g).strip()]
    if rows:
        scored = _REWARD[0].score([str(texts[i]) for i in rows], [str(golds[i]) for i in rows], [True] * len(rows))
        for i, ok in zip(rows, scored.correct):
            out[i] = 1.0 if ok else 0.0
    return out
