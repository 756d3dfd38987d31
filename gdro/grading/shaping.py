"""Reward shaping beside correctness (``reward.format_weight``, ``reward.overlong_buffer``): pure functions of what a
completion looks like, never of its answer's value.

* **Format term** (:func:`format_flags`): a completion is *formatted* when it finished (the end token, where the reward
  requires it) and its graded window ends the answer in a complete, non-empty ``\\boxed{}`` with no number after it
  (:func:`gdro.grading.answers.final_box`). The reward adds ``format_weight`` to a formatted completion, right or
  wrong (TRL's ``reward_funcs`` with ``reward_weights``: a format function beside the accuracy one). The verdict a
  controller reads (``RewardBatch.correct``) is correctness alone, so bins and pass rates do not move with it.
* **Soft overlong punishment** (DAPO, arXiv 2503.14476, Eq. 13; verl ``overlong_buffer``, TRL
  ``get_soft_overlong_punishment``): with ``L_max`` the length limit and ``L_cache`` the buffer,

      R_length(y) = 0                               if |y| <= L_max - L_cache
                    ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
                    -1                              if |y| > L_max

  added to the reward times ``overlong_factor`` (verl's ``penalty_factor``; 1 in the paper). ``|y|`` counts the
  completion's tokens, its end token included (as verl's ``valid_response_length`` and TRL's completion ids do).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gdro.grading.answers import final_box, tail

__all__ = ["format_flags", "overlong_penalty"]


def format_flags(texts: Sequence[str], finished: Sequence[bool], *, tail_chars: int | None,
                 require_eos: bool) -> np.ndarray:
    """``(N,)`` bool: which completions are in the rewarded format (module docstring), read in the window
    ``tail_chars`` the grader reads."""
    return np.array([(done or not require_eos) and final_box(tail(text, tail_chars))
                     for text, done in zip(texts, finished)], dtype=bool)


def overlong_penalty(lengths: Sequence[int] | np.ndarray, *, max_tokens: int, buffer: int,
                     factor: float = 1.0) -> np.ndarray:
    """``(N,)`` float64: DAPO's Eq. 13 times ``factor`` for completions of ``lengths`` tokens, limit ``max_tokens``
    (L_max) and buffer ``buffer`` (L_cache, 0 < L_cache < L_max)."""
    if not 0 < buffer < max_tokens:
        raise ValueError(f"the overlong buffer must be > 0 and < the length limit {max_tokens}, got {buffer}")
    n = np.asarray(lengths, dtype=np.float64)
    expected = float(max_tokens - buffer)
    ramp = (expected - n) / float(buffer)
    out = np.where(n <= expected, 0.0, np.where(n <= max_tokens, ramp, -1.0))
    return out * float(factor)
