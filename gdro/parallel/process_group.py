"""How the processes of a run (``torchrun``, or a submitit job of several tasks) find each other before the
strategy (gdro.parallel.distributed) exists: the world size announced, a submitit job's environment set as ``torchrun`` sets
it, the process group joined before Hydra starts, and each process's own device."""

from __future__ import annotations

import os

import torch

from gdro.models.loading import process_device


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


def place(device: torch.device) -> torch.device:
    """This process's device: under ``torchrun`` on CUDA without an index, its own GPU (``LOCAL_RANK``)."""
    return process_device(device, env_world_size())


def join_before_hydra(argv: list[str]) -> list[str]:
    """Under ``torchrun`` (several processes): join the process group before Hydra starts, so that every process
    resolves the run dir's ``${now:...}`` to rank 0's start time (one run dir); returns the overrides that make
    only rank 0 write Hydra's files and log there (the others log to stdout). One process: nothing, ``[]``."""
    if env_world_size() == 1:
        return []
    import datetime

    from omegaconf import OmegaConf

    backend = resolve_backend(next((a.split("=", 1)[1] for a in argv if a.startswith("dist.backend=")), "auto"),
                              torch.cuda.is_available())
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend=backend)
    if backend == "nccl":
        place(torch.device("cuda"))
    box = [datetime.datetime.now()]
    torch.distributed.broadcast_object_list(box, src=0)
    OmegaConf.register_new_resolver("now", lambda pattern: box[0].strftime(pattern), use_cache=True, replace=True)
    return ["hydra.output_subdir=null", "hydra/job_logging=stdout"] if torch.distributed.get_rank() > 0 else []
