"""What the algorithm asks of the execution layer, in the algorithm's words: :class:`Execution`.

The trainer generates a step's groups, scores them, updates the policy, syncs the engine, checkpoints and saves
through this one object and never learns how many processes run it, which one writes the run's files, or which rows
of the batch this process trains on. It holds the run's :class:`~gdro.policy.Forward` (forward layouts,
micro-batches) and its process strategy (:class:`~gdro.parallel.distributed.Dist`, ``forward.dist``), and owns the shard
layout of the last generation round: its shard bounds and this process's slice of its rows, which scoring and the
update read. One process with one shard: every call is the plain one (the order as sampled, every row).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gdro.common.rollouts import RolloutBatch, SamplingParams
from gdro.models.loading import compute_dtype, save_model_dir
from gdro.policy import Forward, OptimConfig, ppo_update


class Execution:
    """How a step runs, bound once by the composition root (``Execution(Forward.bind(..., dist=...))``)."""

    def __init__(self, forward: Forward) -> None:
        self.forward = forward
        self._dist = forward.dist
        self._round: tuple[RolloutBatch, np.ndarray | None] | None = None  # the last round's batch, this process's rows

    # -- the step -----------------------------------------------------------------------------------------------
    def generate(self, engine, problems: Sequence[Any], ids, bins, n, seed: Callable[..., int],
                 sampling: SamplingParams) -> tuple[Any, np.ndarray, np.ndarray, RolloutBatch]:
        """One generation round of the prompts ``ids`` (``problems[i].prompt``) with ``n`` rollouts each: the ids,
        bins and rollouts per prompt in the order the batch holds them (whole groups per shard, balanced by
        rollouts; one shard: as sampled) and the round's whole rollout batch. Shard ``s`` samples with seed
        ``seed(s)`` (one shard: ``seed()``)."""
        ids, bins, n, bounds = self._dist.shard_order(ids, bins, n)
        roll, rows = self._dist.generate(engine, [problems[i].prompt for i in ids], n, bounds, seed, sampling)
        self._round = (roll, rows)
        return ids, bins, n, roll

    def _rows(self, roll: RolloutBatch) -> np.ndarray | None:
        """The rows of ``roll`` this process computes (None: every row). A batch other than the last round's (groups
        kept by a filter, rounds joined) has them only in one process."""
        if self._round is not None and self._round[0] is roll:
            return self._round[1]
        if self._dist.world > 1:
            raise ValueError("a batch other than one generation round's needs the whole batch on this process "
                             "(one process)")
        return None

    def score(self, reward, roll: RolloutBatch, golds: list[str], problems: list | None = None):
        """The round's verdicts (``reward.score`` on every row), the same on every process; ``problems`` (each row's)
        go to a reward that reads them (a user's reward functions)."""
        if problems is None:
            return self._dist.score(reward, roll, golds, self._rows(roll))
        return self._dist.score(reward, roll, golds, self._rows(roll), problems)

    def update(self, model, optimizer, scheduler, roll: RolloutBatch, adv: torch.Tensor, loss, optim_cfg: OptimConfig,
               *, rng: np.random.Generator, ref_model=None):
        """The policy update on ``roll`` (gdro.policy.update.ppo_update), each process forwarding its own rows."""
        return ppo_update(model, optimizer, scheduler, roll, adv, loss, optim_cfg, self.forward, rng=rng,
                          ref_model=ref_model, local_rows=self._rows(roll))

    def sync_engine(self, engine, model: torch.nn.Module) -> None:
        """The engine samples from the updated policy."""
        self._dist.sync_engine(engine, model)

    def on_writer(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """``fn()`` where the run's files are written and its evaluation runs; ``default`` elsewhere."""
        return self._dist.main_only(fn, default)

    # -- the policy's and the optimiser's state -----------------------------------------------------------------
    def checkpoint_state(self, model: torch.nn.Module, optimizer, scheduler,
                         trainer: Mapping[str, Any]) -> dict[str, Any]:
        """What a checkpoint holds: the policy, the optimiser and its schedule, whole (every process calls it; the
        writing one holds them), and ``trainer`` with the number of processes that wrote it (``world_size``)."""
        policy_state, optim_state = self._dist.full_states(model, optimizer)
        return {"policy": policy_state, "optimizer": {"optimizer": optim_state, "scheduler": scheduler.state_dict()},
                "trainer": {**trainer, "world_size": self._dist.world}}

    def load_checkpoint_state(self, model: torch.nn.Module, optimizer, scheduler,
                              state: Mapping[str, Any]) -> Mapping[str, Any]:
        """Restore what :meth:`checkpoint_state` returned into the policy, the optimiser and its schedule; returns
        its ``trainer`` part."""
        self._dist.load_states(model, optimizer, state["policy"], state["optimizer"]["optimizer"])
        scheduler.load_state_dict(state["optimizer"]["scheduler"])
        return state["trainer"]

    def save_policy(self, model: torch.nn.Module, tokenizer: Any, path: Path) -> None:
        """The policy as a HF model dir at ``path`` in the compute dtype. Every process calls it (FSDP gathers); one
        writes (a LoRA run: merged, and its adapter)."""
        state = self._dist.savable_state(model, compute_dtype(model))
        self.on_writer(lambda: save_model_dir(model, tokenizer, path, state))
