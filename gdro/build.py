"""The one place that turns a Hydra ``DictConfig`` into components (each ``_target_`` built by ``gdro.validate``).

Everything cheap is built and validated first, so a bad value fails with a message naming its key
before any model is loaded.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import platform
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from gdro.checkpoint import config_differences, latest_checkpoint, read_meta
from gdro.policy import Forward
from gdro.tracking import RunLogger, RunRecord, git_commit
from gdro.trainer import RunConfig, Trainer
from gdro.validate import ConfigError, field_default, node_schema, validate_config

log = logging.getLogger(__name__)

GROUPS = ("model", "data", "classifier", "sampler", "allocator", "rollout", "loss", "optim", "reward", "eval", "logger")
COMPONENTS = (*GROUPS, "checkpoint", "dist")  # config groups (one YAML per option) plus nodes set in train.yaml itself


@dataclass
class Components:
    """Validated, model-free parts of a run."""

    run: RunConfig
    parts: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.parts[key]


def build_components(cfg: DictConfig) -> Components:
    """Check every key and value (gdro.validate), then build the run settings and every group's component.

    Unknown keys, wrong types, ranges and cross-field rules fail here as a one-line ConfigError naming the key;
    no model or dataset is loaded.
    """
    run, parts = validate_config(cfg, COMPONENTS, RunConfig)
    try:  # cross-group rule: the allocator must be able to meet the mean budget n̄ (Eq. 19 feasible)
        parts["allocator"].check_budget(run.rollouts_per_prompt)
    except ValueError as err:
        raise ConfigError(f"rollouts_per_prompt={run.rollouts_per_prompt}: {err} "
                          f"(allocator {type(parts['allocator']).__name__})") from err
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


def _previous_run_aside(run_dir: Path) -> None:
    """A run dir holding an earlier run but no checkpoint: keep its files under ``*.prev-N`` names, start afresh."""
    files = [run_dir / n for n in ("metrics.jsonl", "run.json", "config.yaml") if (run_dir / n).is_file()]
    if not files:
        return
    k = 1
    while any((run_dir / f"{f.name}.prev-{k}").exists() for f in files):
        k += 1
    for f in files:
        f.rename(run_dir / f"{f.name}.prev-{k}")
    log.warning("%s held an earlier run without a checkpoint: its files were kept as *.prev-%d", run_dir, k)


def _is_default(cfg: DictConfig, key: str, value: Any) -> bool:
    """Whether dotted ``key`` holds its component's Python default (= its YAML default, tests/test_defaults.py)."""
    group, _, name = key.partition(".")
    if not name:
        target, name = RunConfig, group
    elif isinstance(cfg.get(group), DictConfig) and "_target_" in cfg[group] and "." not in name:
        target, _ = node_schema(cfg[group], group)
    else:
        return False
    default = field_default(target, name)
    if default is dataclasses.MISSING:
        return False
    if isinstance(default, (list, tuple)) or isinstance(value, (list, tuple)):
        return isinstance(default, (list, tuple)) and isinstance(value, (list, tuple)) and list(default) == list(value)
    return type(default) is type(value) and default == value  # True is not 1


def resume_point(run: RunConfig, run_dir: Path, resolved: dict[str, Any], cfg: DictConfig
                 ) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint this run continues from and its ``meta.json`` (None: a fresh start), after checking it may be
    resumed."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return None
    meta = read_meta(ckpt)
    if not run.resume:
        raise ConfigError(f"resume=false: {run_dir} holds a checkpoint (step {meta['step']}) and is left untouched; "
                          "pass resume=true to continue it, or choose another hydra.run.dir")
    diffs = config_differences(meta["config"], resolved, ignore=("steps", "device"),
                               is_default=lambda key, value: _is_default(cfg, key, value))
    if diffs:
        raise ConfigError(f"cannot resume {ckpt}: the config differs from the checkpoint's in {len(diffs)} key(s) "
                          f"(only steps and device may change): " + "; ".join(diffs))
    if meta["step"] > run.steps:
        raise ConfigError(f"steps={run.steps}: the checkpoint {ckpt} is already at step {meta['step']}")
    return ckpt, meta


def _run_record(run_dir: Path, meta: dict[str, Any], from_step: int | None) -> RunRecord:
    """run.json for a fresh start, or the existing one (with a ``resumes`` entry) when resuming at ``from_step``."""
    path = run_dir / "run.json"
    data = dict(meta)
    if from_step is not None:
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        data = {**old, **meta, "resumes": [*old.get("resumes", []), {"from_step": from_step, "git": meta["git"]}]}
        data.setdefault("wandb_id", old.get("wandb_id"))
    if not data.get("wandb_id"):
        data["wandb_id"] = uuid.uuid4().hex[:12]
    record = RunRecord(path, data)
    record.update(status="running", last_step=from_step or 0)
    return record


def build_trainer(cfg: DictConfig, run_dir: Path, *, choices: dict[str, str] | None = None) -> Trainer:
    """Validate the whole config, resolve a resume, load data, then the model, and wire the trainer.

    Everything that can fail on a user's input (config values, the resume checks, the datasets) is done before
    the model loads.
    """
    from gdro import distributed
    from gdro.data.filtering import drop_long_prompts
    from gdro.models import load_model, load_tokenizer, resolve_device
    from gdro.rollout import check_engine_config, make_engine

    comp = build_components(cfg)
    run = comp.run
    if run.threads is not None:
        torch.set_num_threads(run.threads)
    torch.manual_seed(run.seed)
    distributed.export_job_environment()  # a submitit job of several tasks: one process per task
    device = distributed.place(resolve_device(run.device))
    try:
        dist = distributed.init(comp["dist"], device, run.prompts_per_step)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    spec, task, loss_cfg, eng_cfg = comp["model"], comp["data"], comp["loss"], comp["rollout"]
    try:
        check_engine_config(eng_cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    run_dir = Path(run_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resume = resume_point(run, run_dir, resolved, cfg)
    ckpt, ckpt_meta = resume if resume is not None else (None, None)
    if ckpt_meta is not None:
        try:
            dist.check_resume(int(ckpt_meta.get("world_size", 1)), ckpt)
        except ValueError as err:
            raise ConfigError(str(err)) from err

    # data before the model: a missing dataset or a bad file fails in seconds, naming it
    try:
        train_problems, test_problems = task.train(), task.test()
    except (ValueError, OSError) as err:
        raise ConfigError(f"data: {err}") from err
    tokenizer = load_tokenizer(spec)
    fit = {"max_prompt_len": spec.max_prompt_len, "use_chat_template": spec.use_chat_template}
    train_problems, dropped_train = drop_long_prompts(train_problems, tokenizer, **fit)
    test_problems, dropped_test = drop_long_prompts(test_problems, tokenizer, **fit)
    for split, dropped, kept in (("train", dropped_train, train_problems), ("test", dropped_test, test_problems)):
        if dropped:
            log.warning("%s split: dropped %d prompt(s) longer than model.max_prompt_len=%d tokens",
                        split, dropped, spec.max_prompt_len)
        if not kept:
            raise ConfigError(f"model.max_prompt_len={spec.max_prompt_len}: every {split} prompt is longer")

    if dist.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if ckpt is None:
            _previous_run_aside(run_dir)
    meta = {
        "config": resolved,
        "choices": choices or {},
        "git": git_commit(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        # CPU results are bit-for-bit reproducible for a given seed *and* thread count
        "torch_threads": torch.get_num_threads(),
        "steps": run.steps,
        "world_size": dist.world,  # processes (torchrun); each step's groups are split among them
        "data": {"train": len(train_problems), "test": len(test_problems),
                 "dropped_long_prompts": {"train": dropped_train, "test": dropped_test}},
    }
    record = None
    if dist.main:  # one process writes the run's files
        record = _run_record(run_dir, meta, ckpt_meta["step"] if ckpt_meta else None)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    dist.barrier()

    log.info("loading model %s", spec.name_or_path)
    policy, tokenizer = load_model(spec, device=device, tokenizer=tokenizer, train=True)  # master weights
    ref_model = None
    if loss_cfg.beta_kl > 0:  # frozen: kept in the compute dtype (bf16 at the paper's scale), like the engine
        ref_model = copy.deepcopy(policy).to(device=device, dtype=spec.torch_dtype).eval().requires_grad_(False)
    # each process's engine samples its own prompts; across processes it is refreshed from the full weights
    engine = make_engine(eng_cfg, policy, tokenizer, spec, policy_sharded=dist.shards_model)
    policy = dist.shard(policy, comp["dist"])
    logger = dist.main_only(lambda: RunLogger(
        run_dir, comp["logger"], run_name=run_name(choices, run.seed), config=meta,
        truncate_to=ckpt_meta["metrics_bytes"] if ckpt_meta else None, wandb_id=record.data["wandb_id"],
    ), default=distributed.SilentLogger(run_dir))
    train_sampling = eng_cfg.sampling(spec.max_new_tokens)
    forward = Forward.bind(comp["optim"], pad_id=engine.pad_id, temperature=train_sampling.temperature, dist=dist)
    return Trainer(
        run=run, policy=policy, tokenizer=tokenizer, engine=engine, reward=comp["reward"],
        sampler=comp["sampler"], allocator=comp["allocator"], classifier=comp["classifier"],
        train_problems=train_problems, test_problems=test_problems,
        loss_cfg=loss_cfg, optim_cfg=comp["optim"], eval_cfg=comp["eval"],
        train_sampling=train_sampling, logger=logger, run_dir=run_dir, forward=forward, ref_model=ref_model,
        ckpt_cfg=comp["checkpoint"], resume_from=ckpt, record=record, config=resolved,
    )
