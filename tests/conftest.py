"""Shared test setup: everything offline, a small thread count, helpers to compose configs."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.pop("WANDB_MODE", None)

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"

torch.set_num_threads(min(2, os.cpu_count() or 1))


def compose_cfg(overrides: list[str] | None = None, *, return_hydra_config: bool = False):
    """The composed training config, as ``gdro-train`` would see it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides or [], return_hydra_config=return_hydra_config)


# Small, fast settings for integration tests on the shipped tiny model.
FAST = [
    "logger=jsonl",
    "steps=2",
    "prompts_per_step=8",
    "rollouts_per_prompt=4",
    "save_final=false",
    "progress=false",
    "eval.every=0",
    "eval.k=4",
    "eval.max_problems=24",
    "data.train_size=400",
    "data.test_per_level=3",
]


@pytest.fixture
def fast_overrides() -> list[str]:
    return list(FAST)
