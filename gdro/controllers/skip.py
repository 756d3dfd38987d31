"""A GRESO-style pre-rollout skip (Zheng et al., arXiv 2506.02177), as an option around any prompt sampler.

GRESO observes that a prompt whose groups had zero reward variance (all correct or all wrong) in recent epochs
is likely to again, and skips it *before* rollout, so no rollouts are spent on it. Here a candidate drawn by the
inner sampler whose latest ``z`` visits in a row were all-equal (``classifier.zero_variance_streak``) is kept with
probability max(``keep_floor``, ``keep_base``ᶻ), so the skip grows with the streak; a prompt with z = 0 (never seen,
or mixed last time) is always kept. Candidates are drawn until ``count`` are accepted or ``max_draws × count`` were
seen; the batch is then filled with the latest skipped candidates, so it always terminates. No extra rollouts.

With ``adapt``, after each step ``keep_base`` moves by ``adapt_step`` toward a batch whose share of all-equal groups
is ``target_zero_var`` (down when the share is above it, so more is skipped), within [``keep_floor``, 1].

What matches GRESO and what differs is in docs/allocation.md: GRESO keeps two exploration probabilities (easy and
hard prompts) and its floor is not stated; here one base and an explicit floor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gdro.common.interfaces import BinSpec, DifficultyClassifier, PromptPool, PromptSampler, StepFeedback

__all__ = ["GresoSkip", "NoSkip", "PreRolloutSkip", "keep_probability"]


def keep_probability(streak: np.ndarray, keep_base: float, keep_floor: float) -> np.ndarray:
    """max(floor, base^z) per prompt: 1 for z = 0."""
    return np.maximum(keep_floor, keep_base ** np.asarray(streak, dtype=np.float64))


class NoSkip:
    """No pre-rollout skip (``skip=none``, the default): the sampler as it is."""

    def wrap(self, sampler: PromptSampler) -> PromptSampler:
        return sampler


class GresoSkip:
    """``skip=greso``: wraps the built sampler in a :class:`PreRolloutSkip` with these settings."""

    def __init__(self, keep_base: float = 0.5, keep_floor: float = 0.05, adapt: bool = True,
                 target_zero_var: float = 0.25, adapt_step: float = 0.01, max_draws: int = 20):
        for key, ok, why in (("keep_base", 0 < keep_base <= 1, "must be in (0, 1]"),
                             ("keep_floor", 0 < keep_floor <= keep_base, "must be in (0, keep_base]"),
                             ("target_zero_var", 0 <= target_zero_var <= 1, "must be in [0, 1]"),
                             ("adapt_step", 0 <= adapt_step < 1, "must be in [0, 1)"),
                             ("max_draws", int(max_draws) == max_draws and max_draws >= 1, "must be an integer >= 1")):
            if not ok:
                raise ValueError(f"{key} {why}, got {locals()[key]!r}")
        self.settings = {"keep_base": float(keep_base), "keep_floor": float(keep_floor), "adapt": bool(adapt),
                         "target_zero_var": float(target_zero_var), "adapt_step": float(adapt_step),
                         "max_draws": int(max_draws)}

    def wrap(self, sampler: PromptSampler) -> PromptSampler:
        return PreRolloutSkip(sampler, **self.settings)


class PreRolloutSkip:
    """A prompt sampler that skips prompts of long zero-variance streaks before rollout (module docstring)."""

    def __init__(self, inner: PromptSampler, keep_base: float = 0.5, keep_floor: float = 0.05, adapt: bool = True,
                 target_zero_var: float = 0.25, adapt_step: float = 0.01, max_draws: int = 20):
        self.inner = inner
        self.keep_base, self.keep_floor, self.adapt = keep_base, keep_floor, adapt
        self.target_zero_var, self.adapt_step, self.max_draws = target_zero_var, adapt_step, max_draws
        self._skipped = self._drawn = 0  # this step's (over its generation rounds under filter=dynamic)
        self._new_step = True

    @property
    def reads_labels(self) -> bool:
        return self.inner.reads_labels

    def bind(self, pool: PromptPool, bins: BinSpec) -> None:
        self.inner.bind(pool, bins)

    def sample(self, count: int, rng: np.random.Generator, classifier: DifficultyClassifier) -> np.ndarray:
        """``count`` prompt ids from the inner sampler, skipping each with probability 1 − keep_probability."""
        accepted: list[int] = []
        skipped: list[int] = []
        seen = 0
        while len(accepted) < count and seen < self.max_draws * count:
            cand = self.inner.sample(count - len(accepted), rng, classifier)
            seen += len(cand)
            keep = rng.random(len(cand)) < keep_probability(classifier.zero_variance_streak(cand), self.keep_base,
                                                           self.keep_floor)
            accepted += cand[keep].tolist()
            skipped += cand[~keep].tolist()
        short = count - len(accepted)
        if short > 0:  # the draw cap: fill with the latest skipped candidates
            accepted += skipped[len(skipped) - short:]
            skipped = skipped[: len(skipped) - short]
        if self._new_step:
            self._skipped = self._drawn = 0
            self._new_step = False
        self._skipped += len(skipped)
        self._drawn += seen
        return np.asarray(accepted, dtype=np.int64)

    def loss_weights(self, bins: np.ndarray, group_index: np.ndarray) -> np.ndarray:
        return self.inner.loss_weights(bins, group_index)

    def record(self, ids: np.ndarray, correct: np.ndarray, total: np.ndarray) -> None:
        """Groups generated but not trained on (a filter dropped them), for an inner sampler that keeps per-prompt
        history (``record``, e.g. sampler=learnability | mopps); others ignore them."""
        getattr(self.inner, "record", lambda *_: None)(ids, correct, total)

    def update(self, feedback: StepFeedback) -> None:
        """The inner sampler's update; with ``adapt``, keep_base steps toward the target zero-variance share."""
        self.inner.update(feedback)
        self._new_step = True
        if self.adapt and len(feedback.ids):
            c = feedback.n_correct
            zero_var = float(np.mean((c == 0) | (c == feedback.n)))
            step = -self.adapt_step if zero_var > self.target_zero_var else self.adapt_step
            self.keep_base = float(np.clip(self.keep_base + step, self.keep_floor, 1.0))

    def metrics(self) -> dict[str, float]:
        """The inner sampler's, and ``skip/skipped`` (candidates skipped this step), ``skip/drawn``,
        ``skip/keep_base``."""
        return self.inner.metrics() | {"skip/skipped": float(self._skipped), "skip/drawn": float(self._drawn),
                                       "skip/keep_base": self.keep_base}

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "keep_base": self.keep_base}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state["inner"])
        self.keep_base = float(state["keep_base"])
