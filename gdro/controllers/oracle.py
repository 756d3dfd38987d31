"""The oracle control: uniform sampling over the toy generator's difficulty *levels*.

This sampler reads ``Problem.level`` — the generator's label that the GDRO controllers never see. It exists
only as a control for experiments on the synthetic task (toy-task notes: on a static task, "train more on
the hard tail" explains much of what difficulty-aware methods gain). Each slot draws a level uniformly among
the levels present in the pool, then a prompt uniformly within that level (with replacement across steps).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gdro.common.interfaces import BinSpec, DifficultyClassifier, PromptPool, StepFeedback


class OracleLevelSampler:
    """Uniform over generator levels, then uniform within a level. Reads the label: a control, not a method."""

    def __init__(self) -> None:
        self._members: list[np.ndarray] = []
        self._levels: np.ndarray = np.zeros(0, dtype=np.int64)
        self._drawn = np.zeros(0, dtype=np.int64)

    reads_labels = True  # the one component given the generator's labels (PromptPool.levels)

    def bind(self, pool: PromptPool, bins: BinSpec | None = None) -> None:
        """The pool with the generator level of every prompt (the label the controllers never read)."""
        if pool.levels is None:
            raise ValueError("OracleLevelSampler needs the pool's levels (PromptPool.levels)")
        lv = np.asarray(pool.levels, dtype=np.int64)
        self._levels = np.unique(lv)
        self._members = [np.flatnonzero(lv == v) for v in self._levels]
        self._drawn = np.zeros(len(self._levels), dtype=np.int64)

    def sample(self, count: int, rng: np.random.Generator, classifier: DifficultyClassifier | None = None
               ) -> np.ndarray:
        if not self._members:
            raise RuntimeError("OracleLevelSampler.bind(pool) must be called before sample()")
        which = rng.integers(0, len(self._members), size=count)
        self._last_levels = which
        np.add.at(self._drawn, which, 1)
        return np.array([self._members[w][rng.integers(0, len(self._members[w]))] for w in which], dtype=np.int64)

    def loss_weights(self, bins: np.ndarray | None, group_index: np.ndarray) -> np.ndarray:
        return np.ones(len(group_index), dtype=np.float64)

    def update(self, feedback: StepFeedback) -> None:
        """The oracle does not adapt."""

    def metrics(self) -> dict[str, float]:
        total = max(int(self._drawn.sum()), 1)
        return {f"oracle/level_share/{int(v)}": float(c / total) for v, c in zip(self._levels, self._drawn)}

    def state_dict(self) -> dict[str, Any]:
        return {"drawn": self._drawn.tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._drawn = np.asarray(state["drawn"], dtype=np.int64)
