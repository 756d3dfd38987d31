"""What a step's batch gave the update, whatever the sampler and allocator: the share of groups that carry gradient
and the batch's weighted standard error as allocated and at a uniform allocation (``difficulty/*`` metrics that
:class:`~gdro.controllers.difficulty.OnlineDifficultyClassifier` logs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gdro.controllers.bandit import bin_means
from gdro.controllers.budget import weighted_se

__all__ = ["batch_mechanism"]


def batch_mechanism(bins: np.ndarray, correct: np.ndarray, n: np.ndarray, labels: Sequence[str]) -> dict[str, float]:
    """What a step's batch gave the update, per bin and overall, whatever the sampler and allocator.

    - ``difficulty/informative``: the share of groups that carry gradient (neither all correct nor all wrong: GRPO's
      group-relative advantage is zero for the others); ``difficulty/informative/<bin>`` the same within each bin
      present in the batch (absent bins are not logged).
    - ``difficulty/wse``: the weighted standard error Σ_b q_b σ_b / √n_b (Eq. 33) of the batch as allocated, with q_b
      the bin's share of the prompts, σ_b = √(p_b(1 − p_b)) from the bin's realised accuracy p_b this step and n_b
      its mean rollouts per prompt; ``difficulty/wse_uniform`` the same batch with every prompt at the mean
      n̄ = Σ n / #prompts (the same budget); ``difficulty/wse_ratio`` their ratio (1 for a fixed allocation; below 1
      when the allocation lowers the proxy — the square-root allocator's claim, Theorem 4.2)."""
    bins, correct, n = (np.asarray(a, dtype=np.int64) for a in (bins, correct, n))
    mixed = (correct > 0) & (correct < n)
    out = {"difficulty/informative": float(mixed.mean())}
    num = int(bins.max()) + 1
    present = np.unique(bins)
    informative, count = bin_means(mixed, bins, num)
    n_b = bin_means(n, bins, num)[0][present]
    p = np.bincount(bins, weights=correct, minlength=num)[present] / np.bincount(bins, weights=n, minlength=num)[present]
    q = count[present] / len(bins)
    out |= {f"difficulty/informative/{labels[b]}": float(informative[b]) for b in present}
    sigma = np.sqrt(p * (1 - p))
    wse = weighted_se(q, sigma, n_b)
    wse_uniform = weighted_se(q, sigma, np.full(len(present), n.sum() / len(n)))
    out |= {"difficulty/wse": wse, "difficulty/wse_uniform": wse_uniform}
    if wse_uniform > 0:
        out["difficulty/wse_ratio"] = wse / wse_uniform
    return out
