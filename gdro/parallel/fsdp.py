"""FSDP2 (``torch.distributed.fsdp.fully_shard``) on the policy for the process-group strategy
(gdro.parallel.distributed): each decoder layer its own unit, and the log-prob paths run inside one call of the root unit
(:func:`in_root`) so that its gathered parameters serve both the backbone and the head."""

from __future__ import annotations

import types
from typing import Any

import torch


def shard_fsdp(model: torch.nn.Module, mesh: Any, reshard_after_forward: bool) -> torch.nn.Module:
    """FSDP2 over the world: each decoder layer its own unit, then the whole model (embedding, norm, head).
    FSDP averages gradients over the processes, so the trainer scales each process's loss (already normalised by
    the whole batch's denominators) by the world size: the update is the sum."""
    from torch.distributed.fsdp import fully_shard

    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"FSDP: {type(model).__name__} has no .model.layers to shard")
    for layer in layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
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


def is_sharded(model) -> bool:
    """Whether ``model`` is sharded by :func:`shard_fsdp` (its forwards are collectives)."""
    return getattr(model, "gdro_call", None) is not None
