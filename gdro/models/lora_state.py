"""What a training checkpoint of a LoRA run holds of its policy: the adapters, and a reference to the base weights.

The base weights of a LoRA run never change (only the adapters train, :mod:`gdro.models.lora`), and every start of
the run loads them afresh from the same model dir. So ``policy.pt`` keeps only the adapters' tensors and, under
:data:`BASE_REF`, the base's checksum (:func:`state_digest`: sha256 over every base tensor's name, dtype, shape and
bytes, in name order), its size and how many tensors it has; ``meta.json`` records the same reference
(``lora_base``) beside the model's name. SmolLM2-135M with r = 8 on every linear layer: ~30 MB (adapters and their
AdamW state) instead of ~570 MB.

On resume the adapters are loaded into the freshly loaded model, whose base is checked against the reference
first (the load hook of :func:`gdro.models.lora.add_adapters`): weights that differ from those the adapters were
trained on (a rebuilt ``model.fallback`` dir, the hub's bf16 weights where the run had the de-quantised copy) are
refused in one line. A checkpoint written before this (the base inside ``policy.pt``, format 1) loads as it did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

BASE_REF = "gdro.lora_base"  # policy.pt's entry (not a tensor) naming the base weights a lean policy state needs
LEAN_FORMAT = "lora-adapters"  # BASE_REF["format"]


def is_adapter_key(name: str) -> bool:
    """Whether a policy state-dict key is a LoRA adapter's (peft names them ``<layer>.lora_A.<adapter>.weight``)."""
    return ".lora_" in name


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 over ``state``'s tensors in name order: each one's name, dtype, shape and raw bytes (a canonical
    digest: the same for the same values however they were stored, any device)."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def base_reference(base: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """What a lean checkpoint records of the base weights ``base`` (the non-adapter entries of the state)."""
    unique = {(t.data_ptr(), t.numel(), t.dtype): t.numel() * t.element_size() for t in base.values()}
    return {"format": LEAN_FORMAT, "sha256": state_digest(base), "tensors": len(base),
            "bytes": sum(unique.values())}  # tied weights once, as torch.save stores them


def lean_policy_state(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(lean state, base reference)`` of a LoRA policy's state dict: its adapters and :data:`BASE_REF`; None when
    ``state`` holds no adapter (a full fine-tuning policy, saved whole as before) or is already lean."""
    if BASE_REF in state or not any(is_adapter_key(k) for k in state):
        return None
    base = {k: t for k, t in state.items() if not is_adapter_key(k) and isinstance(t, torch.Tensor)}
    ref = base_reference(base)
    return {**{k: t for k, t in state.items() if k not in base}, BASE_REF: dict(ref)}, ref
