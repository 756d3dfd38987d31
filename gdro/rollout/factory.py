"""The one place that turns a rollout-engine config into an engine: training, ``gdro-eval`` and scripts call it.

The engine samples on the device of the model it is given (``load_model(spec, device=...)`` puts it there).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from gdro.common.rollouts import Generator
from gdro.rollout.hf import HFEngineConfig, HFGenerator
from gdro.rollout.vllm import VLLMEngineConfig, make_vllm_engine  # imports vllm only when an engine is built

# engine config type -> the `rollout=` option that selects it
SUPPORTED = {HFEngineConfig: "hf", VLLMEngineConfig: "vllm"}


def check_engine_config(engine_cfg: Any) -> None:
    """Raise a one-line ``ValueError`` unless ``engine_cfg`` is the config of an engine :func:`make_engine` builds.

    Cheap (no model): call it while validating a config, before any weights load.
    """
    if type(engine_cfg) not in SUPPORTED:
        options = ", ".join(f"{cls.__name__} (rollout={name})" for cls, name in SUPPORTED.items())
        raise ValueError(f"rollout: unsupported engine config {type(engine_cfg).__name__}; supported: {options}")


def make_engine(engine_cfg: Any, model: torch.nn.Module, tokenizer, spec, *,
                policy_sharded: bool = False) -> Generator:
    """The rollout engine for ``engine_cfg`` sampling from ``model`` (on its device).

    ``spec`` is the model's :class:`gdro.models.loading.ModelSpec`: its ``use_chat_template`` and ``max_prompt_len`` say how
    prompts are encoded and which are too long. An unsupported ``engine_cfg`` type is a ``ValueError``.

    Whether the engine needs its own weights is decided here: vLLM always holds its own (loaded from ``spec``'s
    checkpoint, then synced to ``model``); the HF engine samples from ``model`` itself, unless ``policy_sharded``
    (``model`` is about to be sharded across processes, whose forwards are collectives): then it gets its own
    unsharded copy, refreshed by ``sync_weights`` after each update.
    """
    check_engine_config(engine_cfg)
    if isinstance(engine_cfg, VLLMEngineConfig):
        return make_vllm_engine(engine_cfg, model, tokenizer, spec)  # loads spec's checkpoint, then syncs to `model`
    if policy_sharded:
        model = copy.deepcopy(model).eval().requires_grad_(False)
    return HFGenerator(
        model, tokenizer, use_chat_template=spec.use_chat_template, max_prompt_len=spec.max_prompt_len,
        batch_size=engine_cfg.batch_size, shared_prefix=engine_cfg.shared_prefix, prune_every=engine_cfg.prune_every,
    )
