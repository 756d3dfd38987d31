"""What the per-prompt allocators share (``allocator=knapsack``, ``allocator=zero-variance``): each prompt gets its own
n in [n_min, n_max] from its history in the classifier, so they keep no state of their own; a step may allocate in
several rounds (``filter=dynamic``), and its metrics cover them all, among them ``gdro/rollouts/<bin>``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gdro.common.interfaces import BinSpec, StepFeedback
from gdro.controllers.budget import check_budget_feasible

__all__ = ["PerPromptAllocator"]


class PerPromptAllocator:
    """Base of the per-prompt allocators: the arm bounds and their checks, the step's rounds of (bins, n, a per-prompt
    quantity of the subclass, n̄), and the mean rollouts per prompt of each bin. Stateless between steps."""

    def __init__(self, n_min: int, n_max: int):
        check_budget_feasible(n_min, n_min, n_max)  # validates n_min >= 1 and n_min <= n_max
        self.n_min, self.n_max = int(n_min), int(n_max)
        self.labels: list[str] = []
        self._rounds: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []  # this step's (bins, n, extra, n̄)
        self._done = False  # set by update: the next allocate starts a new step

    def bind(self, bins: BinSpec) -> None:
        self.labels = list(bins.labels)

    def check_budget(self, n_bar: int) -> None:
        check_budget_feasible(n_bar, self.n_min, self.n_max)

    @staticmethod
    def _inputs(ids: np.ndarray, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A round's prompt ids and bins as int64 arrays; a step needs at least one prompt."""
        ids, bins = np.asarray(ids, dtype=np.int64), np.asarray(bins, dtype=np.int64)
        if len(ids) < 1:
            raise ValueError("a step needs at least one prompt")
        return ids, bins

    def _keep(self, bins: np.ndarray, n: np.ndarray, extra: np.ndarray, n_bar: int) -> np.ndarray:
        """Record a round of the step (the first after ``update`` starts a new step); returns ``n``."""
        if self._done:
            self._rounds, self._done = [], False
        self._rounds.append((bins, n, extra, int(n_bar)))
        return n

    def _step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The step's rounds concatenated: bins, n, the subclass's quantity and n̄, one entry per prompt."""
        bins, n, extra = (np.concatenate([r[i] for r in self._rounds]) for i in range(3))
        return bins, n, extra, np.concatenate([np.full(len(r[0]), r[3]) for r in self._rounds])

    def _rollouts_per_bin(self, bins: np.ndarray, n: np.ndarray) -> dict[str, float]:
        """``gdro/rollouts/<bin>``: the mean rollouts per prompt of each bin (the mechanism table's key)."""
        labels = [self.labels[b] if b < len(self.labels) else str(b) for b in np.unique(bins)]
        return {f"gdro/rollouts/{lab}": float(n[bins == b].mean()) for lab, b in zip(labels, np.unique(bins))}

    def update(self, feedback: StepFeedback) -> None:
        """Stateless: the history lives in the classifier; the step's rounds are kept for ``metrics``."""
        self._done = True

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""
