"""The hyperparameters of :class:`~gdro.grading.rewards.MathVerifyReward` and their checks (:class:`RewardConfig`):
what a verdict is worth, which window and answer mode it reads, its time bound and caches, and the shaping terms
beside correctness.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gdro.grading.deadline import MAX_TIMEOUT_S

__all__ = ["ANSWER_MODES", "EVAL_BOXES", "RewardConfig"]

ANSWER_MODES = ("boxed", "any", "number")
EVAL_BOXES = ("last", "join")


@dataclass(frozen=True)
class RewardConfig:
    """Hyperparameters of :class:`MathVerifyReward` (defaults: conf/reward/math-verify.yaml)."""

    correct: float = 1.0  # reward of a verified answer (paper: +1)
    incorrect: float = 0.0  # reward of anything else (paper: -1)
    require_eos: bool = True  # finished=False (length limit hit) scores as incorrect, counted as truncated
    tail_chars: int | None = 300  # training reads only the last N characters (official code); None = all
    eval_tail_chars: int | None = None  # evaluation's window (for_eval); None = the whole completion
    eval_boxes: str = "last"  # evaluation: "last" box; "join": boxes joined when the gold holds several items
    timeout_s: float = 1.0  # per parse and per verify (main thread only; gdro.grading.deadline)
    answer_mode: str = "boxed"  # "boxed": last \boxed{...}; "any": math-verify's LaTeX + expr extraction;
    # "number": the last number written (no expression evaluated: "47 + 56" reads as 56, never as 103)
    cache_size: int = 65_536  # LRU entries of (answer text, gold) -> result, and of parsed golds
    fast_path: bool = True  # boxed answer == gold string: correct; unequal plain integers: incorrect (no math-verify)
    # shaping beside correctness (gdro.grading.shaping); training only: for_eval's reward scores correctness alone
    format_weight: float = 0.0  # added to a completion that finished with its answer in a final \boxed{} (0: off)
    overlong_buffer: int = 0  # L_cache of DAPO's soft overlong punishment (Eq. 13); 0: off
    overlong_factor: float = 1.0  # the punishment's scale (verl penalty_factor)
    overlong_max_tokens: int | None = None  # L_max: the length limit (conf: ${model.max_new_tokens})
    # a user's reward functions beside math-verify (gdro.grading.functions): [{fn: "pkg.mod:f", weight: w, name: n}];
    # checked and imported here, held as FunctionSpecs; () = none (nothing changes)
    functions: Sequence[Mapping[str, Any]] = ()

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
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout_s must be > 0 and <= {MAX_TIMEOUT_S:g} s, got {self.timeout_s}")
        if self.answer_mode not in ANSWER_MODES:
            raise ValueError(f"answer_mode must be one of {ANSWER_MODES}, got {self.answer_mode!r}")
        if self.eval_boxes not in EVAL_BOXES:
            raise ValueError(f"eval_boxes must be one of {EVAL_BOXES}, got {self.eval_boxes!r}")
        if not self.cache_size > 0:
            raise ValueError(f"cache_size must be > 0, got {self.cache_size}")
        for key in ("format_weight", "overlong_factor"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{key} must be a finite number >= 0, got {value!r}")
        if isinstance(self.overlong_buffer, bool) or not isinstance(self.overlong_buffer, int) or self.overlong_buffer < 0:
            raise ValueError(f"overlong_buffer must be an integer >= 0 (0: off), got {self.overlong_buffer!r}")
        if self.overlong_buffer:
            limit = self.overlong_max_tokens
            if isinstance(limit, bool) or not isinstance(limit, int) or not limit > self.overlong_buffer:
                raise ValueError(f"overlong_buffer={self.overlong_buffer} needs overlong_max_tokens (the length limit, "
                                 f"model.max_new_tokens) greater than it, got {limit!r}")
        from gdro.grading.functions import parse_functions

        object.__setattr__(self, "functions", parse_functions(self.functions, beside_math_verify=True))

    @property
    def shaped(self) -> bool:
        """Whether the reward adds anything to correctness (a format term or an overlong punishment)."""
        return self.format_weight != 0 or self.overlong_buffer != 0
