"""Data-parallel training across processes (``torchrun``): the step's groups split across ranks, FSDP2 underneath.

    torchrun --standalone --nproc_per_node 8 -m gdro.cli.train experiment=paper model=qwen3-8b

Every rank runs the same controllers on the same inputs (classifier, sampler, allocator: identical state, no
communication needed to agree on prompts, bins and allocations). The step's prompts are then split into
``shards`` whole groups (:func:`shard_groups`, balanced by rollouts); each rank generates its shard with the
shard's own seed, and the shards are all-gathered so that every rank holds the step's whole rollout batch, in the
same order. Each rank scores its own rows and the verdicts are all-gathered as well (a verdict under the reward's
time bound depends on timing). Advantages, multipliers, the controllers' feedback and the metrics are then
computed on every rank alike. The update is data-parallel: each rank forwards and backwards only its own shard's rows, with
the loss's denominators (token-mean over the whole mini-batch) taken from the whole batch, and FSDP2
(``torch.distributed.fsdp.fully_shard``, :mod:`gdro.parallel.fsdp`) reduce-scatters the gradients (their mean, times the world size), so the update equals the
one-process update on the same rollouts up to float rounding. The controllers' per-response losses are
summed over ranks (each row is computed on exactly one rank).

A one-process run with ``dist.shards=2`` generates the two shards in turn with the same seeds, so it samples
exactly what a two-process run samples: ``tests/test_distributed.py`` compares the two.

All of this is a strategy the composition root picks once (:func:`init`): :class:`Dist` is the one-process form,
whose collectives are identities and whose decisions are the plain ones (as a silent logger writes nothing), and
:class:`ProcessGroupDist` the form over a ``torch.distributed`` process group. The trainer and the update call the
same methods either way and never branch on the number of processes; a new backend is one more subclass. How the
processes find each other before that (the world size, the process group joined before Hydra starts, each process's
device) is :mod:`gdro.parallel.process_group`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gdro.common.rollouts import RolloutBatch, concat_rollouts
from gdro.parallel.fsdp import is_sharded, shard_fsdp
from gdro.parallel.process_group import env_world_size, resolve_backend

BACKENDS = ("auto", "gloo", "nccl")


@dataclass
class DistConfig:
    """How a run is spread over processes (``torchrun`` sets the world size; one process otherwise)."""

    backend: str = "auto"  # auto = nccl when the device is CUDA, else gloo
    shards: int | None = None  # generation shards per step (None = the world size); must be a multiple of it
    reshard_after_forward: bool = True  # FSDP2: free gathered parameters after each forward (less memory)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.shards is not None and (isinstance(self.shards, bool) or not isinstance(self.shards, int)
                                        or self.shards < 1):
            raise ValueError(f"shards must be an integer >= 1 or null, got {self.shards!r}")


class Dist:
    """One process: the strategy that spreads nothing. Collectives are identities, every decision is the plain one.

    ``shards`` > 1 still generates a step in that many shards, each with its own seed, exactly as that many
    processes would (``tests/test_distributed.py`` compares the two).
    """

    rank = 0
    world = 1
    shards_model = False  # whether the policy is sharded across processes (its engine then needs its own copy)
    grad_scale = 1.0  # what each process's loss is scaled by (a sharded model averages gradients over processes)

    def __init__(self, shards: int = 1) -> None:
        self.shards = shards

    @property
    def main(self) -> bool:
        """Whether this process writes the run's files (rank 0)."""
        return self.rank == 0

    def my_shards(self) -> list[int]:
        """The generation shards this process produces (all of them in one process)."""
        per = self.shards // self.world
        return list(range(self.rank * per, (self.rank + 1) * per))

    # -- collectives --------------------------------------------------------------------------------------------
    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast_object(self, obj: Any) -> Any:
        return obj

    def sum_array(self, x: np.ndarray) -> np.ndarray:
        """Element-wise sum over processes, in float64 (exact for the disjoint row sets it is used for)."""
        return x

    def max_int(self, x: int) -> int:
        return x

    def barrier(self) -> None:
        """Every process waits here for the others."""

    # -- the step -----------------------------------------------------------------------------------------------
    def shard_order(self, ids, bins, n) -> tuple[Any, np.ndarray, np.ndarray, list[int]]:
        """The step's prompts reordered shard by shard (whole groups, balanced by rollouts) and the shard bounds
        (``bounds[s]:bounds[s+1]`` are shard ``s``'s prompts). One shard: the order as sampled."""
        if self.shards == 1:
            return ids, bins, n, [0, len(ids)]
        parts = shard_groups(n, self.shards)
        order = np.concatenate(parts)
        bounds = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).tolist()
        reorder = (lambda x: x[order]) if isinstance(ids, np.ndarray) else (lambda x: [x[i] for i in order])
        return reorder(ids), np.asarray(bins)[order], np.asarray(n)[order], bounds

    def generate(self, engine, prompts: list[str], n, bounds: list[int], seed: Callable[..., int],
                 sampling) -> tuple[RolloutBatch, np.ndarray | None]:
        """The step's whole rollout batch on every process, and the rows this process trains on (None: all).

        One shard: the whole batch with the step's seed ``seed()``. Several: this process's shards, each with its
        own seed ``seed(s)``, then every process's shards gathered in shard order."""
        if self.shards == 1:
            roll = engine.generate(prompts, n, seed=seed(), sampling=sampling)
        else:
            mine = [engine.generate(prompts[bounds[s]:bounds[s + 1]], n[bounds[s]:bounds[s + 1]], seed=seed(s),
                                    sampling=sampling) for s in self.my_shards()]
            roll = concat_rollouts([b for per_rank in self.all_gather_object(mine) for b in per_rank])
        return roll, self.local_rows(roll, bounds)

    def local_rows(self, roll: RolloutBatch, bounds: list[int]) -> np.ndarray | None:
        """The rows this process trains on (its shards' groups); None in one process (every row)."""
        return None

    def score(self, reward, roll: RolloutBatch, golds: list[str], local: np.ndarray | None,
              problems: list | None = None):
        """The step's verdicts (``reward.score`` on every row; ``problems``, each row's, to a reward that
        ``reads_problems``: a user's reward functions, gdro.grading.functions)."""
        extra = {} if problems is None else {"problems": problems, "completion_ids": roll.completion_ids}
        return reward.score(roll.texts, golds, roll.finished, roll.lengths, **extra)

    def sync_engine(self, engine, policy: torch.nn.Module) -> None:
        """The engine samples from the updated policy (HF: the policy itself; vLLM: its weights, a LoRA policy's
        merged)."""
        from gdro.models.lora import engine_state, has_adapters

        own = getattr(engine, "model", None) is policy
        engine.sync_weights(StateView(engine_state(policy)) if has_adapters(policy) and not own else policy)

    def stop_requested(self, local: bool) -> bool:
        """Whether any process was asked to stop (so that all stop after the same step)."""
        return local

    def main_only(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """``fn()`` on the process that writes and evaluates (rank 0); ``default`` on the others."""
        return fn() if self.main else default

    # -- the update ---------------------------------------------------------------------------------------------
    def filler(self, model, count: int, pool: np.ndarray) -> list[np.ndarray]:
        """The dummy passes this process adds to its ``count`` micro-batches so that every process runs the same
        number on a sharded ``model`` (none in one process): one row of ``pool`` each, its result unused."""
        return []

    def reduce_update(self, pg: np.ndarray, kl: np.ndarray,
                      totals: dict[str, float]) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """The update's per-response losses and statistic sums over processes (each row computed by one)."""
        return pg, kl, totals

    # -- the model and its state --------------------------------------------------------------------------------
    def shard(self, model: torch.nn.Module) -> torch.nn.Module:
        """The policy as this strategy trains it (one process: as it is)."""
        return model

    def full_state_dict(self, model: torch.nn.Module, *, rank0_only: bool = False) -> dict[str, torch.Tensor]:
        """The model's full (unsharded) state dict: on every process, or (``rank0_only``) on rank 0 alone."""
        return model.state_dict()

    def savable_state(self, model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor] | None:
        """The state ``save_pretrained`` writes: None where the model writes its own (weights in ``dtype``), else
        the full state cast to ``dtype`` with tied weights once."""
        from gdro.models.lora import has_adapters, merged_state_dict

        if has_adapters(model):  # the base model's weights with the adapters merged in (one process: see build)
            return _untied(model, merged_state_dict(model), dtype)
        full = self.full_state_dict(model, rank0_only=True)
        if not any(t.is_floating_point() and t.dtype != dtype for t in full.values()):
            return None
        return _untied(model, full, dtype)

    def full_states(self, model: torch.nn.Module, optimizer) -> tuple[dict, dict]:
        """The policy's and the optimiser's state dicts, whole, for a checkpoint."""
        return model.state_dict(), optimizer.state_dict()

    def load_states(self, model: torch.nn.Module, optimizer, model_state: dict, optim_state: dict) -> None:
        """Restore what :meth:`full_states` saved."""
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optim_state)

    def check_resume(self, saved_world: int, ckpt) -> None:
        """A checkpoint resumes with the number of processes that wrote it (ValueError otherwise)."""
        if saved_world != self.world:
            raise ValueError(f"cannot resume {ckpt}: it was written by {saved_world} process(es); resume it with the "
                             f"same number (this run has {self.world})")


class ProcessGroupDist(Dist):
    """Several processes (``torchrun``): collectives over the default process group, the policy under FSDP2."""

    def __init__(self, rank: int, world: int, shards: int, mesh: Any, cfg: DistConfig) -> None:
        super().__init__(shards)
        self.rank, self.world, self.mesh, self.cfg = rank, world, mesh, cfg
        self.shards_model = True
        self.grad_scale = float(world)  # FSDP averages gradients; the loss is normalised by the whole batch

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def sum_array(self, x: np.ndarray) -> np.ndarray:
        t = torch.as_tensor(np.asarray(x, dtype=np.float64))
        torch.distributed.all_reduce(t)
        return t.numpy()

    def max_int(self, x: int) -> int:
        t = torch.tensor([int(x)], dtype=torch.int64)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return int(t.item())

    def barrier(self) -> None:
        torch.distributed.barrier()

    def local_rows(self, roll: RolloutBatch, bounds: list[int]) -> np.ndarray | None:
        mine = self.my_shards()
        lo, hi = bounds[mine[0]], bounds[mine[-1] + 1]
        return np.flatnonzero((roll.group_index >= lo) & (roll.group_index < hi))

    def score(self, reward, roll: RolloutBatch, golds: list[str], local: np.ndarray | None,
              problems: list | None = None):
        """Each process scores its own rows and the verdicts are all-gathered: the reward's time bound makes a
        verdict depend on timing, so processes scoring the same row could disagree and their controllers drift
        apart."""
        extra = {} if problems is None else {"problems": [problems[i] for i in local],
                                             "completion_ids": [roll.completion_ids[i] for i in local]}
        mine = reward.score([roll.texts[i] for i in local], [golds[i] for i in local], roll.finished[local],
                            roll.lengths[local], **extra)
        rewards, correct = np.zeros(len(roll), dtype=np.float64), np.zeros(len(roll), dtype=bool)
        counts: dict[str, int] = {}
        terms = {name: np.full(len(roll), np.nan) for name in mine.terms}  # a user's reward functions' terms
        errors = dict.fromkeys(mine.terms, 0)
        for rows, batch in self.all_gather_object((local, mine)):
            rewards[rows], correct[rows] = batch.rewards, batch.correct
            for f in dataclasses.fields(batch):
                if f.name.startswith("n_"):
                    counts[f.name] = counts.get(f.name, 0) + int(getattr(batch, f.name))
            for name, values in terms.items():
                values[rows] = batch.terms[name]
                errors[name] += int(batch.term_errors.get(name, 0))
        extra_fields = {"terms": terms, "term_errors": errors} if terms else {}
        return dataclasses.replace(mine, rewards=rewards, correct=correct, **counts, **extra_fields)

    def sync_engine(self, engine, policy: torch.nn.Module) -> None:
        """Each engine holds its own unsharded copy (HF) or its own weights (vLLM): the full weights go in."""
        engine.sync_weights(StateView(self.full_state_dict(policy)))

    def stop_requested(self, local: bool) -> bool:
        return bool(self.max_int(int(local)))

    def filler(self, model, count: int, pool: np.ndarray) -> list[np.ndarray]:
        if not is_sharded(model):  # a model that is not sharded (the reference) issues no collective
            return []
        missing = self.max_int(count) - count
        row = np.asarray([int(pool[0]) if len(pool) else 0])
        return [row] * missing

    def reduce_update(self, pg: np.ndarray, kl: np.ndarray,
                      totals: dict[str, float]) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        keys = sorted({k for ks in self.all_gather_object(sorted(totals)) for k in ks})
        summed = self.sum_array(np.asarray([totals.get(k, 0.0) for k in keys]))
        return self.sum_array(pg), self.sum_array(kl), dict(zip(keys, (float(v) for v in summed)))

    def shard(self, model: torch.nn.Module) -> torch.nn.Module:
        return shard_fsdp(model, self.mesh, self.cfg.reshard_after_forward)

    def full_state_dict(self, model: torch.nn.Module, *, rank0_only: bool = False) -> dict[str, torch.Tensor]:
        """A collective: every process must call it (rank0_only: on rank 0 in host memory, empty elsewhere)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_only))

    def savable_state(self, model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor] | None:
        # a gathered state dict holds tied weights twice (lm_head = embedding): HF cannot tell, so always untie
        return _untied(model, self.full_state_dict(model, rank0_only=True), dtype)

    def full_states(self, model: torch.nn.Module, optimizer) -> tuple[dict, dict]:
        """Gathered to rank 0 in host memory (keyed by parameter name), empty on the other processes."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return self.full_state_dict(model, rank0_only=True), get_optimizer_state_dict(model, optimizer, options=opts)

    def load_states(self, model: torch.nn.Module, optimizer, model_state: dict, optim_state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, model_state, options=opts)
        set_optimizer_state_dict(model, optimizer, optim_state, options=opts)


def _untied(model: torch.nn.Module, full: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``full`` in ``dtype`` with each tied parameter once (the first name, as HF keeps it)."""
    seen, tied = set(), set()
    for name, p in model.named_parameters(remove_duplicate=False):
        (tied if id(p) in seen else seen).add(name if id(p) in seen else id(p))
    return {k: t.to(dtype) if t.is_floating_point() else t for k, t in full.items() if k not in tied}


def init(cfg: DistConfig, device: torch.device, prompts_per_step: int) -> Dist:
    """The strategy of this run: join the process group ``torchrun`` set up (one process: :class:`Dist`, nothing to
    join). Checks that the configured ``shards`` divide among the processes and that each gets a prompt."""
    world = env_world_size()
    shards = cfg.shards or world
    if shards % world:
        raise ValueError(f"dist.shards={shards} must be a multiple of the world size {world}")
    if shards > prompts_per_step:
        raise ValueError(f"dist.shards={shards}: more shards than prompts_per_step={prompts_per_step}")
    if world == 1:
        return Dist(shards=shards)
    backend = resolve_backend(cfg.backend, device.type == "cuda")
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend=backend)
    elif cfg.backend != "auto" and torch.distributed.get_backend() != cfg.backend:
        # gdro-train joins the group before Hydra composes (it reads dist.backend from the command line only)
        raise ValueError(f"dist.backend={cfg.backend}: the process group was started with "
                         f"{torch.distributed.get_backend()}; pass dist.backend on the command line")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (world,))
    return ProcessGroupDist(rank=torch.distributed.get_rank(), world=world, shards=shards, mesh=mesh, cfg=cfg)


def shard_groups(n: Sequence[int], shards: int) -> list[np.ndarray]:
    """Split prompts with ``n[g]`` rollouts into ``shards`` sets of whole groups, balanced by rollouts.

    Greedy: the largest groups first, each to the least-loaded shard (ties: the lower shard); each shard keeps its
    prompts in their original order. Deterministic, so every rank computes the same split.
    """
    n = np.asarray(n, dtype=np.int64)
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    load = np.zeros(shards, dtype=np.int64)
    owner = np.empty(len(n), dtype=np.int64)
    for g in sorted(range(len(n)), key=lambda g: (-n[g], g)):
        s = int(np.argmin(load))
        owner[g] = s
        load[s] += n[g]
    return [np.flatnonzero(owner == s) for s in range(shards)]


class SilentLogger:
    """The metrics logger of a process other than rank 0: rank 0 alone writes ``metrics.jsonl`` and W&B."""

    def __init__(self, run_dir) -> None:
        self.run_dir = run_dir

    def log(self, row: dict[str, Any]) -> dict[str, Any]:
        return row

    def position(self) -> int:
        return 0

    def close(self) -> None:
        pass


class StateView:
    """A stand-in for a module in ``engine.sync_weights``: what it reads is ``state_dict()``."""

    def __init__(self, state: dict[str, torch.Tensor]):
        self._state = state

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._state
