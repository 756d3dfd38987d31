"""Seeds and RNG streams: one generator per purpose, spawned from the run seed (never Python's salted ``hash()``),
and every stream's state as a checkpoint holds it (so a resumed run draws what it would have drawn)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

STREAM_SAMPLER, STREAM_ROLLOUT, STREAM_UPDATE = 1, 2, 3  # the purposes a run's seed is spawned for
STREAM_ROLLOUT_ROUND = 4  # a step's extra generation rounds (filter=dynamic): (step, round >= 1, *shard)


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed for (run seed, purpose, step...) — independent streams, no Python hash()."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def rng_state(generators: Mapping[str, np.random.Generator]) -> dict[str, Any]:
    """Every RNG stream of the process that training draws from: named numpy generators, torch CPU and CUDA."""
    state: dict[str, Any] = {"numpy": {k: g.bit_generator.state for k, g in generators.items()},
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any], generators: Mapping[str, np.random.Generator]) -> None:
    for k, g in generators.items():
        g.bit_generator.state = state["numpy"][k]
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
