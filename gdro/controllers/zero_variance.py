"""The zero-variance control (issue #48, item 3): the simplest rule that stops spending rollouts on groups with no
GRPO gradient, as an allocator (``allocator=zero-variance``).

A group whose rollouts are all correct or all wrong has no reward variance, so every GRPO advantage in it is 0. The
rule predicts a prompt's next group from its last ``m`` ones:

    zero_i = 1{the last m visits of prompt i each drew an all-correct or all-wrong group}
           = 1{classifier.zero_variance_streak(i) ≥ m}
    n_i    = n_min                                   if zero_i
             the rest of n̄·G, spread evenly          otherwise (never seen, fewer than m visits, or a mixed group
                                                     among the last m), each at most n_max

What the other prompts cannot take (all of them at ``n_max``) goes back, evenly, to the zero-variance ones. So
Σ_i n_i = n̄·G exactly, as for every allocator; a step whose prompts are all zero-variance, or none, gives each n̄.
Evenly: every share is ⌊T/k⌋ or ⌈T/k⌉ (T rollouts over k prompts), the larger ones on the last prompts in the
step's order (``knapsack_allocate``'s tie rules with no value at stake: the most even split, then the
lexicographically smallest).

Why the defaults (docs/allocation.md): ``n_min = 2``, the smallest group that can be mixed (the other allocators'
n_min); 1 is refused, since a group of one is always all-equal and a prompt held there could never leave the rule.
``m = 1``: one all-equal group is the evidence DAPO's filter drops a group on and GRESO's skip first acts on
(keep probability p¹); unlike a skip, a prompt at n_min is still rolled out, so a wrong call ends at its next mixed
group. Stateless: the streaks live in the classifier (checkpointed), so a resumed run allocates as an unbroken one.
"""

from __future__ import annotations

import numpy as np

from gdro.common.interfaces import DifficultyClassifier
from gdro.controllers.budget import check_budget_feasible
from gdro.controllers.knapsack import knapsack_allocate
from gdro.controllers.per_prompt import PerPromptAllocator

__all__ = ["ZeroVarianceAllocator", "zero_variance_allocate"]


def zero_variance_allocate(zero: np.ndarray, n_bar: int, n_min: int, n_max: int) -> np.ndarray:
    """(G,) int64 rollouts: n_min for the prompts flagged in ``zero``, the rest of n̄·G evenly over the others (each
    ≤ n_max), any excess evenly back over the flagged ones; Σ = n̄·G exactly (needs n_min ≤ n̄ ≤ n_max)."""
    check_budget_feasible(n_bar, n_min, n_max)
    zero = np.asarray(zero, dtype=bool).reshape(-1)
    g, z = len(zero), int(zero.sum())
    lo, hi = np.full(g, n_min, dtype=np.int64), np.full(g, n_max, dtype=np.int64)
    if n_bar * g - z * n_min <= (g - z) * n_max:  # the others take all the flagged prompts leave
        hi[zero] = n_min
    else:  # every other prompt at n_max: what is left goes back to the flagged ones
        lo[~zero] = n_max
    # no value at stake (p = 0 everywhere): the DP meets the budget exactly by its tie rules alone, the most even split
    return knapsack_allocate(np.zeros(g), n_bar * g, lo, hi)


class ZeroVarianceAllocator(PerPromptAllocator):
    """``allocator=zero-variance``: ``n_min`` rollouts to a prompt whose last ``m`` groups were all correct or all
    wrong, the saved rollouts evenly to the step's other prompts (module docstring; :func:`zero_variance_allocate`)."""

    def __init__(self, n_min: int = 2, n_max: int = 24, m: int = 1):
        super().__init__(n_min, n_max)
        if n_min < 2:
            raise ValueError(f"n_min must be >= 2 (a group of 1 is always all-equal: a prompt held there would never "
                             f"leave the rule), got {n_min}")
        if isinstance(m, bool) or int(m) != m or m < 1:
            raise ValueError(f"m must be an integer >= 1 (visits in a row), got {m!r}")
        self.m = int(m)

    def allocate(self, ids: np.ndarray, bins: np.ndarray, n_bar: int,
                 classifier: DifficultyClassifier) -> np.ndarray:
        """The rule's rollouts for the prompts ``ids`` from their zero-variance streaks; Σ n = n̄ · G exactly."""
        ids, bins = self._inputs(ids, bins)
        zero = np.asarray(classifier.zero_variance_streak(ids)) >= self.m
        return self._keep(bins, zero_variance_allocate(zero, int(n_bar), self.n_min, self.n_max), zero, n_bar)

    def metrics(self) -> dict[str, float]:
        """``gdro/zero_variance/frac``: the step's share of prompts the rule flagged (last m groups all-equal);
        ``.../moved``: the rollouts moved off them, Σ (n̄ − n_i) over those; ``gdro/rollouts/<bin>``: the mean
        rollouts per prompt of each bin."""
        if not self._rounds:
            return {}
        bins, n, zero, n_bar = self._step()
        zero = zero.astype(bool)
        out = {"gdro/zero_variance/frac": float(zero.mean()),
               "gdro/zero_variance/moved": float((n_bar - n)[zero].sum())}
        return out | self._rollouts_per_bin(bins, n)
