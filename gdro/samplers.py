"""Prompt samplers: which prompts a training step uses.

``UniformSampler`` is GRPO's data loader: shuffled epochs without replacement. Prompt-GDRO
(issue #3) plugs in here with the same interface.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class UniformSampler:
    """Uniform over prompts: a fresh permutation each epoch, consumed in order (a shuffled loader)."""

    def __init__(self, shuffle: bool = True):
        self.shuffle = shuffle
        self.num_prompts = 0
        self._order = np.zeros(0, dtype=np.int64)
        self._pos = 0
        self.epoch = 0

    def bind(self, num_prompts: int) -> None:
        """Attach to a prompt pool of ``num_prompts`` items (before the first ``sample``)."""
        if num_prompts < 1:
            raise ValueError(f"the training split is empty (num_prompts={num_prompts})")
        self.num_prompts = num_prompts
        self._order = np.zeros(0, dtype=np.int64)
        self._pos = 0
        self.epoch = 0

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` prompt indices; an epoch boundary inside a step starts the next permutation."""
        if self.num_prompts == 0:
            raise RuntimeError("UniformSampler.bind(num_prompts) must be called before sample()")
        out = []
        while len(out) < count:
            if self._pos >= len(self._order):
                self._order = rng.permutation(self.num_prompts) if self.shuffle else np.arange(self.num_prompts)
                self._pos = 0
                self.epoch += 1
            take = min(count - len(out), len(self._order) - self._pos)
            out.extend(self._order[self._pos : self._pos + take].tolist())
            self._pos += take
        return np.asarray(out, dtype=np.int64)

    def loss_weights(self, group_index: np.ndarray) -> np.ndarray:
        """Per-rollout multipliers on the advantages: all ones for plain GRPO."""
        return np.ones(len(group_index), dtype=np.float64)

    def update(self, **_: Any) -> None:
        """Uniform sampling does not adapt."""

    def metrics(self) -> dict[str, float]:
        return {"data/epoch": float(self.epoch)}

    def state_dict(self) -> dict[str, Any]:
        return {"order": self._order.copy(), "pos": self._pos, "epoch": self.epoch, "num_prompts": self.num_prompts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._order = np.asarray(state["order"], dtype=np.int64)
        self._pos = int(state["pos"])
        self.epoch = int(state["epoch"])
        self.num_prompts = int(state["num_prompts"])
