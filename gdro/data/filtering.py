"""Drop problems whose prompt the rollout engine would reject as too long (``model.max_prompt_len``).

verl-based recipes (the official scripts set a 3200-token prompt limit) drop such prompts from the dataset
up front (verl's ``data.filter_overlong_prompts``); without a filter one long prompt stops a run at the step
that samples it, because :func:`gdro.data.prompts.encode_prompts` raises on it. Lengths are counted by that
very function (chat template as one user turn with the generation prompt; special tokens only without a
template), so a kept prompt is exactly one the engine accepts.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gdro.common.interfaces import Problem
from gdro.data.prompts import encode_prompts

_CHUNK = 1024  # prompts tokenised per call: bounds the memory of one batch of token ids


def prompt_lengths(prompts: Sequence[str], tokenizer, *, use_chat_template: bool) -> list[int]:
    """The number of prompt tokens the rollout engine feeds the model for each prompt."""
    lengths: list[int] = []
    for start in range(0, len(prompts), _CHUNK):
        ids = encode_prompts(
            tokenizer,
            prompts[start : start + _CHUNK],
            use_chat_template=use_chat_template,
            max_prompt_len=sys.maxsize,
        )
        lengths += [len(row) for row in ids]
    return lengths


def drop_long_prompts(
    problems: Sequence[Problem], tokenizer, *, max_prompt_len: int, use_chat_template: bool
) -> tuple[list[Problem], int]:
    """The problems whose encoded prompt has at most ``max_prompt_len`` tokens (in order) and how many were
    dropped."""
    if max_prompt_len < 1:
        raise ValueError(f"max_prompt_len must be >= 1, got {max_prompt_len}")
    lengths = prompt_lengths([p.prompt for p in problems], tokenizer, use_chat_template=use_chat_template)
    kept = [p for p, n in zip(problems, lengths, strict=True) if n <= max_prompt_len]
    return kept, len(problems) - len(kept)


__all__ = ["drop_long_prompts", "prompt_lengths"]
