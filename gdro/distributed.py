"""Data-parallel training across processes (``torchrun``): the step's groups split across ranks, FSDP2 underneath.

    torchrun --standalone --nproc_per_node 8 -m gdro.cli experiment=paper model=qwen3-8b

Every rank runs the same controllers on the same inputs (classifier, sampler, allocator: identical state, no
communication needed to agree on prompts, bins and allocations). The step's prompts are then split into
``shards`` whole groups (:func:`shard_groups`, balanced by rollouts); each rank generates its shard with the
shard's own seed, and the shards are all-gathered so that every rank holds the step's whole rollout batch, in the
same order. Each rank scores its own rows and the verdicts are all-gathered as well (a verdict under the reward's
time bound depends on timing). Advantages, multipliers, the controllers' feedback and the metrics are then
computed on every rank alike. The update is data-parallel: each rank forwards and backwards only its own shard's rows, with
the loss's denominators (token-mean over the whole mini-batch) taken from the whole batch, and FSDP2
(``torch.distributed.fsdp.fully_shard``) reduce-scatters the gradients (their mean, times the world size), so the update equals the
one-process update on the same rollouts up to float rounding. The controllers' per-response losses are
summed over ranks (each row is computed on exactly one rank).

A one-process run with ``dist.shards=2`` generates the two shards in turn with the same seeds, so it samples
exactly what a two-process run samples: ``tests/test_distributed.py`` compares the two.
"""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

log = logging.getLogger("gdro")

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


def export_job_environment() -> None:
    """Inside a submitit job of several tasks (``hydra/launcher=slurm`` or ``submitit_local`` with
    ``tasks_per_node`` > 1), set the variables ``torchrun`` would set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT) from the job's environment; elsewhere nothing changes."""
    if "WORLD_SIZE" in os.environ or "SUBMITIT_EXECUTOR" not in os.environ:
        return
    from submitit import JobEnvironment
    from submitit.helpers import TorchDistributedEnvironment

    if JobEnvironment().num_tasks > 1:
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def resolve_backend(backend: str, cuda: bool) -> str:
    """``auto`` → nccl on CUDA, gloo on the CPU; any other name as it is."""
    return backend if backend != "auto" else ("nccl" if cuda else "gloo")


def env_world_size() -> int:
    """The world size ``torchrun`` (or :func:`export_job_environment`) announces (1 without it)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


@dataclass
class Dist:
    """This process's place in the run: ``rank`` of ``world`` (``world == 1``: no process group)."""

    rank: int = 0
    world: int = 1
    shards: int = 1
    mesh: Any = None

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def my_shards(self) -> list[int]:
        """The generation shards this rank produces (all of them in one process)."""
        per = self.shards // self.world
        return list(range(self.rank * per, (self.rank + 1) * per))

    # -- collectives (no-ops in one process) ---------------------------------------------------------------------
    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        if not self.active:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def sum_array(self, x: np.ndarray) -> np.ndarray:
        """Element-wise sum over ranks, in float64 (exact for the disjoint row sets it is used for)."""
        if not self.active:
            return x
        t = torch.as_tensor(np.asarray(x, dtype=np.float64))
        torch.distributed.all_reduce(t)
        return t.numpy()

    def max_int(self, x: int) -> int:
        if not self.active:
            return x
        t = torch.tensor([int(x)], dtype=torch.int64)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return int(t.item())

    def barrier(self) -> None:
        if self.active:
            torch.distributed.barrier()


def init(cfg: DistConfig, device: torch.device) -> Dist:
    """Join the process group ``torchrun`` set up (one process: nothing to join). Checks that the configured
    ``shards`` divide among the ranks."""
    world = env_world_size()
    shards = cfg.shards or world
    if shards % world:
        raise ValueError(f"dist.shards={shards} must be a multiple of the world size {world}")
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
    return Dist(rank=torch.distributed.get_rank(), world=world, shards=shards, mesh=mesh)


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


def shard_fsdp(model: torch.nn.Module, dist: Dist, cfg: DistConfig) -> torch.nn.Module:
    """FSDP2 over the world: each decoder layer its own unit, then the whole model (embedding, norm, head).
    FSDP averages gradients over the processes, so the trainer scales each process's loss (already normalised by
    the whole batch's denominators) by the world size: the update is the sum."""
    from torch.distributed.fsdp import fully_shard

    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"FSDP: {type(model).__name__} has no .model.layers to shard")
    for layer in layers:
        fully_shard(layer, mesh=dist.mesh, reshard_after_forward=cfg.reshard_after_forward)
    fully_shard(model, mesh=dist.mesh, reshard_after_forward=cfg.reshard_after_forward)
    # the log-prob paths call the backbone and the LM head apart (so that no full-vocabulary logits exist); run them
    # inside one call of the root unit, so that its parameters (embedding, final norm, head) are gathered for both
    from torch.distributed.fsdp import register_fsdp_forward_method

    model.gdro_call = types.MethodType(_call, model)
    register_fsdp_forward_method(model, "gdro_call")
    return model


def _call(self, fn, *args, **kwargs):
    out = fn(*args, **kwargs)
    # FSDP hooks the backward on these outputs; a view (e.g. squeeze) would let a later in-place op drop that hook
    if isinstance(out, tuple):
        return tuple(t.clone() if isinstance(t, torch.Tensor) and t._base is not None else t for t in out)
    return out.clone() if isinstance(out, torch.Tensor) and out._base is not None else out


def in_root(model, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` inside the sharded root's gathered parameters (plainly for a model not sharded)."""
    call = getattr(model, "gdro_call", None)
    return call(fn, *args, **kwargs) if call is not None else fn(*args, **kwargs)


def full_state_dict(model: torch.nn.Module, dist: Dist, *, rank0_only: bool = False) -> dict[str, torch.Tensor]:
    """The model's full (unsharded) state dict: on every rank, or (``rank0_only``) on rank 0 in host memory and
    empty elsewhere. A collective under FSDP: every rank must call it."""
    if not dist.active:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_only))


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
