"""Per-prompt selection from the field: learnability sampling (LILO) and MoPPS, as prompt samplers.

Both keep a history per prompt (pool index) of its own rollouts, draw a *candidate pool* of ``candidate_ratio × count``
prompts from shuffled epochs over the training pool, and keep the ``count`` candidates that score best:

* :class:`LearnabilitySampler` (``sampler=learnability``; Foster & Foerster, arXiv 2502.12272, §4 Alg. 2): the
  ``count`` candidates of highest learnability p̂(1 − p̂), p̂ each prompt's success rate over its latest ``window``
  visits; a never-seen prompt counts as p̂ = ``unseen_p``.
* :class:`MoPPSSampler` (``sampler=mopps``; Qu et al., arXiv 2507.04632, code thu-rllab/MoPPS): a Beta(α, β)
  posterior per prompt, updated with a decay toward the prior; one Thompson sample per candidate, and the ``count``
  candidates whose sample is nearest the target rate (``topk``), or inside [lower, upper] (``threshold``).

Every advantage multiplier is 1. The formulas, the reading of the official MoPPS code and every difference from it
are in docs/prompt-selection.md. Randomness comes only from the ``rng`` passed to :meth:`sample`, and
``state_dict()`` holds everything a step reads, so a resumed run draws what an uninterrupted one draws.

Groups that were generated but not trained on (``filter=dynamic`` drops the all-correct and all-wrong ones) are
history too: the trainer passes them to :meth:`record` before :meth:`update`, as it does for the classifier.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from gdro.common.interfaces import BinSpec, DifficultyClassifier, PromptPool, StepFeedback

__all__ = ["LearnabilitySampler", "MoPPSSampler", "beta_update", "learnability", "select_threshold", "select_top",
           "thompson_distance"]

STRATEGIES = ("topk", "threshold")


# ------------------------------------------------------------------------------------------------ pure math
def learnability(hits: np.ndarray, total: np.ndarray, unseen_p: float = 0.5) -> np.ndarray:
    """p̂(1 − p̂) with p̂ = hits / total (LILO §3: the variance of a Bernoulli success, its "learnability"), computed
    as hits·(total − hits) / total² so that p̂ and 1 − p̂ score exactly alike; ``total == 0`` (never seen):
    unseen_p(1 − unseen_p)."""
    hits, total = np.asarray(hits, dtype=np.float64), np.asarray(total, dtype=np.float64)
    seen = total > 0
    safe = np.where(seen, total, 1.0)
    return np.where(seen, hits * (total - hits) / (safe * safe), unseen_p * (1.0 - unseen_p))


def select_top(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest ``scores``; ties keep their order (callers pass candidates in random order, so
    ties are broken uniformly at random). LILO Alg. 2: "train on the top-|B|"."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]


def beta_update(alpha: float, beta: float, successes: float, failures: float, decay: float = 1.0,
                prior_alpha: float = 1.0, prior_beta: float = 1.0) -> tuple[float, float]:
    """One visit's posterior update with forgetting (MoPPS, arXiv 2507.04632 §4.1; official ``PosteriorSampler.train``):
    α ← λα + (1 − λ)α₀ + s,  β ← λβ + (1 − λ)β₀ + f. λ = 1 is the exact conjugate update of a Beta prior with
    s successes and f failures; λ < 1 shrinks older evidence toward the prior Beta(α₀, β₀)."""
    return (decay * alpha + (1.0 - decay) * prior_alpha + successes,
            decay * beta + (1.0 - decay) * prior_beta + failures)


def thompson_distance(samples: np.ndarray, target: float) -> np.ndarray:
    """(γ̂ − γ*)², the squared distance of each Thompson sample γ̂ ~ Beta(α, β) to the target rate γ* (MoPPS Eq. for
    Top-B selection: keep the B candidates of smallest distance)."""
    return (np.asarray(samples, dtype=np.float64) - target) ** 2


def select_threshold(samples: np.ndarray, k: int, lower: float, upper: float, rng: np.random.Generator) -> np.ndarray:
    """MoPPS's ``threshold`` strategy: ``k`` candidates drawn uniformly among those with lower ≤ γ̂ ≤ upper when there are
    at least ``k``; otherwise every in-range one first, then the nearest to the interval."""
    samples = np.asarray(samples, dtype=np.float64)
    inside = np.flatnonzero((samples >= lower) & (samples <= upper))
    if len(inside) >= k:
        return rng.permutation(inside)[:k]
    gap = np.maximum(lower - samples, 0.0) + np.maximum(samples - upper, 0.0)
    return np.argsort(gap, kind="stable")[:k]


# ------------------------------------------------------------------------------------------------ shared machinery
class _CandidateSelector:
    """Candidate pools from shuffled epochs, distinct prompts within a step, per-step ``select/…`` metrics, state.

    A subclass scores candidates (``_choose``) and observes visits (``_observe``)."""

    reads_labels = False

    def __init__(self, candidate_ratio: float):
        if not (math.isfinite(candidate_ratio) and candidate_ratio >= 1):
            raise ValueError(f"candidate_ratio must be >= 1 (the candidate pool holds candidate_ratio × the prompts "
                             f"drawn), got {candidate_ratio}")
        self.candidate_ratio = float(candidate_ratio)
        self.num_prompts = 0

    def bind(self, pool: PromptPool, bins: BinSpec | None = None) -> None:
        """Attach to a prompt pool (before the first ``sample``) and clear all history; bins are unused."""
        n = len(pool)
        self.num_prompts = n
        self._order, self._pos, self.epoch = np.zeros(0, dtype=np.int64), 0, 0
        self._drawn = np.zeros(n, dtype=bool)  # prompts drawn in the current step (filter rounds, skip redraws)
        self._new_step = True
        self._batch: dict[str, list[float]] = {}
        self._reset_history(n)

    def sample(self, count: int, rng: np.random.Generator, classifier: DifficultyClassifier | None = None
               ) -> np.ndarray:
        """``count`` prompt ids, distinct within a step while the pool allows (each round of ``filter=dynamic`` and
        each redraw of ``skip=greso`` gets prompts not yet drawn this step)."""
        if self.num_prompts == 0:
            raise RuntimeError(f"{type(self).__name__}.bind(pool, bins) must be called before sample()")
        if self._new_step:
            self._batch, self._new_step = {}, False
        out: list[int] = []
        while len(out) < count:
            k = min(count - len(out), self.num_prompts)
            cand = self._candidates(max(k, math.ceil(self.candidate_ratio * k - 1e-9)), rng)
            fresh = cand[~self._drawn[cand]]
            cand = fresh if len(fresh) >= k else cand
            self._tally("candidates", [float(len(cand))])
            chosen = cand[self._choose(cand, k, rng)]
            self._drawn[chosen] = True
            out += chosen.tolist()
        return np.asarray(out, dtype=np.int64)

    def _candidates(self, m: int, rng: np.random.Generator) -> np.ndarray:
        """The next ``m`` prompts (at most the pool) of a shuffled epoch; an epoch with fewer left starts the next
        (the rest is dropped, as a loader with drop_last=True does)."""
        m = min(m, self.num_prompts)
        if self._pos + m > len(self._order):
            self._order, self._pos = rng.permutation(self.num_prompts).astype(np.int64), 0
            self.epoch += 1
        out = self._order[self._pos: self._pos + m]
        self._pos += m
        return out

    def _tally(self, key: str, values: Any) -> None:
        self._batch.setdefault(key, []).extend(float(v) for v in values)

    def loss_weights(self, bins: np.ndarray | None, group_index: np.ndarray) -> np.ndarray:
        """All ones: these samplers choose prompts, they do not reweight them."""
        return np.ones(len(group_index), dtype=np.float64)

    def record(self, ids: np.ndarray, correct: np.ndarray, total: np.ndarray) -> None:
        """One visit per entry: ``correct`` of ``total`` rollouts right (groups generated but not trained on)."""
        ids, correct, total = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (ids, correct, total))
        if not len(ids) == len(correct) == len(total):
            raise ValueError(f"ids, correct and total must have one entry each, got {len(ids)}, {len(correct)}, "
                             f"{len(total)}")
        if len(ids) and (ids.min() < 0 or ids.max() >= self.num_prompts):
            raise ValueError(f"ids must lie in [0, {self.num_prompts}), got [{ids.min()}, {ids.max()}]")
        if np.any(total < 0) or np.any(correct < 0) or np.any(correct > total):
            raise ValueError("each visit needs 0 <= correct <= total")
        for i, c, n in zip(ids.tolist(), correct.tolist(), total.tolist()):
            if n > 0:  # a prompt given no rollouts was not visited
                self._observe(i, c, n)

    def update(self, feedback: StepFeedback) -> None:
        """Each trained prompt's visit (its correct rollouts of its ``n``); the next step draws afresh."""
        self._before_update(feedback)
        self.record(feedback.ids, feedback.n_correct, feedback.n)
        self._drawn[:] = False
        self._new_step = True

    def _before_update(self, feedback: StepFeedback) -> None:
        """A hook for metrics that compare a prediction with the step's outcome."""

    def metrics(self) -> dict[str, float]:
        """``select/…``: means over the prompts drawn this step (over all its rounds), ``select/candidates`` (pool
        sizes summed), ``select/seen`` (share of the pool visited so far), ``select/candidate_epoch``."""
        out = {"select/candidate_epoch": float(self.epoch), "select/seen": float(np.mean(self._visits > 0))}
        for key, values in self._batch.items():
            if values:
                out[f"select/{key}"] = float(np.sum(values) if key == "candidates" else np.mean(values))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"num_prompts": self.num_prompts, "order": self._order.copy(), "pos": self._pos, "epoch": self.epoch,
                "drawn": self._drawn.copy(), "new_step": self._new_step, "visits": self._visits.copy(),
                **{k: v.copy() for k, v in self._history().items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.num_prompts = int(state["num_prompts"])
        self._order = np.asarray(state["order"], dtype=np.int64).copy()
        self._pos, self.epoch = int(state["pos"]), int(state["epoch"])
        self._drawn = np.asarray(state["drawn"], dtype=bool).copy()
        self._new_step = bool(state["new_step"])
        self._visits = np.asarray(state["visits"], dtype=np.int64).copy()
        self._batch = {}
        self._load_history(state)

    # subclass hooks
    def _reset_history(self, n: int) -> None:
        raise NotImplementedError

    def _history(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _load_history(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _observe(self, prompt: int, correct: int, total: int) -> None:
        raise NotImplementedError

    def _choose(self, cand: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------ LILO
class LearnabilitySampler(_CandidateSelector):
    """LILO's learnability sampling (arXiv 2502.12272 §4, Alg. 2) on each prompt's own history.

    Each call draws a candidate pool of ``candidate_ratio × count`` prompts (LILO §5: |D| = 4|B|) and keeps the
    ``count`` of highest p̂(1 − p̂), ties at random. LILO measures p̂ on every candidate with N_learnability = 8 fresh
    screening rollouts; here p̂ is the prompt's success rate over its latest ``window`` visits (1: the latest group,
    n̄ rollouts of a recent policy) and costs no rollouts. A never-seen prompt has no estimate: it counts as
    p̂ = ``unseen_p`` (0.5, the largest priority 1/4: every prompt is tried once before it can be passed over).
    """

    def __init__(self, candidate_ratio: float = 4.0, window: int = 1, unseen_p: float = 0.5):
        super().__init__(candidate_ratio)
        if isinstance(window, bool) or int(window) != window or window < 1:
            raise ValueError(f"window must be an integer >= 1 (visits per prompt that p̂ counts), got {window}")
        if not 0 <= unseen_p <= 1:
            raise ValueError(f"unseen_p must be in [0, 1], got {unseen_p}")
        self.window, self.unseen_p = int(window), float(unseen_p)

    def _reset_history(self, n: int) -> None:
        self._hits = np.zeros((n, self.window), dtype=np.int64)  # a ring of each prompt's latest visits
        self._totals = np.zeros((n, self.window), dtype=np.int64)
        self._visits = np.zeros(n, dtype=np.int64)

    def _history(self) -> dict[str, np.ndarray]:
        return {"hits": self._hits, "totals": self._totals}

    def _load_history(self, state: Mapping[str, Any]) -> None:
        self._hits = np.asarray(state["hits"], dtype=np.int64).copy()
        self._totals = np.asarray(state["totals"], dtype=np.int64).copy()
        self.window = self._hits.shape[1]

    def _observe(self, prompt: int, correct: int, total: int) -> None:
        slot = self._visits[prompt] % self.window
        self._hits[prompt, slot], self._totals[prompt, slot] = correct, total
        self._visits[prompt] += 1

    def p_hat(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(correct, total) rollouts of prompts ``ids`` over their latest ``window`` visits (total 0: never seen)."""
        ids = np.asarray(ids, dtype=np.int64)
        return self._hits[ids].sum(axis=1), self._totals[ids].sum(axis=1)

    def priority(self, ids: np.ndarray) -> np.ndarray:
        """p̂(1 − p̂) of prompts ``ids`` (unseen: unseen_p(1 − unseen_p))."""
        return learnability(*self.p_hat(ids), self.unseen_p)

    def _choose(self, cand: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
        hits, totals = self.p_hat(cand)
        prio = learnability(hits, totals, self.unseen_p)
        pick = select_top(prio, k)
        seen = totals[pick] > 0
        self._tally("priority", prio[pick])
        self._tally("candidate_priority", prio)
        self._tally("unseen_share", ~seen)
        self._tally("zero_priority_share", prio[pick] == 0)
        self._tally("p_hat", hits[pick][seen] / totals[pick][seen])
        return pick


# ------------------------------------------------------------------------------------------------ MoPPS
class MoPPSSampler(_CandidateSelector):
    """MoPPS (arXiv 2507.04632): Beta posteriors per prompt and Thompson-sampled selection near a target rate.

    Defaults are the official MATH scripts': prior Beta(1, 1), decay λ = 1 (no forgetting; its countdown and geometry
    scripts use 0.5), target γ* = 0.5, ``topk``, and a candidate pool of ``candidate_ratio`` = 16 × the batch
    (``tasksampler.ts_ratio``: 16 in the MATH scripts, 8 in countdown and geometry; the config file's own default
    is 1.0). Differences from the official code: docs/prompt-selection.md.
    """

    def __init__(self, candidate_ratio: float = 16.0, target: float = 0.5, strategy: str = "topk",
                 lower: float = 0.3, upper: float = 0.7, prior_alpha: float = 1.0, prior_beta: float = 1.0,
                 decay: float = 1.0):
        super().__init__(candidate_ratio)
        if not 0 < target < 1:
            raise ValueError(f"target must be in (0, 1) (a success rate), got {target}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if not 0 <= lower < 1:
            raise ValueError(f"lower must be in [0, 1), got {lower}")
        if not lower < upper <= 1:
            raise ValueError(f"upper must be in (lower={lower}, 1], got {upper}")
        for key, value in (("prior_alpha", prior_alpha), ("prior_beta", prior_beta)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{key} must be > 0 (a Beta prior), got {value}")
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1] (1: no forgetting), got {decay}")
        self.target, self.strategy, self.lower, self.upper = float(target), strategy, float(lower), float(upper)
        self.prior_alpha, self.prior_beta, self.decay = float(prior_alpha), float(prior_beta), float(decay)

    def _reset_history(self, n: int) -> None:
        self._alpha = np.full(n, self.prior_alpha, dtype=np.float64)
        self._beta = np.full(n, self.prior_beta, dtype=np.float64)
        self._visits = np.zeros(n, dtype=np.int64)

    def _history(self) -> dict[str, np.ndarray]:
        return {"alpha": self._alpha, "beta": self._beta}

    def _load_history(self, state: Mapping[str, Any]) -> None:
        self._alpha = np.asarray(state["alpha"], dtype=np.float64).copy()
        self._beta = np.asarray(state["beta"], dtype=np.float64).copy()

    def posterior(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(α, β) of prompts ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        return self._alpha[ids].copy(), self._beta[ids].copy()

    def _observe(self, prompt: int, correct: int, total: int) -> None:
        self._alpha[prompt], self._beta[prompt] = beta_update(
            self._alpha[prompt], self._beta[prompt], correct, total - correct, self.decay, self.prior_alpha,
            self.prior_beta)
        self._visits[prompt] += 1

    def _choose(self, cand: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
        a, b = self._alpha[cand], self._beta[cand]
        draws = rng.beta(a, b)  # one Thompson sample γ̂ ~ Beta(α, β) per candidate
        if self.strategy == "topk":
            pick = np.argsort(thompson_distance(draws, self.target), kind="stable")[:k]
        else:
            pick = select_threshold(draws, k, self.lower, self.upper, rng)
        self._tally("thompson_mean", draws[pick])
        self._tally("target_distance", np.abs(draws[pick] - self.target))
        self._tally("posterior_mean", a[pick] / (a[pick] + b[pick]))
        self._tally("unseen_share", self._visits[cand[pick]] == 0)
        return pick

    def _before_update(self, feedback: StepFeedback) -> None:
        """``select/prediction_error``: mean |posterior mean − the step's success rate| of the trained prompts, before
        the update (MoPPS's claim: the posterior predicts a prompt's difficulty before its rollouts)."""
        has = feedback.n > 0
        if has.any():
            ids = feedback.ids[has]
            mean = self._alpha[ids] / (self._alpha[ids] + self._beta[ids])
            rate = feedback.n_correct[has] / feedback.n[has]
            self._tally("prediction_error", np.abs(mean - rate))
