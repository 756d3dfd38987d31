"""What a step spent and what its batch held: the compute ledger and the rollout summaries of a metrics row.

The ledger counts every rollout a run *generated*, including the ones a filter discarded (``filter=dynamic``), so
that methods that generate more or less per step can be compared at equal compute (gdro-report ``--axis tokens``):

| key | meaning |
|---|---|
| ``compute/rollouts``, ``compute/tokens`` | rollouts and completion tokens generated this step, discarded ones included |
| ``compute/rollouts_cum``, ``compute/tokens_cum`` | the same, cumulative over the run (checkpointed: exact on resume) |
| ``compute/discarded_rollouts`` | rollouts generated this step but not trained on (0 without a filter) |
| ``compute/groups_with_grad`` | trained groups with a non-zero advantage: for grpo, dr-grpo, rloo and reinforce-pp (group baseline) those whose rewards are not all equal (gdro.loss.advantage_estimators.groups_with_gradient) |
| ``compute/groups_with_grad/<bin>`` | the same within each bin of the trained batch |
| ``compute/rollouts_per_prompt/<bin>`` | mean rollouts per generated group of the bin this step (discarded included) |
| ``compute/groups_with_grad_cum`` | trained groups with gradient, cumulative |

It draws no randomness and changes no other key, so a run's other metrics are those it had without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ComputeLedger", "mixed_groups", "rollout_metrics"]


def mixed_groups(rewards: np.ndarray, group_index: np.ndarray, num_groups: int) -> np.ndarray:
    """(G,) bool: whether group g's rewards are not all equal (a non-zero group-relative advantage; ragged groups).
    An empty group is not mixed."""
    rewards = np.asarray(rewards, dtype=np.float64)
    group_index = np.asarray(group_index, dtype=np.int64)
    lo, hi = np.full(num_groups, np.inf), np.full(num_groups, -np.inf)
    np.minimum.at(lo, group_index, rewards)
    np.maximum.at(hi, group_index, rewards)
    return hi > lo


class ComputeLedger:
    """Per-step and cumulative generation counts, and the groups that carried gradient (see the module's table).

    A step calls :meth:`generated` once per generation round (every group generated, kept or not), then
    :meth:`trained` once with the batch it trained on; :meth:`metrics` reports the step and :meth:`state_dict`
    holds the cumulative sums."""

    def __init__(self) -> None:
        self.rollouts_cum = 0
        self.tokens_cum = 0
        self.grad_groups_cum = 0
        self._new_step()

    def _new_step(self) -> None:
        self._rollouts = self._tokens = self._kept_rollouts = 0
        self._gen_bins: list[np.ndarray] = []
        self._gen_n: list[np.ndarray] = []
        self._grad: dict[int, int] = {}
        self._grad_total = 0
        self._closed = False

    def generated(self, bins: np.ndarray, n: np.ndarray, tokens: int) -> None:
        """One round's generated groups (``bins``, ``n`` rollouts each) and their completion tokens."""
        if self._closed:
            self._new_step()
        bins, n = np.asarray(bins, dtype=np.int64), np.asarray(n, dtype=np.int64)
        if bins.shape != n.shape or (n.size and n.min() < 0) or tokens < 0:
            raise ValueError("generated: bins and n must have one entry per group, n >= 0, tokens >= 0")
        self._gen_bins.append(bins)
        self._gen_n.append(n)
        self._rollouts += int(n.sum())
        self._tokens += int(tokens)
        self.rollouts_cum += int(n.sum())
        self.tokens_cum += int(tokens)

    def trained(self, bins: np.ndarray, n: np.ndarray, mixed: np.ndarray) -> None:
        """The step's trained groups (``bins``, ``n``) and which of them carry gradient (``mixed``)."""
        bins, n, mixed = np.asarray(bins, np.int64), np.asarray(n, np.int64), np.asarray(mixed, bool)
        self._kept_rollouts = int(n.sum())
        if self._kept_rollouts > self._rollouts:
            raise ValueError(f"trained {self._kept_rollouts} rollouts, more than the {self._rollouts} generated")
        self._grad = {int(b): int(np.count_nonzero(mixed[bins == b])) for b in np.unique(bins)}
        self._grad_total = int(np.count_nonzero(mixed))
        self.grad_groups_cum += self._grad_total
        self._closed = True

    def metrics(self, labels: Sequence[str]) -> dict[str, float]:
        def name(b: int) -> str:
            return labels[b] if b < len(labels) else str(b)

        out = {"compute/rollouts": float(self._rollouts), "compute/tokens": float(self._tokens),
               "compute/rollouts_cum": float(self.rollouts_cum), "compute/tokens_cum": float(self.tokens_cum),
               "compute/discarded_rollouts": float(self._rollouts - self._kept_rollouts),
               "compute/groups_with_grad": float(self._grad_total),
               "compute/groups_with_grad_cum": float(self.grad_groups_cum)}
        out |= {f"compute/groups_with_grad/{name(b)}": float(c) for b, c in self._grad.items()}
        if self._gen_bins:
            bins, n = np.concatenate(self._gen_bins), np.concatenate(self._gen_n)
            for b in np.unique(bins):
                out[f"compute/rollouts_per_prompt/{name(int(b))}"] = float(n[bins == b].mean())
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rollouts_cum": self.rollouts_cum, "tokens_cum": self.tokens_cum,
                "grad_groups_cum": self.grad_groups_cum}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rollouts_cum, self.tokens_cum = int(state["rollouts_cum"]), int(state["tokens_cum"])
        self.grad_groups_cum = int(state["grad_groups_cum"])
        self._new_step()


def rollout_metrics(roll, scored, n_correct: np.ndarray, adv, max_new: int) -> dict[str, float]:
    """The step's reward, rollout and advantage summaries (``adv``: the advantages, a tensor)."""
    sizes = roll.group_sizes
    g_mean = n_correct / np.maximum(sizes, 1)
    return {
        "reward/mean": float(scored.rewards.mean()), "reward/std": float(scored.rewards.std()),
        "rollout/len_mean": float(roll.lengths.mean()), "rollout/len_max": float(roll.lengths.max()),
        "rollout/n_total": float(len(roll)), "rollout/n_prompts": float(len(sizes)),
        "rollout/n_per_prompt_mean": float(sizes.mean()),
        "rollout/clip_len_frac": float((roll.lengths >= max_new).mean()),
        "rollout/solved_frac": float((g_mean == 1).mean()), "rollout/unsolved_frac": float((g_mean == 0).mean()),
        "train/adv_abs_mean": float(adv.abs().mean()),
    }
