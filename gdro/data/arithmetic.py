"""Addition in words, for a real instruct model: ``What is 47 + 56? Put the final answer in \\boxed{}.`` → ``103``.

The task of ``experiment=smollm2-add`` (issue #30; the pilots that chose it: docs/smollm2-pilots.md). The *level*
``L`` is the number of digits of each operand: level 1 adds two numbers in 0–9, level ``L >= 2`` two numbers in
``[10^(L-1), 10^L)``. SmolLM2-135M-Instruct starts at about 50% / 15% / 0% on levels 1 / 2 / 3 (the right number,
stated and ended; almost never boxed), so GRPO has signal on the short levels and room on the long one.

Splits are deterministic functions of ``seed`` (independent of the run seed) and **disjoint**: the held-out split is
drawn first, ``min(test_per_level, pairs // 2)`` distinct ordered pairs ``(a, b)`` per level (50 of the 100 pairs at
level 1), and the train split draws, with replacement, only from the pairs not held out. ``Problem.level`` is ground
truth for analysis only: difficulty-aware controllers never read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gdro.common.interfaces import Problem
from gdro.data.synthetic import _exact_counts, check_split_settings, level_weights

ADD_PROMPT = "What is {a} + {b}? Put the final answer in \\boxed{{}}."


def operand_range(level: int) -> tuple[int, int]:
    """``[lo, hi)`` of a level's operands: 0–9 at level 1, the ``level``-digit numbers above it."""
    return (0 if level == 1 else 10 ** (level - 1)), 10 ** level


@dataclass(frozen=True)
class AddTask:
    """Two-operand addition over levels ``min_level..max_level``. Hydra-instantiable with plain keyword arguments.

    Args:
        min_level, max_level: digits per operand, inclusive (1–9).
        train_size: train problems (pairs repeat under distinct uids: a level's pairs are drawn with replacement).
        test_per_level: held-out pairs per level (at most half of the level's pairs).
        level_dist: train level distribution: "uniform", "zipf" (∝ L^-zipf_a) or "geometric" (∝ geo_p^L).
        zipf_a, geo_p: the distribution's parameter.
        seed: data seed, independent of the run seed.
        prompt: the question, with ``{a}`` and ``{b}`` (Python ``str.format``; ``{{}}`` for literal braces).
    """

    min_level: int = 1
    max_level: int = 3
    train_size: int = 1024
    test_per_level: int = 64
    level_dist: str = "uniform"
    zipf_a: float = 1.0
    geo_p: float = 0.8
    seed: int = 1234
    prompt: str = ADD_PROMPT

    def __post_init__(self) -> None:
        if not 1 <= self.min_level <= 9:
            raise ValueError(f"min_level must be in [1, 9], got {self.min_level}")
        if not self.min_level <= self.max_level <= 9:
            raise ValueError(f"max_level must be in [min_level={self.min_level}, 9], got {self.max_level}")
        check_split_settings(self)
        try:
            shown = self.prompt.format(a=12, b=34)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"prompt must be a str.format template with only {{a}} and {{b}} fields (literal braces "
                             f"doubled), got {self.prompt!r}: {err}") from None
        if "12" not in shown or "34" not in shown:
            raise ValueError(f"prompt must contain both {{a}} and {{b}}, got {self.prompt!r}")

    @property
    def levels(self) -> list[int]:
        return list(range(self.min_level, self.max_level + 1))

    def test_size_of(self, level: int) -> int:
        lo, hi = operand_range(level)
        return min(self.test_per_level, (hi - lo) ** 2 // 2)

    def _rngs(self) -> tuple[np.random.Generator, np.random.Generator]:
        test_ss, train_ss = np.random.SeedSequence(self.seed).spawn(2)
        return np.random.default_rng(test_ss), np.random.default_rng(train_ss)

    def _problem(self, split: str, i: int, level: int, a: int, b: int) -> Problem:
        return Problem(f"add/{split}/{i:06d}", self.prompt.format(a=a, b=b), str(a + b), level)

    def _test_pairs(self) -> list[tuple[int, int, int]]:
        rng, _ = self._rngs()
        out = []
        for level in self.levels:
            lo, hi = operand_range(level)
            seen: set[tuple[int, int]] = set()
            while len(seen) < self.test_size_of(level):
                a, b = (int(x) for x in rng.integers(lo, hi, size=2))
                if (a, b) not in seen:
                    seen.add((a, b))
                    out.append((level, a, b))
        return out

    def test(self) -> list[Problem]:
        """Held-out split: distinct pairs, the same number per level (fewer where a level has few), by level."""
        return [self._problem("test", i, *row) for i, row in enumerate(self._test_pairs())]

    def train(self) -> list[Problem]:
        """Train split: ``train_size`` problems, levels in exact proportion to the level distribution, shuffled,
        never a held-out pair."""
        _, rng = self._rngs()
        held = {(a, b) for _, a, b in self._test_pairs()}
        counts = _exact_counts(level_weights(np.asarray(self.levels), self.level_dist, self.zipf_a, self.geo_p),
                               self.train_size)
        rows = []
        for level, n in zip(self.levels, counts.tolist()):
            lo, hi = operand_range(level)
            while n > 0:
                a, b = (int(x) for x in rng.integers(lo, hi, size=2))
                if (a, b) not in held:
                    rows.append((level, a, b))
                    n -= 1
        order = rng.permutation(len(rows))
        return [self._problem("train", i, *rows[j]) for i, j in enumerate(order.tolist())]
