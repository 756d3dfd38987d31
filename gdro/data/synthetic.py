"""The embedded toy task: copy a list of digits into ``\\boxed{}``.

``Copy: 3 8 9 1 9 2.`` → ``\\boxed{389192}`` (then the end-of-sequence token). Digits are 1–9 and the *level*
``L`` is the number of digits. Per-token errors compound, so difficulty grows steeply with ``L``: a warm-started
0.8M-parameter model solves the short levels, sits on a frontier in the middle and rarely solves the long ones,
and plain GRPO measurably improves it within minutes of CPU.

The train split is heavy-tailed over levels (most problems easy, a long tail of hard ones); the held-out split is
uniform over levels. ``Problem.level`` is ground truth kept for *analysis only* — difficulty-aware controllers
must never read it (they estimate difficulty online from rewards).

Splits are deterministic functions of ``seed`` (independent of the run seed) and disjoint: the test split is
generated first and its digit strings are excluded from the train split and from SFT warm-start problems.
Short levels have a tiny string space (9 strings at L=1, 81 at L=2), handled as follows:

* a level whose whole space fits in the held-out quota (``9**L <= test_per_level``: L=1 by default) is *shared*:
  the test split holds all of its strings and the train split draws from all of them. Holding some single digits
  out would remove those symbols from the level's training data and measurably biases the model against them
  (a warm start scored 25–50% on 4 held-out single digits while solving 7-digit strings) — a prior no
  curriculum should have to unlearn. This is the one documented exception to disjointness;
* any other level holds out ``min(test_per_level, 9**L // 2)`` distinct strings (40 at L=2, ``test_per_level``
  from L=3 on), and the train split draws *with replacement* from the remaining strings of the level.

The train split therefore repeats short-level strings (under distinct uids) — that is what realises the heavy-
tailed level distribution; long-level strings are almost all distinct.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gdro.common.interfaces import Problem

if TYPE_CHECKING:  # datasets is imported lazily: building problems needs numpy only
    import datasets

DIGITS = "123456789"
LEVEL_DISTS = ("zipf", "geometric", "uniform")


def copy_prompt(digits: str) -> str:
    """``"389192"`` → ``"Copy: 3 8 9 1 9 2."``"""
    return "Copy: " + " ".join(digits) + "."


def copy_completion(answer: str) -> str:
    """The target completion (without the end token): ``\\boxed{389192}``."""
    return "\\boxed{" + answer + "}"


def level_weights(levels: np.ndarray, dist: str, zipf_a: float, geo_p: float) -> np.ndarray:
    """Normalised probabilities over ``levels``: zipf ∝ L^-a, geometric ∝ geo_p^L, uniform."""
    levels = np.asarray(levels, dtype=np.float64)
    if dist == "zipf":
        w = levels ** (-zipf_a)
    elif dist == "geometric":
        w = geo_p ** (levels - levels.min())
    elif dist == "uniform":
        w = np.ones_like(levels)
    else:
        raise ValueError(f"level_dist must be one of {LEVEL_DISTS}, got {dist!r}")
    return w / w.sum()


def check_split_settings(task) -> None:
    """The settings a level-based task shares (``train_size``, ``test_per_level``, ``level_dist``, ``zipf_a``,
    ``geo_p``, ``seed``), checked one way: a ValueError naming the key."""
    if task.train_size < 1:
        raise ValueError(f"train_size must be >= 1, got {task.train_size}")
    if task.test_per_level < 1:
        raise ValueError(f"test_per_level must be >= 1, got {task.test_per_level}")
    if task.level_dist not in LEVEL_DISTS:
        raise ValueError(f"level_dist must be one of {LEVEL_DISTS}, got {task.level_dist!r}")
    if not task.zipf_a > 0:
        raise ValueError(f"zipf_a must be > 0, got {task.zipf_a}")
    if not 0 < task.geo_p <= 1:
        raise ValueError(f"geo_p must be in (0, 1], got {task.geo_p}")
    if task.seed < 0:
        raise ValueError(f"seed must be >= 0, got {task.seed}")


def _exact_counts(probs: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total`` that follow ``probs`` as closely as possible (largest remainder)."""
    raw = probs * total
    counts = np.floor(raw).astype(np.int64)
    short = total - int(counts.sum())
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[:short]] += 1
    return counts


def _random_strings(level: int, n: int, rng: np.random.Generator, exclude: frozenset[str],
                    repeat_p: float = 0.0) -> list[str]:
    """``n`` digit strings of length ``level`` not in ``exclude``, drawn with replacement: uniformly, or with
    ``repeat_p > 0`` as a "sticky" chain (each digit repeats the previous one with probability ``repeat_p``, else
    is one of the 8 others uniformly), which packs runs of equal digits into the string."""
    out: list[str] = []
    while len(out) < n:
        draws = rng.integers(0, len(DIGITS), size=(n - len(out), level))
        if repeat_p > 0:
            stay = rng.random(size=draws.shape) < repeat_p
            step = rng.integers(1, len(DIGITS), size=draws.shape)
            for t in range(1, level):
                draws[:, t] = np.where(stay[:, t], draws[:, t - 1], (draws[:, t - 1] + step[:, t]) % len(DIGITS))
        for row in draws:
            s = "".join(DIGITS[d] for d in row)
            if s not in exclude:
                out.append(s)
    return out


def adjacent_repeats(digits: str) -> int:
    """Positions where a digit equals the one before it (the "sticky" task's hidden difficulty)."""
    return sum(a == b for a, b in itertools.pairwise(digits))


@dataclass(frozen=True)
class CopyTask:
    """Heavy-tailed copy task. Hydra-instantiable with plain keyword arguments.

    Args:
        min_level, max_level: range of levels (number of digits), inclusive.
        train_size: number of train problems.
        test_per_level: held-out problems per level (fewer at levels whose string space is tiny, see module doc).
        level_dist: train level distribution: "zipf" (∝ L^-zipf_a), "geometric" (∝ geo_p^L) or "uniform".
        zipf_a: Zipf exponent (heavier tail for smaller a).
        geo_p: ratio between the probabilities of consecutive levels for "geometric".
        seed: data seed, independent of the run seed.
        sticky_frac: fraction of each level's problems (train and test) drawn as sticky strings: runs of repeated
            digits (``sticky_p``), a difficulty the level label does not carry (0 = none, the default task).
        sticky_p: probability that a sticky string's digit repeats the previous one.
    """

    min_level: int = 1
    max_level: int = 8
    train_size: int = 1024
    test_per_level: int = 48
    level_dist: str = "zipf"
    zipf_a: float = 1.0
    geo_p: float = 0.8
    seed: int = 1234
    sticky_frac: float = 0.0
    sticky_p: float = 0.7

    def __post_init__(self) -> None:
        if not 1 <= self.min_level <= 20:
            raise ValueError(f"min_level must be in [1, 20], got {self.min_level}")
        if not self.min_level <= self.max_level <= 20:
            raise ValueError(f"max_level must be in [min_level={self.min_level}, 20], got {self.max_level}")
        check_split_settings(self)
        if not 0 <= self.sticky_frac <= 1:
            raise ValueError(f"sticky_frac must be in [0, 1], got {self.sticky_frac}")
        if not 0 <= self.sticky_p < 1:
            raise ValueError(f"sticky_p must be in [0, 1), got {self.sticky_p}")

    # -- distribution ---------------------------------------------------------------------------------------
    @property
    def levels(self) -> np.ndarray:
        return np.arange(self.min_level, self.max_level + 1)

    def level_probs(self) -> np.ndarray:
        """Train-split probability of each level in ``self.levels``."""
        return level_weights(self.levels, self.level_dist, self.zipf_a, self.geo_p)

    def is_shared(self, level: int) -> bool:
        """True when the level's whole string space fits in the held-out quota (train and test share it)."""
        return len(DIGITS) ** level <= self.test_per_level

    def test_size_of(self, level: int) -> int:
        """Distinct held-out strings at ``level``: the whole space if shared, else at most half of it."""
        space = len(DIGITS) ** level
        return space if self.is_shared(level) else min(self.test_per_level, space // 2)

    # -- splits ---------------------------------------------------------------------------------------------
    def _rngs(self) -> tuple[np.random.Generator, np.random.Generator]:
        test_ss, train_ss = np.random.SeedSequence(self.seed).spawn(2)
        return np.random.default_rng(test_ss), np.random.default_rng(train_ss)

    def _test_strings(self) -> list[tuple[int, str]]:
        rng, _ = self._rngs()
        out: list[tuple[int, str]] = []
        for level in self.levels.tolist():
            want, seen = self.test_size_of(level), set()
            sticky = self._sticky_count(level, want)
            while len(seen) < want:  # distinct strings, in order of first draw (the sticky ones first)
                p = self.sticky_p if len(seen) < sticky else 0.0
                s = _random_strings(level, 1, rng, frozenset(seen), repeat_p=p)[0]
                seen.add(s)
                out.append((level, s))
        return out

    def _sticky_count(self, level: int, n: int) -> int:
        """How many of ``n`` problems at ``level`` are sticky (none at shared levels, nor below 2 digits)."""
        if self.sticky_frac == 0 or level < 2 or self.is_shared(level):
            return 0
        return round(self.sticky_frac * n)

    def test_strings(self) -> frozenset[str]:
        """Held-out digit strings that train and SFT problems must avoid (those of shared levels excepted)."""
        return frozenset(s for level, s in self._test_strings() if not self.is_shared(level))

    def test(self) -> list[Problem]:
        """Held-out split, uniform over levels, ordered by level."""
        return [Problem(f"copy/test/{i:06d}", copy_prompt(s), s, level)
                for i, (level, s) in enumerate(self._test_strings())]

    def train(self) -> list[Problem]:
        """Train split: ``train_size`` problems, levels in exact proportion to ``level_probs()``, shuffled."""
        _, rng = self._rngs()
        exclude = self.test_strings()
        counts = _exact_counts(self.level_probs(), self.train_size)
        rows = []
        for level, n in zip(self.levels.tolist(), counts.tolist()):
            sticky = self._sticky_count(level, n)
            if sticky:
                rows += [(level, s) for s in _random_strings(level, sticky, rng, exclude, repeat_p=self.sticky_p)]
            rows += [(level, s) for s in _random_strings(level, n - sticky, rng, exclude)]
        order = rng.permutation(len(rows))
        return [Problem(f"copy/train/{i:06d}", copy_prompt(rows[j][1]), rows[j][1], rows[j][0])
                for i, j in enumerate(order.tolist())]

    def sample_problems(self, n: int, rng: np.random.Generator, decay: float = 0.6,
                        prefix: str = "copy/sft") -> list[Problem]:
        """``n`` fresh problems with levels ∝ decay^L, never a held-out string (warm-start SFT data)."""
        probs = level_weights(self.levels, "geometric", 1.0, decay)
        levels = rng.choice(self.levels, size=n, p=probs)
        exclude = self.test_strings()
        out = []
        for i, level in enumerate(levels.tolist()):
            s = _random_strings(level, 1, rng, exclude)[0]
            out.append(Problem(f"{prefix}/{i:06d}", copy_prompt(s), s, level))
        return out

    # -- export ---------------------------------------------------------------------------------------------
    def save_splits(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``train.parquet`` and ``test.parquet`` (columns uid, prompt, answer, level) to ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {}
        for split, problems in (("train", self.train()), ("test", self.test())):
            paths[split] = out / f"{split}.parquet"
            to_hf_dataset(problems).to_parquet(str(paths[split]))
        return paths


def to_hf_dataset(problems: list[Problem]) -> datasets.Dataset:
    """A ``datasets.Dataset`` with columns uid, prompt, answer, level."""
    import datasets

    return datasets.Dataset.from_dict({
        "uid": [p.uid for p in problems],
        "prompt": [p.prompt for p in problems],
        "answer": [p.answer for p in problems],
        "level": [p.level for p in problems],
    })


def from_hf_dataset(ds: datasets.Dataset) -> list[Problem]:
    """Inverse of :func:`to_hf_dataset`."""
    return [Problem(str(r["uid"]), str(r["prompt"]), str(r["answer"]), int(r["level"])) for r in ds]
