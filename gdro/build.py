"""The one place that turns a Hydra ``DictConfig`` into components (``hydra.utils.instantiate``).

Everything cheap is built and validated first, so a bad value fails with a message naming its key
before any model is loaded.
"""

from __future__ import annotations

import copy
import json
import logging
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from gdro.tracking import RunLogger, git_commit
from gdro.trainer import RunConfig, Trainer

log = logging.getLogger(__name__)

GROUPS = ("model", "data", "classifier", "sampler", "allocator", "rollout", "loss", "optim", "reward", "eval", "logger")
RUN_KEYS = ("seed", "steps", "prompts_per_step", "rollouts_per_prompt", "threads", "save_final", "progress")


class ConfigError(ValueError):
    """An invalid configuration value; the message names the offending key."""


def _instantiate(node: DictConfig, key: str) -> Any:
    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as err:
        cause = err.__cause__ if err.__cause__ is not None else err
        raise ConfigError(f"invalid value in config group '{key}': {key}.{cause}") from err


@dataclass
class Components:
    """Validated, model-free parts of a run."""

    run: RunConfig
    parts: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.parts[key]


def build_components(cfg: DictConfig) -> Components:
    """Instantiate and validate every group option and the run keys — no model is loaded here."""
    missing = [g for g in GROUPS if g not in cfg]
    if missing:
        raise ConfigError(f"config is missing the groups {missing}")
    try:
        run = RunConfig(**{k: cfg[k] for k in RUN_KEYS})
    except ValueError as err:
        raise ConfigError(f"invalid run setting: {err}") from err
    parts = {g: _instantiate(cfg[g], g) for g in GROUPS}
    return Components(run, parts)


def run_name(choices: dict[str, str] | None, seed: int) -> str:
    """A W&B run name from the config choices, e.g. ``tiny-copy-uniform-fixed-s0``."""
    if not choices:
        return f"gdro-s{seed}"
    keys = ("model", "data", "sampler", "allocator")
    parts = [str(choices[k]) for k in keys if choices.get(k)]
    if choices.get("experiment") not in (None, "null"):
        parts.insert(0, str(choices["experiment"]))
    return "-".join(parts + [f"s{seed}"])


def build_trainer(cfg: DictConfig, run_dir: Path, *, choices: dict[str, str] | None = None) -> Trainer:
    """Validate the whole config, then load models and data and wire the trainer."""
    from gdro.models import load_model
    from gdro.rollout.hf import HFEngineConfig, HFGenerator

    comp = build_components(cfg)
    run = comp.run
    if run.threads is not None:
        torch.set_num_threads(run.threads)
    torch.manual_seed(run.seed)
    spec, task, loss_cfg = comp["model"], comp["data"], comp["loss"]
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    meta = {
        "config": resolved,
        "choices": choices or {},
        "git": git_commit(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        # CPU results are bit-for-bit reproducible for a given seed *and* thread count
        "torch_threads": torch.get_num_threads(),
    }
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2, default=str))
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    log.info("loading model %s", spec.name_or_path)
    policy, tokenizer = load_model(spec)
    ref_model = None
    if loss_cfg.beta_kl > 0:
        ref_model = copy.deepcopy(policy).eval().requires_grad_(False)
    eng_cfg = comp["rollout"]
    if not isinstance(eng_cfg, HFEngineConfig):
        raise ConfigError(f"rollout engine {type(eng_cfg).__name__} is not supported by this trainer yet")
    engine = HFGenerator(
        policy, tokenizer, use_chat_template=spec.use_chat_template, max_prompt_len=spec.max_prompt_len,
        batch_size=eng_cfg.batch_size,
    )
    logger = RunLogger(run_dir, comp["logger"], run_name=run_name(choices, run.seed), config=meta)
    return Trainer(
        run=run, policy=policy, tokenizer=tokenizer, engine=engine, reward=comp["reward"],
        sampler=comp["sampler"], allocator=comp["allocator"], classifier=comp["classifier"], train_problems=task.train(), test_problems=task.test(),
        loss_cfg=loss_cfg, optim_cfg=comp["optim"], eval_cfg=comp["eval"],
        train_sampling=eng_cfg.sampling(spec.max_new_tokens), logger=logger, run_dir=run_dir, ref_model=ref_model,
    )
