"""The seams between the trainer and its parts: what a step tells the controllers, and each part's contract.

Every controller sees the same frozen :class:`StepFeedback` after a step and derives its signal from it in one
place (:meth:`StepFeedback.signal`). What a controller may know about the prompt pool is explicit: a
:class:`PromptPool` of uids; the generator's level labels are in it only for a sampler that declares
``reads_labels = True`` (the oracle control, never a method under test).

The records every floor shares live here too: a :class:`Problem` (a prompt and its gold) and a :class:`RewardBatch`
(the verdicts on a batch of completions).

The Protocols are structural (``typing.Protocol``): a new sampler, allocator, classifier, dataset, reward or logger
needs no base class, only these methods; ``tests/test_protocols.py`` checks every ``_target_`` in ``conf/`` against
its group's Protocol. See ``docs/extending.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

# Per-rollout controller signals (Eq. 13 input): the official code's clipped-PG loss, Eq. 6 with its KL term,
# the failure rate 1 − correct, and the frontier signal 4·p̂(1 − p̂) of the rollout's group (the reward variance
# that the square-root theorem's v_b and the GRPO gradient's size depend on: 0 for all-solved and all-failed groups;
# scaled by 4 to [0, 1], the failure rate's range, so that a step size η means the same for both), and
# ``informative``, 1 for every rollout of a group that is neither all correct nor all wrong (its bin mean is the bin's
# share of groups with a gradient). The last two are beyond the paper (docs/allocation.md).
SIGNALS = ("pg_loss", "pg_kl", "failure_rate", "frontier", "informative")


# ---------------------------------------------------------------------------------------------- shared records
@dataclass(frozen=True)
class Problem:
    """One prompt with its gold answer. ``level`` is for analysis only; controllers never read it."""

    uid: str
    prompt: str
    answer: str
    level: int
    # the dataset row's other columns (data=custom), which a user's reward functions receive as keyword arguments
    # (TRL's convention; gdro.grading.functions); None for the built-in tasks. Not compared, not hashed
    columns: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    # the prompt as the row held it when it was a conversation (a tuple of {role, content} messages): what a reward
    # function receives as its prompt; ``prompt`` is then the content of its last user message
    messages: tuple[Mapping[str, Any], ...] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class RewardBatch:
    """Scores of N completions: ``rewards`` float64 (N,), ``correct`` bool (N,), counts of failure kinds."""

    rewards: np.ndarray
    correct: np.ndarray
    n_unparsable: int  # no answer could be extracted (no box, empty, parse error)
    n_truncated: int  # finished=False with require_eos (scored incorrect without parsing)
    n_timeout: int  # deadline hit, or answer too large to verify in bounded time
    n_bad_gold: int  # gold could not be parsed: its completions score incorrect (fix the data)
    n_error: int = 0  # an exception while scoring (logged): scored as unparsable, but counted only here
    n_formatted: int = 0  # in the format a format term rewards (gdro.grading.shaping), right or wrong
    n_overlong: int = 0  # longer than L_max - L_cache: the overlong punishment applied (0 when it is off)
    # a user's reward functions (reward.functions; gdro.grading.functions): each term's raw values, (N,) float64, NaN
    # where the function returned None or failed, and each term's failed rows. Empty without such functions
    terms: Mapping[str, np.ndarray] = field(default_factory=dict)
    term_errors: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PromptPool:
    """The training prompts as a controller may see them: their uids, in pool order (index = prompt id).

    ``levels`` (the generator's difficulty label per prompt) is set only for a sampler with ``reads_labels``.
    """

    uids: tuple[str, ...]
    levels: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.uids:
            raise ValueError("the prompt pool is empty (the training split has no problems)")
        if self.levels is not None and len(self.levels) != len(self.uids):
            raise ValueError(f"levels must have one entry per uid ({len(self.uids)}), got {len(self.levels)}")

    def __len__(self) -> int:
        return len(self.uids)


@dataclass(frozen=True)
class BinSpec:
    """The classifier's bins: their metric labels (bin 0 = hardest) and how many of the first are pass-rate
    ordered (Eq. 32 uses only those; e.g. an appended "unseen" bin is not)."""

    labels: tuple[str, ...]
    num_pass_bins: int

    def __post_init__(self) -> None:
        if not self.labels:
            raise ValueError("a classifier must have at least one bin")
        if not 0 <= self.num_pass_bins <= len(self.labels):
            raise ValueError(f"num_pass_bins must be in [0, {len(self.labels)}], got {self.num_pass_bins}")

    @property
    def num_bins(self) -> int:
        return len(self.labels)


def _vector(name: str, x: Any, dtype: Any, length: int | None = None) -> np.ndarray:
    raw = np.asarray(x)
    if raw.size and dtype is not np.float64 and raw.dtype.kind not in "biu":
        kind = "0/1 or bool" if dtype is bool else "integer"
        if not (np.issubdtype(raw.dtype, np.number) and np.all(np.asarray(raw, np.float64) % 1 == 0)):
            raise ValueError(f"StepFeedback.{name} must hold {kind} values, got dtype {raw.dtype}")
    if dtype is bool and raw.size and not np.isin(raw, (0, 1)).all():
        raise ValueError(f"StepFeedback.{name} must hold 0/1 or bool values")
    a = np.array(x, dtype=dtype)  # a copy: making it read-only must not freeze (or alias) the caller's array
    if a.ndim != 1 or (length is not None and len(a) != length):
        raise ValueError(f"StepFeedback.{name} must be 1-D{'' if length is None else f' of length {length}'}, "
                         f"got shape {a.shape}")
    return a


@dataclass(frozen=True)
class StepFeedback:
    """What one training step tells every controller (``G`` prompts, ``N`` rollouts; arrays are read-only).

    ``ids`` (G,) prompt ids; ``bins`` (G,) their bins as classified *before* the step; ``n`` (G,) rollouts each;
    ``group_index`` (N,) each rollout's prompt; ``correct`` (N,) verified answers; ``pg_loss`` (N,) the
    per-response token-mean clipped PG loss with the *unweighted* advantages (the official code's signal, Eq. 5);
    ``kl`` (N,) the per-response KL to π_ref (zeros without a reference); ``beta_kl`` the KL coefficient.
    """

    ids: np.ndarray
    bins: np.ndarray
    n: np.ndarray
    group_index: np.ndarray
    correct: np.ndarray
    pg_loss: np.ndarray
    kl: np.ndarray
    beta_kl: float

    def __post_init__(self) -> None:
        g = len(np.asarray(self.ids).reshape(-1))
        fields = {"ids": (np.int64, g), "bins": (np.int64, g), "n": (np.int64, g), "group_index": (np.int64, None)}
        for name, (dtype, length) in fields.items():
            object.__setattr__(self, name, _vector(name, getattr(self, name), dtype, length))
        rows = len(self.group_index)
        for name, dtype in (("correct", bool), ("pg_loss", np.float64), ("kl", np.float64)):
            object.__setattr__(self, name, _vector(name, getattr(self, name), dtype, rows))
        if rows and (self.group_index.min() < 0 or self.group_index.max() >= g):
            raise ValueError(f"StepFeedback.group_index must lie in [0, {g}), "
                             f"got [{self.group_index.min()}, {self.group_index.max()}]")
        if not np.array_equal(np.bincount(self.group_index, minlength=g), self.n):
            raise ValueError("StepFeedback.n must count each prompt's rollouts in group_index")
        for name in ("ids", "bins", "n", "group_index", "correct", "pg_loss", "kl"):
            getattr(self, name).setflags(write=False)

    @property
    def n_correct(self) -> np.ndarray:
        """(G,) correct rollouts per prompt."""
        return np.bincount(self.group_index, weights=self.correct, minlength=len(self.ids)).astype(np.int64)

    def signal(self, name: str) -> np.ndarray:
        """The per-rollout controller signal ``name`` (one of ``SIGNALS``), (N,) float64."""
        if name == "pg_loss":
            return self.pg_loss
        if name == "pg_kl":  # Eq. 6 per response: clipped PG loss + β·KL
            return self.pg_loss + self.beta_kl * self.kl
        if name == "failure_rate":
            return 1.0 - self.correct.astype(np.float64)
        if name == "frontier":  # every rollout carries its group's 4·p̂(1 − p̂): the prompt mean is that (scaled)
            p = self.n_correct / np.maximum(self.n, 1)
            return (4.0 * p * (1.0 - p))[self.group_index]
        if name == "informative":  # every rollout carries whether its group is mixed (has a gradient under GRPO)
            c = self.n_correct
            return ((c > 0) & (c < self.n)).astype(np.float64)[self.group_index]
        raise ValueError(f"signal must be one of {SIGNALS}, got {name!r}")


@runtime_checkable
class Stateful(Protocol):
    """Round-trips its mutable state (checkpoints)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class DifficultyClassifier(Stateful, Protocol):
    """Online difficulty bins per prompt (Eq. 10–11), from the history up to the previous step."""

    def bind(self, pool: PromptPool) -> None: ...

    def bin_spec(self) -> BinSpec: ...

    def bins(self, ids: np.ndarray) -> np.ndarray: ...

    def all_bins(self) -> np.ndarray: ...

    def success_rate(self, ids: np.ndarray) -> np.ndarray:
        """(G,) per-rollout success rate p in [0, 1] of prompts ``ids`` from their recent visits, never NaN: a
        never-seen prompt gets the classifier's stated prior (``unseen_p``)."""

    def seen(self, ids: np.ndarray) -> np.ndarray:
        """(G,) bool: whether each prompt has been visited."""

    def zero_variance_streak(self, ids: np.ndarray) -> np.ndarray:
        """(G,) int: how many of each prompt's latest visits in a row were all correct or all wrong."""

    def update(self, feedback: StepFeedback) -> None: ...

    def record(self, ids: np.ndarray, correct: np.ndarray, total: np.ndarray) -> None:
        """One visit per entry: ``correct`` of ``total`` rollouts right (groups generated but not trained on, e.g.
        those a filter dropped, are history too)."""

    def metrics(self) -> dict[str, float]: ...


@runtime_checkable
class PromptSampler(Stateful, Protocol):
    """Which prompts a step uses, and each rollout's advantage multiplier (ones for GRPO; Eq. 16)."""

    reads_labels: bool  # True only for a control that may see the generator's labels (PromptPool.levels)

    def bind(self, pool: PromptPool, bins: BinSpec) -> None: ...

    def sample(self, count: int, rng: np.random.Generator, classifier: DifficultyClassifier) -> np.ndarray: ...

    def loss_weights(self, bins: np.ndarray, group_index: np.ndarray) -> np.ndarray: ...

    def update(self, feedback: StepFeedback) -> None: ...

    def metrics(self) -> dict[str, float]: ...


@runtime_checkable
class RolloutAllocator(Stateful, Protocol):
    """Rollouts per prompt under an exact step budget (ragged groups)."""

    def bind(self, bins: BinSpec) -> None: ...

    def check_budget(self, n_bar: int) -> None:
        """Raise ValueError if a mean of ``n_bar`` rollouts per prompt cannot be met (checked once, before a run)."""

    def allocate(self, ids: np.ndarray, bins: np.ndarray, n_bar: int,
                 classifier: DifficultyClassifier) -> np.ndarray:
        """(G,) rollouts for the prompts ``ids`` (G,) in ``bins`` (G,), summing to the step's budget ``n_bar × G``
        exactly; per-prompt history (``classifier.success_rate(ids)``, ...) is read from ``classifier``, as
        ``PromptSampler.sample`` does. A step may call it more than once (``filter=dynamic`` draws in rounds)."""

    def update(self, feedback: StepFeedback) -> None: ...

    def metrics(self) -> dict[str, float]: ...


@runtime_checkable
class ProblemSource(Protocol):
    """A dataset option (conf/data/*.yaml): its training problems and its held-out ones (periodic evaluation)."""

    def train(self) -> list[Problem]: ...

    def test(self) -> list[Problem]: ...


@runtime_checkable
class Reward(Protocol):
    """Verifiable reward: scores completions against gold answers; never raises on model text.

    ``for_eval`` and ``use_golds`` have default bodies here, which a reward gets by subclassing ``Reward``
    (``class MyReward(Reward)``); gdro.grading.rewards.MathVerifyReward defines its own.
    """

    def score(self, completions: Sequence[str], golds: Sequence[str], finished: Sequence[bool],
              lengths: Sequence[int] | None = None) -> RewardBatch:
        """The verdicts and rewards of ``completions``; ``lengths``: their token counts (the trainer passes them, for
        length-based shaping such as DAPO's overlong punishment; None where unknown, as in evaluation)."""
        ...

    def metrics(self, batch: RewardBatch) -> dict[str, float]: ...

    def for_eval(self) -> Reward:
        """The reward that held-out evaluation scores with (gdro.algorithm.heldout.evaluate); by default this one."""
        return self

    def use_golds(self, table: Any) -> None:
        """Take golds a loader prepared once (a gdro.grading.golds.GoldTable), so that scoring parses none; by default
        ignored (the reward reads each gold as it scores)."""


@runtime_checkable
class MetricLogger(Protocol):
    """Writes one row per step (``metrics.jsonl`` and a tracker); ``position`` is where a checkpoint resumes it."""

    def log(self, row: dict[str, Any]) -> dict[str, Any]: ...

    def position(self) -> int: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------------------------- what a step reads
@dataclass
class Controllers:
    """The step's controllers, in the order they observe it and report (iterating yields them in that order)."""

    sampler: PromptSampler
    allocator: RolloutAllocator
    classifier: DifficultyClassifier

    def __iter__(self) -> Iterator[PromptSampler | RolloutAllocator | DifficultyClassifier]:
        return iter((self.sampler, self.allocator, self.classifier))


@dataclass(frozen=True)
class Problems:
    """A run's problems: the training pool, and the held-out split of its periodic evaluation."""

    train: Sequence[Problem]
    test: Sequence[Problem]
