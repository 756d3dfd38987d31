"""Rollout allocators: how many rollouts each prompt of a step receives.

``FixedAllocator`` is GRPO's constant group size. Rollout-GDRO and the square-root allocator
(issue #4) plug in here with the same interface and may give every prompt a different count.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class FixedAllocator:
    """Every prompt gets ``n`` rollouts (GRPO's group size)."""

    def __init__(self, n: int):
        if n < 1:
            raise ValueError(f"n must be >= 1 rollout per prompt, got {n}")
        self.n = n

    def allocate(self, num_prompts: int, bins: np.ndarray | None = None) -> np.ndarray:
        """Per-prompt rollout counts for a step of ``num_prompts`` prompts (``bins``: their difficulty bins)."""
        return np.full(num_prompts, self.n, dtype=np.int64)

    def update(self, **_: Any) -> None:
        """A fixed allocation does not adapt."""

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = int(state["n"])
