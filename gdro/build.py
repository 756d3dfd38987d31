"""The composition root: the one place that turns a Hydra ``DictConfig`` into components (each ``_target_`` built by
``gdro.validate``) and wires them, in named steps that training and ``gdro-eval`` share:

    build_components   every key and value checked, every component built; nothing loaded
    place              torch's threads and seed, this process's device
    load_splits        the tokenizer, and each split's problems that fit model.max_prompt_len
    open_run_dir       the run dir, run.json and config.yaml (training)
    make_policy        the model, its frozen reference, its rollout engine, sharded across processes where there are
    make_logger        metrics.jsonl and W&B (training)

Everything cheap is built and validated first, so a bad value fails with a message naming its key before any model
is loaded. The execution layer (how a step runs: ``Forward``, the ``Dist`` strategy) is built here and handed in.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import platform
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from gdro import distributed, rundir
from gdro.checkpoint import config_differences, latest_checkpoint, read_meta
from gdro.distributed import Dist
from gdro.interfaces import Problem
from gdro.ioerrors import named_io
from gdro.policy import Forward
from gdro.rundir import LockConfig
from gdro.tracking import RunLogger, RunRecord, git_commit
from gdro.trainer import RunConfig, Trainer
from gdro.validate import ConfigError, field_default, node_schema, validate_config

if TYPE_CHECKING:
    from gdro.checkpoint import CheckpointConfig
    from gdro.distributed import DistConfig
    from gdro.evaluation import EvalConfig
    from gdro.interfaces import (
        DifficultyClassifier,
        MetricLogger,
        ProblemSource,
        PromptSampler,
        Reward,
        RolloutAllocator,
    )
    from gdro.loss import LossConfig
    from gdro.models import ModelSpec
    from gdro.policy import OptimConfig
    from gdro.rollout.base import Generator
    from gdro.tracking import LoggerConfig

log = logging.getLogger(__name__)

GROUPS = ("model", "data", "classifier", "sampler", "allocator", "rollout", "loss", "optim", "reward", "eval", "logger")
COMPONENTS = (*GROUPS, "checkpoint", "dist", "lock")  # config groups (one YAML per option) plus nodes set in train.yaml itself


@dataclass
class Components:
    """Validated, model-free parts of a run: the run settings and each config group's component."""

    run: RunConfig
    model: ModelSpec
    data: ProblemSource
    classifier: DifficultyClassifier
    sampler: PromptSampler
    allocator: RolloutAllocator
    rollout: Any  # the engine's config: gdro.rollout.hf.HFEngineConfig | gdro.rollout.vllm.VLLMEngineConfig
    loss: LossConfig
    optim: OptimConfig
    reward: Reward
    eval: EvalConfig
    logger: LoggerConfig
    checkpoint: CheckpointConfig
    dist: DistConfig
    lock: LockConfig  # the run dir's lock (gdro.rundir): how long a start waits for it

    def __getitem__(self, key: str) -> Any:
        """A group's component by the group's name, e.g. ``comp["sampler"]``."""
        return getattr(self, key)


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
    check_engine(parts["rollout"])
    return Components(run, **parts)


def check_engine(engine_cfg: Any) -> None:
    """A rollout config of an engine the factory builds (a ConfigError otherwise); cheap, before any model."""
    from gdro.rollout import check_engine_config

    try:
        check_engine_config(engine_cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def wandb_identity(choices: dict[str, str] | None, seed: int) -> tuple[str | None, tuple[str, ...]]:
    """The W&B group and tags of a run: in a Hydra multirun the sweep's name (the name of its dir) is the group, so
    a sweep is one W&B group; the tags are the config choices that tell runs apart (``sampler:prompt-gdro``,
    ``allocator:fixed``, ``model:qwen3-1.7b``, ``experiment:paper``, ...) and the seed."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    group = None
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        group = Path(str(HydraConfig.get().sweep.dir)).name
    keys = ("experiment", "model", "data", "sampler", "allocator", "rollout")
    tags = tuple(f"{k}:{choices[k]}" for k in keys if choices and choices.get(k) not in (None, "null"))
    return group, (*tags, f"seed:{seed}")


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
    """A run dir holding an earlier run but no checkpoint: keep its files under ``*.prev-N`` names, start afresh.

    A run.json set aside that still says ``running`` is completed with how that run ended (:func:`_previous_end`,
    as a resume's ``resumes`` entry is): what it left in the lock because its disk was full, or that it ended
    without a word. Else ``run.json.prev-N`` would say ``running`` for ever and the end kept in the lock be lost."""
    files = [run_dir / n for n in ("metrics.jsonl", "run.json", "config.yaml") if (run_dir / n).is_file()]
    if not files:
        return
    _record_end(run_dir / "run.json", run_dir)  # first: if the disk refuses it, nothing is set aside yet
    k = 1
    while any((run_dir / f"{f.name}.prev-{k}").exists() for f in files):
        k += 1
    for f in files:
        f.rename(run_dir / f"{f.name}.prev-{k}")
    log.warning("%s held an earlier run without a checkpoint: its files were kept as *.prev-%d", run_dir, k)


def _record_end(path: Path, run_dir: Path) -> None:
    """Write into the run.json about to be set aside (``path``) how its run ended, if it still says ``running``; the
    lock's deferred fields, once written there, are settled (recorded once)."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # absent or unreadable: kept as it is
    if not isinstance(old, dict) or old.get("status") != "running":
        return
    RunRecord(path, {**old, **_previous_end(old, run_dir)}).update()  # atomic; a full disk: a one-line error
    lock = rundir.held(run_dir)
    if lock is not None:
        lock.settle()


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


# keys a resumed run may change: its length, its machine, how long it waits for the run dir's lock
RESUMABLE_CHANGES = ("steps", "device", "lock.wait_s", "lock.requeue_wait_s")


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
    diffs = config_differences(meta["config"], resolved, ignore=RESUMABLE_CHANGES,
                               is_default=lambda key, value: _is_default(cfg, key, value))
    if diffs:
        raise ConfigError(f"cannot resume {ckpt}: the config differs from the checkpoint's in {len(diffs)} key(s) "
                          f"(only steps, device and lock.* may change): " + "; ".join(diffs))
    if meta["step"] > run.steps:
        raise ConfigError(f"steps={run.steps}: the checkpoint {ckpt} is already at step {meta['step']}")
    return ckpt, meta


def _previous_end(old: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """How the attempt before this one ended, for its ``resumes`` entry: as run.json recorded it, or -- when it
    still says ``running`` (we hold the lock, so that attempt is gone) -- as it left it in the lock (a full disk),
    or that it ended without a word (SIGKILL, out of memory, a node failure)."""
    if old.get("status") != "running":
        return {k: old[k] for k in ("status", "last_step", "error", "interrupted_by") if k in old}
    lock = rundir.held(run_dir)
    if lock is not None and lock.deferred:
        return {**lock.deferred, "recorded": "at the next start: run.json could not be written"}
    return {"status": "unrecorded", "last_step": old.get("last_step"),
            "error": "the process ended without recording it (killed: SIGKILL, out of memory, a node failure)"}


def _run_record(run_dir: Path, meta: dict[str, Any], from_step: int | None) -> RunRecord:
    """run.json for a fresh start, or the existing one with a ``resumes`` entry (from ``from_step``; how the previous
    attempt ended). Nothing is written here: the trainer writes it when this attempt begins to change the run, so a
    rerun refused before that (a bad config, an unreadable checkpoint) leaves a completed run ``completed``."""
    path = run_dir / "run.json"
    data = dict(meta)
    if from_step is not None:
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        entry = {"from_step": from_step, "git": meta["git"], "previous": _previous_end(old, run_dir)}
        data = {**old, **meta, "resumes": [*old.get("resumes", []), entry]}
        data.setdefault("wandb_id", old.get("wandb_id"))
    if not data.get("wandb_id"):
        data["wandb_id"] = uuid.uuid4().hex[:12]
    return RunRecord(path, data)


def place(threads: int | None, device: str, *, seed: int | None = None) -> torch.device:
    """Placing on a device: torch's CPU threads, the seed of its global RNG, and this process's device (under
    ``torchrun`` or a submitit job of several tasks on CUDA, its own GPU). Every entry point's first step."""
    from gdro.models import resolve_device

    if threads is not None:
        torch.set_num_threads(threads)
    if seed is not None:
        torch.manual_seed(seed)
    distributed.export_job_environment()  # a submitit job of several tasks: one process per task
    return distributed.place(resolve_device(device))


def join_processes(cfg: DistConfig, device: torch.device, prompts_per_step: int) -> Dist:
    """The run's distribution strategy (gdro.distributed): one process, or the process group ``torchrun`` set up."""
    try:
        return distributed.init(cfg, device, prompts_per_step)
    except ValueError as err:
        raise ConfigError(str(err)) from err


@dataclass
class Splits:
    """The problems a run or an evaluation uses, fitted to the model: the tokenizer that counted their prompts, the
    kept problems of each split, and how many were dropped as longer than ``model.max_prompt_len``."""

    tokenizer: Any
    problems: dict[str, list[Problem]]
    dropped: dict[str, int]


def load_splits(spec: ModelSpec, splits: Mapping[str, Sequence[Problem]]) -> Splits:
    """Loading the splits: the model's tokenizer, and each split's problems whose encoded prompt fits
    ``model.max_prompt_len``. The others are dropped, counted and logged; a split left empty is a ConfigError."""
    from gdro.data.filtering import drop_long_prompts
    from gdro.models import load_tokenizer

    tokenizer = load_tokenizer(spec)
    out = Splits(tokenizer, {}, {})
    for name, problems in splits.items():
        out.problems[name], out.dropped[name] = drop_long_prompts(
            problems, tokenizer, max_prompt_len=spec.max_prompt_len, use_chat_template=spec.use_chat_template)
        if out.dropped[name]:
            log.warning("%s: dropped %d prompt(s) longer than model.max_prompt_len=%d tokens",
                        name, out.dropped[name], spec.max_prompt_len)
        if not out.problems[name]:
            raise ConfigError(f"model.max_prompt_len={spec.max_prompt_len}: every prompt of {name} is longer")
    return out


def task_splits(task: ProblemSource) -> dict[str, list[Problem]]:
    """A dataset option's train and test problems; a missing dataset or a bad file is a ConfigError naming it."""
    try:
        return {"train": task.train(), "test": task.test()}
    except (ValueError, OSError) as err:
        raise ConfigError(f"data: {err}") from err


@dataclass
class Policy:
    """The model a run trains (or an evaluation samples from), its tokenizer, its rollout engine and, for a KL term,
    its frozen reference."""

    model: torch.nn.Module
    tokenizer: Any
    engine: Generator
    reference: torch.nn.Module | None = None


def make_policy(spec: ModelSpec, engine_cfg: Any, device: torch.device, tokenizer, dist: Dist, *,
                train: bool = False, reference: bool = False) -> Policy:
    """Making the policy: the model on ``device`` (``train``: with fp32 master weights where ``spec`` asks), a frozen
    copy as the reference (in the compute dtype, like the engine), the engine sampling from it, and the model as
    ``dist`` trains it (sharded across processes; the engine factory then gives an HF engine its own copy)."""
    from gdro.models import load_model
    from gdro.rollout import make_engine

    log.info("loading model %s", spec.name_or_path)
    model, tokenizer = load_model(spec, device=device, tokenizer=tokenizer, train=train)
    ref = None
    if reference:
        ref = copy.deepcopy(model).to(device=device, dtype=spec.torch_dtype).eval().requires_grad_(False)
    engine = make_engine(engine_cfg, model, tokenizer, spec, policy_sharded=dist.shards_model)
    return Policy(dist.shard(model), tokenizer, engine, ref)


def _run_meta(resolved: dict[str, Any], choices: dict[str, str] | None, run: RunConfig, dist: Dist,
              splits: Splits) -> dict[str, Any]:
    """What run.json records about this run (and W&B's config)."""
    return {
        "config": resolved,
        "choices": choices or {},
        "git": git_commit(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        # CPU results are bit-for-bit reproducible for a given seed *and* thread count
        "torch_threads": torch.get_num_threads(),
        "steps": run.steps,
        "world_size": dist.world,  # processes (torchrun); each step's groups are split among them
        "data": {"train": len(splits.problems["train"]), "test": len(splits.problems["test"]),
                 "dropped_long_prompts": splits.dropped},
    }


def open_run_dir(run_dir: Path, cfg: DictConfig, meta: dict[str, Any], ckpt_meta: dict[str, Any] | None,
                 dist: Dist) -> RunRecord | None:
    """Opening the run dir (by the main process; every process waits for it): created, an earlier run without a
    checkpoint set aside, run.json (a fresh one, or the resumed run's with a ``resumes`` entry) and config.yaml."""

    def open_() -> RunRecord:
        rundir.check_held(run_dir)  # still ours (gdro.lock removed and taken while the data loaded: stop here)
        run_dir.mkdir(parents=True, exist_ok=True)
        if ckpt_meta is None:
            _previous_run_aside(run_dir)
        record = _run_record(run_dir, meta, ckpt_meta["step"] if ckpt_meta else None)
        with named_io(run_dir / "config.yaml"):
            (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        return record

    record = dist.main_only(open_)
    dist.barrier()
    return record


def make_logger(run_dir: Path, cfg: LoggerConfig, *, run_name: str, meta: dict[str, Any], record: RunRecord | None,
                ckpt_meta: dict[str, Any] | None, dist: Dist, choices: dict[str, str] | None = None,
                seed: int = 0) -> MetricLogger:
    """Making the logger: metrics.jsonl and W&B on the main process (on a resume, metrics.jsonl cut back to where
    the checkpoint left it, and the same W&B run; a sweep one W&B group, each run tagged with its choices), a silent
    one on the others."""
    group, tags = wandb_identity(choices, seed)
    return dist.main_only(lambda: RunLogger(
        run_dir, cfg, run_name=run_name, config=meta, truncate_to=ckpt_meta["metrics_bytes"] if ckpt_meta else None,
        wandb_id=record.data["wandb_id"], group=group, tags=tags,
    ), default=distributed.SilentLogger(run_dir))


def build_trainer(cfg: DictConfig, run_dir: Path, *, choices: dict[str, str] | None = None) -> Trainer:
    """Validate the whole config, resolve a resume, load data, then the model, and wire the trainer.

    Everything that can fail on a user's input (config values, the resume checks, the datasets) is done before
    the model loads.
    """
    comp = build_components(cfg)
    run, spec = comp.run, comp.model
    device = place(run.threads, run.device, seed=run.seed)
    dist = join_processes(comp.dist, device, run.prompts_per_step)
    run_dir, resolved = Path(run_dir), OmegaConf.to_container(cfg, resolve=True)
    ckpt, ckpt_meta = resume_point(run, run_dir, resolved, cfg) or (None, None)
    if ckpt_meta is not None:
        try:
            dist.check_resume(int(ckpt_meta.get("world_size", 1)), ckpt)
        except ValueError as err:
            raise ConfigError(str(err)) from err
    splits = load_splits(spec, task_splits(comp.data))  # data before the model: a bad file fails in seconds
    meta = _run_meta(resolved, choices, run, dist, splits)
    record = open_run_dir(run_dir, cfg, meta, ckpt_meta, dist)
    policy = make_policy(spec, comp.rollout, device, splits.tokenizer, dist, train=True,
                         reference=comp.loss.beta_kl > 0)
    rundir.check_held(run_dir)  # still ours before metrics.jsonl is cut back to the checkpoint (the model loaded)
    try:
        logger = make_logger(run_dir, comp.logger, run_name=run_name(choices, run.seed), meta=meta, record=record,
                             ckpt_meta=ckpt_meta, dist=dist, choices=choices, seed=run.seed)
    except ValueError as err:  # metrics.jsonl shorter than its checkpoint recorded
        raise ConfigError(f"cannot resume {ckpt}: {err}") from err
    sampling = comp.rollout.sampling(spec.max_new_tokens)
    return Trainer(
        run=run, policy=policy.model, tokenizer=policy.tokenizer, engine=policy.engine, reward=comp.reward,
        sampler=comp.sampler, allocator=comp.allocator, classifier=comp.classifier,
        train_problems=splits.problems["train"], test_problems=splits.problems["test"],
        loss_cfg=comp.loss, optim_cfg=comp.optim, eval_cfg=comp.eval, train_sampling=sampling, logger=logger,
        run_dir=run_dir, ref_model=policy.reference, ckpt_cfg=comp.checkpoint, resume_from=ckpt, record=record,
        config=resolved,
        forward=Forward.bind(comp.optim, pad_id=policy.engine.pad_id, temperature=sampling.temperature, dist=dist),
    )
