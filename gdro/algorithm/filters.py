"""Which generated groups a step trains on: all of them (``filter=none``), or DAPO's dynamic sampling
(``filter=dynamic``, Yu et al., arXiv 2503.14476, §3.2): drop the groups whose rewards are all equal (their
group-relative advantage is 0, so they carry no policy gradient) and draw more prompts until the batch holds the
configured number of groups with signal.

A filter gets ``draw(count, round) -> Drawn``: the trainer's one generation round (sample ``count`` prompts, bin and
allocate them, generate, score; the compute ledger counts it), and returns a :class:`Collected`: the groups kept,
every group generated, and the rounds it took. It never generates itself, so it composes with every sampler and
allocator, and it always terminates: at most ``max_rounds`` rounds.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from gdro.common.interfaces import RewardBatch
from gdro.common.rollouts import RolloutBatch, concat_rollouts
from gdro.controllers.ledger import mixed_groups

__all__ = ["Collected", "Drawn", "DynamicSampling", "Filter", "NoFilter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Drawn:
    """One or more rounds' groups: prompt ids, bins, rollouts each, the rollouts and their verdicts."""

    ids: np.ndarray
    bins: np.ndarray
    n: np.ndarray
    roll: RolloutBatch
    scored: RewardBatch

    @property
    def mixed(self) -> np.ndarray:
        """(G,) bool: groups whose rewards are not all equal (a non-zero advantage)."""
        return mixed_groups(self.scored.rewards, self.roll.group_index, len(self.ids))

    @property
    def n_correct(self) -> np.ndarray:
        """(G,) correct rollouts per group."""
        return np.bincount(self.roll.group_index, weights=self.scored.correct, minlength=len(self.ids)).astype(np.int64)

    def subset(self, groups: np.ndarray) -> Drawn:
        """The whole groups ``groups`` (increasing), in order; the failure-kind counts are the whole batch's."""
        groups = np.asarray(groups, dtype=np.int64)
        where = np.full(len(self.ids), -1, dtype=np.int64)
        where[groups] = np.arange(len(groups))
        rows = np.flatnonzero(where[self.roll.group_index] >= 0)
        r = self.roll
        roll = RolloutBatch(prompt_token_ids=[r.prompt_token_ids[g] for g in groups],
                            group_index=where[r.group_index[rows]], completion_ids=[r.completion_ids[i] for i in rows],
                            logprobs=None if r.logprobs is None else [r.logprobs[i] for i in rows],
                            texts=[r.texts[i] for i in rows], finish_reasons=[r.finish_reasons[i] for i in rows])
        scored = dataclasses.replace(self.scored, rewards=self.scored.rewards[rows], correct=self.scored.correct[rows],
                                     terms={k: v[rows] for k, v in self.scored.terms.items()})
        return Drawn(self.ids[groups], self.bins[groups], self.n[groups], roll, scored)


def concat_drawn(parts: Sequence[Drawn]) -> Drawn:
    """Rounds one after another, as one batch (the failure-kind counts summed)."""
    if len(parts) == 1:
        return parts[0]
    counts = {f.name: sum(getattr(p.scored, f.name) for p in parts)
              for f in dataclasses.fields(RewardBatch) if f.name.startswith("n_")}
    names = parts[0].scored.terms  # a user's reward functions' terms (gdro.grading.functions)
    scored = RewardBatch(rewards=np.concatenate([p.scored.rewards for p in parts]),
                         correct=np.concatenate([p.scored.correct for p in parts]), **counts,
                         terms={k: np.concatenate([p.scored.terms[k] for p in parts]) for k in names},
                         term_errors={k: sum(p.scored.term_errors.get(k, 0) for p in parts) for k in names})
    return Drawn(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("ids", "bins", "n")),
                 concat_rollouts([p.roll for p in parts]), scored)


@dataclass(frozen=True)
class Collected:
    """What a step trains on (``kept``), every group it generated (``generated``, kept ones included) and which of
    those it kept (``kept_groups``, indices into ``generated``), and the rounds it drew."""

    kept: Drawn
    generated: Drawn
    kept_groups: np.ndarray
    rounds: int

    def discarded(self) -> Drawn | None:
        """The generated groups not trained on (None when every one is kept)."""
        if len(self.kept_groups) == len(self.generated.ids):
            return None
        rest = np.setdiff1d(np.arange(len(self.generated.ids)), self.kept_groups)
        return self.generated.subset(rest)


@runtime_checkable
class Filter(Protocol):
    """A filter option (conf/filter/*.yaml)."""

    def collect(self, draw: Callable[[int, int], Drawn], target: int) -> Collected:
        """The step's groups from ``draw(count, round)`` calls (at least one; finitely many); ``target``: the
        prompts per step."""

    def metrics(self) -> dict[str, float]: ...


class NoFilter:
    """Every generated group is trained on: one round (GRPO; ``filter=none``, the default)."""

    def collect(self, draw: Callable[[int, int], Drawn], target: int) -> Collected:
        d = draw(target, 0)
        return Collected(d, d, np.arange(len(d.ids)), 1)

    def metrics(self) -> dict[str, float]:
        return {}


class DynamicSampling:
    """DAPO's dynamic sampling with a cap on rounds (``filter=dynamic``).

    Round 0 draws ``target`` prompts; round r ≥ 1 draws ⌈``oversample`` × the groups still missing⌉. Groups whose
    rewards are all equal are dropped; rounds stop once ``target`` groups with signal are held, or after
    ``max_rounds`` rounds. The kept groups are the first ``target`` mixed ones in draw order (DAPO truncates
    the same way); the rest count as discarded. When the cap is hit with fewer, the step trains on those it holds;
    with none at all, on round 0's groups as GRPO would (their policy gradient is 0), never on an empty batch, and the
    first such step of a run logs a warning (a reward that is always the same spins through every round of every
    step). Groups of one rollout, which never hold two rewards, are refused before the run (gdro.compose.build).
    """

    def __init__(self, max_rounds: int = 4, oversample: float = 1.0):
        if isinstance(max_rounds, bool) or int(max_rounds) != max_rounds or max_rounds < 1:
            raise ValueError(f"max_rounds must be an integer >= 1, got {max_rounds!r}")
        if not (math.isfinite(oversample) and oversample >= 1.0):
            raise ValueError(f"oversample must be a finite number >= 1, got {oversample!r}")
        self.max_rounds, self.oversample = int(max_rounds), float(oversample)
        self._last: dict[str, float] = {}
        self._warned = False  # the warning of a step that kept nothing: once per run

    def collect(self, draw: Callable[[int, int], Drawn], target: int) -> Collected:
        parts: list[Drawn] = []
        held = 0
        while len(parts) < self.max_rounds and held < target:
            count = target if not parts else math.ceil(self.oversample * (target - held))
            parts.append(draw(count, len(parts)))
            held += int(np.count_nonzero(parts[-1].mixed))
        generated = concat_drawn(parts)
        kept = np.flatnonzero(generated.mixed)[:target]
        fallback = len(kept) == 0
        if fallback:  # no group with signal in any round: round 0's groups, as without a filter
            kept = np.arange(len(parts[0].ids))
            self._warn_nothing_kept(generated)
        self._last = {"filter/rounds": float(len(parts)), "filter/kept_groups": float(0 if fallback else len(kept)),
                      "filter/target_met": float(len(kept) >= target and not fallback)}
        return Collected(generated.subset(kept), generated, kept, len(parts))

    def _warn_nothing_kept(self, generated: Drawn) -> None:
        """The first step of the run whose every round kept nothing: say so, and what to do (once per run)."""
        if self._warned:
            return
        self._warned = True
        rewards = np.unique(generated.scored.rewards)
        seen = f"every reward was {rewards[0]:g}" if len(rewards) == 1 else "each group's rewards were all equal"
        log.warning("filter=dynamic: none of a step's %d rounds (filter.max_rounds) held a group with signal (%s), so "
                    "it trains on round 0's groups, whose policy gradient is 0. Where the reward cannot vary (a task "
                    "the model cannot solve yet, a reward that is always the same) every step spends its rounds on "
                    "nothing: check the reward and the data, or set filter=none. Each such step logs "
                    "filter/kept_groups=0; this warning is not repeated", self.max_rounds, seen)

    def metrics(self) -> dict[str, float]:
        """``filter/rounds``, ``filter/kept_groups`` (with signal), ``filter/target_met`` (1 if the batch is full)."""
        return dict(self._last)
