"""The oracle control: uniform sampling over the toy generator's difficulty *levels*.

This sampler reads ``Problem.level`` — the generator's label that the GDRO controllers never see. It exists
only as a control for experiments on the synthetic task (toy-task notes: on a static task, "train more on
the hard tail" explains much of what difficulty-aware methods gain). Each slot draws a level uniformly among
the levels present in the pool, then a prompt uniformly within that level (with replacement across steps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class OracleLevelSampler:
    """Uniform over generator levels, then uniform within a level. Reads the label: a control, not a method."""

    def __init__(self) -> None:
        self._members: list[np.ndarray] = []
        self._levels: np.ndarray = np.zeros(0, dtype=np.int64)
        self._drawn = np.zeros(0, dtype=np.int64)

    def bind(self, num_prompts: int, num_bins: int | None = None, labels: Sequence[str] | None = None) -> None:
        if num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
        self._n = num_prompts

    def bind_levels(self, levels: Sequence[int]) -> None:
        """The generator level of every prompt in the pool (the label the controllers never read)."""
        lv = np.asarray(levels, dtype=np.int64)
        if len(lv) != self._n:
            raise ValueError(f"levels has {len(lv)} entries for a pool of {self._n} prompts")
        self._levels = np.unique(lv)
        self._members = [np.flatnonzero(lv == v) for v in self._levels]
        self._drawn = np.zeros(len(self._levels), dtype=np.int64)

    def sample(self, count: int, rng: np.random.Generator, classifier: Any = None) -> np.ndarray:
        if not self._members:
            raise RuntimeError("OracleLevelSampler.bind_levels(levels) must be called before sample()")
        which = rng.integers(0, len(self._members), size=count)
        self._last_levels = which
        np.add.at(self._drawn, which, 1)
        return np.array([self._members[w][rng.integers(0, len(self._members[w]))] for w in which], dtype=np.int64)

    def loss_weights(self, bins: np.ndarray | None, group_index: np.ndarray) -> np.ndarray:
        return np.ones(len(group_index), dtype=np.float64)

    def update(self, **_: Any) -> None:
        """The oracle does not adapt."""

    def metrics(self) -> dict[str, float]:
        total = max(int(self._drawn.sum()), 1)
        return {f"oracle/level_share/{int(v)}": float(c / total) for v, c in zip(self._levels, self._drawn)}

    def state_dict(self) -> dict[str, Any]:
        return {"drawn": self._drawn.tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._drawn = np.asarray(state["drawn"], dtype=np.int64)
