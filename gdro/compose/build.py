"""The composition root: the one place that turns a Hydra ``DictConfig`` into components (each ``_target_`` built by
``gdro.common.validate``) and wires them, in named steps that training and ``gdro-eval`` share:

    build_components   every key and value checked, every component built; nothing loaded
    place              torch's threads and seed, this process's device
    load_splits        the tokenizer, and each split's problems that fit model.max_prompt_len
    resume_point       the checkpoint a training run continues, once the config may continue it (gdro.run.record)
    open_run_dir       the run dir, run.json and config.yaml (training; gdro.run.record)
    make_policy        the model, its frozen reference, its rollout engine, sharded across processes where there are
    make_logger        metrics.jsonl and W&B (training; gdro.run.record.open_logger)

then the algorithm (gdro.algorithm.trainer.Trainer) and its lifecycle (gdro.run.lifecycle.Lifecycle), paired as a :class:`Training`.

Everything cheap is built and validated first, so a bad value fails with a message naming its key before any model
is loaded. The execution layer (how a step runs: ``Forward``, the ``Dist`` strategy) is built here and handed in.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from gdro.algorithm.execution import Execution
from gdro.algorithm.filters import DynamicSampling, Filter, NoFilter
from gdro.algorithm.settings import RunSettings
from gdro.algorithm.trainer import Trainer
from gdro.common import portable
from gdro.common.interfaces import Controllers, Problem, Problems
from gdro.common.rollouts import close_engine
from gdro.common.threads import AUTO, place_threads, torch_default
from gdro.common.validate import ConfigError, validate_config
from gdro.controllers.skip import NoSkip
from gdro.grading.functions import with_functions
from gdro.loss import Objective
from gdro.models.dir_checks import spec_shape_problem
from gdro.models.loading import Policy, lora_target_problem
from gdro.models.source import model_provenance
from gdro.parallel import distributed, process_group
from gdro.parallel.distributed import Dist
from gdro.policy import Forward
from gdro.run.lifecycle import Lifecycle, restore
from gdro.run.lock import LockConfig
from gdro.run.record import open_logger, open_run_dir, resume_point, run_meta

if TYPE_CHECKING:
    from gdro.algorithm.heldout import EvalConfig
    from gdro.algorithm.tracking import LoggerConfig, RunRecord
    from gdro.common.interfaces import (
        DifficultyClassifier,
        MetricLogger,
        ProblemSource,
        PromptSampler,
        Reward,
        RolloutAllocator,
    )
    from gdro.loss import AdvantageEstimator, Loss
    from gdro.models.loading import ModelSpec
    from gdro.parallel.distributed import DistConfig
    from gdro.policy import OptimConfig
    from gdro.run.checkpoint import CheckpointConfig

log = logging.getLogger(__name__)

GROUPS = ("model", "data", "classifier", "sampler", "skip", "allocator", "filter", "rollout", "advantage", "loss", "optim",
          "reward", "eval", "logger")
COMPONENTS = (*GROUPS, "checkpoint", "dist", "lock")  # config groups (one YAML per option) plus nodes set in train.yaml itself


@dataclass
class Components:
    """Validated, model-free parts of a run: the run settings and each config group's component."""

    settings: RunSettings
    model: ModelSpec
    data: ProblemSource
    classifier: DifficultyClassifier
    sampler: PromptSampler  # with skip=greso, wrapped in its pre-rollout skip (gdro.controllers.skip)
    skip: Any  # gdro.controllers.skip.NoSkip | GresoSkip
    allocator: RolloutAllocator
    filter: Filter  # which generated groups a step trains on (gdro.algorithm.filters)
    rollout: Any  # the engine's config: gdro.rollout.hf.HFEngineConfig | gdro.rollout.vllm.VLLMEngineConfig
    advantage: AdvantageEstimator  # rewards -> advantages (gdro.loss.advantage_estimators), handed to the loss
    loss: Loss
    optim: OptimConfig
    reward: Reward
    eval: EvalConfig
    logger: LoggerConfig
    checkpoint: CheckpointConfig
    dist: DistConfig
    lock: LockConfig  # the run dir's lock (gdro.run.lock): how long a start waits for it


def build_components(cfg: DictConfig) -> Components:
    """Check every key and value (gdro.common.validate), then build the run settings and every group's component.

    Unknown keys, wrong types, ranges and cross-field rules fail here as a one-line ConfigError naming the key;
    no model or dataset is loaded.
    """
    check_moved_keys(cfg)
    run, parts = validate_config(cfg, COMPONENTS, RunSettings)
    try:  # cross-group rule: the allocator must be able to meet the mean budget n̄ (Eq. 19 feasible)
        parts["allocator"].check_budget(run.rollouts_per_prompt)
    except ValueError as err:
        raise ConfigError(f"rollouts_per_prompt={run.rollouts_per_prompt}: {err} "
                          f"(allocator {type(parts['allocator']).__name__})") from err
    check_groups_can_mix(parts["filter"], run.rollouts_per_prompt, parts["allocator"])
    check_advantage(parts["advantage"], parts["loss"], run.rollouts_per_prompt, parts["allocator"])
    check_engine(parts["rollout"])
    check_overlong(getattr(parts["reward"], "config", None), parts["model"].max_new_tokens)
    if not isinstance(parts["skip"], NoSkip) and parts["sampler"].reads_labels:
        raise ConfigError("skip=greso cannot wrap a control that reads the generator's labels (sampler "
                          f"{type(parts['sampler']).__name__}): the oracle would no longer be the oracle")
    parts["sampler"] = parts["skip"].wrap(parts["sampler"])
    parts["reward"] = with_functions(parts["reward"])  # reward.functions beside math-verify (checked, imported above)
    check_golds_of(parts["data"], parts["reward"])
    return Components(run, **parts)


def check_golds_of(data: Any, reward: Any) -> None:
    """data=custom without golds (``data.answer_key: null``) needs a reward that reads none (gdro.data.custom)."""
    from gdro.data.custom import check_golds

    try:
        check_golds(data, reward)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def check_groups_can_mix(flt: Filter, n_bar: int, allocator: Any) -> None:
    """``filter=dynamic`` keeps only groups whose rewards differ; a group of one rollout never holds two. With n̄ = 1
    every group is one (every allocator spends n̄ × #prompts exactly, at least one rollout a prompt; an allocator
    with n_max = 1 allows no other n̄): every round of every step would keep nothing. A ConfigError up front."""
    if not isinstance(flt, DynamicSampling) or n_bar != 1:
        return
    capped = getattr(allocator, "n_max", None) == 1
    raise ConfigError(f"rollouts_per_prompt=1{' (allocator.n_max=1)' if capped else ''}: filter=dynamic keeps only "
                      "groups whose rewards differ, and every group is then a single rollout, so no round of any step "
                      f"could keep one; set rollouts_per_prompt >= 2{' and allocator.n_max >= 2' if capped else ''}, "
                      "or filter=none")


def check_overlong(reward_cfg: Any, max_new_tokens: int) -> None:
    """DAPO's overlong punishment (``reward.overlong_buffer`` > 0) starts ``overlong_buffer`` tokens before its
    limit ``reward.overlong_max_tokens``; a limit past ``model.max_new_tokens`` (the longest a completion can be)
    punishes less than asked, or, once the buffer starts past it too, never at all. A ConfigError up front."""
    limit = getattr(reward_cfg, "overlong_max_tokens", None)
    if not getattr(reward_cfg, "overlong_buffer", 0) or not isinstance(limit, int) or limit <= max_new_tokens:
        return
    raise ConfigError(f"reward.overlong_max_tokens={limit}: more than model.max_new_tokens={max_new_tokens}, the "
                      f"longest a completion can be, so the overlong punishment (reward.overlong_buffer="
                      f"{reward_cfg.overlong_buffer}) never applies in full; set it to at most {max_new_tokens} "
                      "(its default: ${model.max_new_tokens})")


def check_moved_keys(cfg: DictConfig) -> None:
    """A key gdro moved to another group (gdro.run.migrations, kind ``key``: #50's ``loss.scale_rewards`` is
    ``advantage.scale_rewards``), set in a preset or with ``+key=``: a ConfigError naming the new key (unless the
    group's component, a user's own, has a key of that name)."""
    from gdro.common.validate import node_schema
    from gdro.run.migrations import moved_key

    for group in GROUPS:
        node = cfg.get(group)
        for key in (node if isinstance(node, DictConfig) else ()):
            moved = moved_key(f"{group}.{key}")
            if moved is not None and key not in node_schema(node, group)[1].fields:
                raise ConfigError(f"{group}.{key}: moved to {moved.new} ({moved.why}); set {moved.new} instead")


def check_advantage(advantage: Any, loss: Any, n_bar: int, allocator: Any) -> None:
    """The advantage estimator against the run: the smallest group the allocator can give (n̄, or its ``n_min``) is
    one the estimator is defined on; the loss computes no advantages of its own (a loss class written before #50
    that still defines ``advantages`` would be silently unused)."""
    from gdro.loss.advantage_estimators import check_group_sizes

    n_min = getattr(allocator, "n_min", None)
    key, smallest = ("allocator.n_min", n_min) if n_min is not None and n_min < n_bar else ("rollouts_per_prompt", n_bar)
    try:
        check_group_sizes(advantage, smallest, key)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    if callable(getattr(loss, "advantages", None)):
        raise ConfigError(f"loss._target_={type(loss).__module__}.{type(loss).__qualname__}: defines advantages(), "
                          "which gdro no longer calls: the advantages are the advantage group's since #50 "
                          "(advantage=grpo|dr-grpo|rloo|reinforce-pp|grpo-passk, or your own; docs/extending.md)")


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
    ``allocator:fixed``, ``model:qwen3-1.7b``, ``experiment:paper``, ``method:knapsack``, ...) and the seed."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    group = None
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        group = Path(str(HydraConfig.get().sweep.dir)).name
    keys = ("experiment", "method", "model", "data", "sampler", "allocator", "rollout")
    tags = tuple(f"{k}:{choices[k]}" for k in keys if choices and choices.get(k) not in (None, "null"))
    return group, (*tags, f"seed:{seed}")


def run_name(choices: dict[str, str] | None, seed: int) -> str:
    """A W&B run name from the config choices, e.g. ``tiny-copy-uniform-fixed-s0``."""
    if not choices:
        return f"gdro-s{seed}"
    keys = ("model", "data", "sampler", "allocator")
    parts = [str(choices[k]) for k in keys if choices.get(k)]
    if choices.get("method") not in (None, "null"):
        parts.insert(0, str(choices["method"]))
    if choices.get("experiment") not in (None, "null"):
        parts.insert(0, str(choices["experiment"]))
    return "-".join(parts + [f"s{seed}"])


def place(threads: int | str | None, device: str, *, seed: int | None = None) -> torch.device:
    """Placing on a device: torch's CPU threads, the seed of its global RNG, and this process's device (under
    ``torchrun`` or a submitit job of several tasks on CUDA, its own GPU). Every entry point's first step."""
    from gdro.models.loading import resolve_device

    chosen = place_threads(threads, portable.enabled())  # threads=auto: the free cores (gdro.common.threads)
    if threads == AUTO:  # (debug: a refused start writes nothing, the job log included)
        log.debug("threads=auto: %d thread(s) (torch's default: %d)", chosen, torch_default())
    if seed is not None:
        torch.manual_seed(seed)
    process_group.export_job_environment()  # a submitit job of several tasks: one process per task
    return process_group.place(resolve_device(device))


def join_processes(cfg: DistConfig, device: torch.device, prompts_per_step: int) -> Dist:
    """The run's distribution strategy (gdro.parallel.distributed): one process, or the process group ``torchrun`` set up."""
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
    from gdro.models.loading import load_tokenizer

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


def make_policy(spec: ModelSpec, engine_cfg: Any, device: torch.device, tokenizer, dist: Dist, *,
                train: bool = False, reference: bool = False) -> Policy:
    """Making the policy: the model on ``device`` (``train``: with fp32 master weights where ``spec`` asks), a frozen
    copy as the reference (in the compute dtype, like the engine), the engine sampling from it, and the model as
    ``dist`` trains it (sharded across processes; the engine factory then gives an HF engine its own copy)."""
    from gdro.models.loading import load_model
    from gdro.models.lora import BaseView, has_adapters
    from gdro.rollout import make_engine

    log.info("loading model %s", spec.name_or_path)
    model, tokenizer = load_model(spec, device=device, tokenizer=tokenizer, train=train)
    ref = None
    if reference:
        ref = BaseView(model) if has_adapters(model) else \
            copy.deepcopy(model).to(device=device, dtype=spec.torch_dtype).eval().requires_grad_(False)
    engine = make_engine(engine_cfg, model, tokenizer, spec, policy_sharded=dist.shards_model)
    return Policy(dist.shard(model), tokenizer, engine, ref)


def make_logger(run_dir: Path, cfg: LoggerConfig, *, run_name: str, meta: dict[str, Any], record: RunRecord | None,
                resume: tuple[Path, dict[str, Any]] | None, dist: Dist, choices: dict[str, str] | None = None,
                seed: int = 0) -> MetricLogger:
    """Making the logger (gdro.run.record.open_logger): metrics.jsonl and W&B on the main process, a silent one on the
    others; a sweep one W&B group, each run tagged with its choices."""
    group, tags = wandb_identity(choices, seed)
    return open_logger(run_dir, cfg, run_name=run_name, meta=meta, record=record, resume=resume, dist=dist,
                       group=group, tags=tags)


@dataclass
class Training:
    """A training run as the composition root wires it: the algorithm (``trainer``) inside its lifecycle
    (``lifecycle``). :meth:`fit` is ``lifecycle.fit(trainer)``."""

    lifecycle: Lifecycle
    trainer: Trainer

    def fit(self) -> list[dict[str, Any]]:
        return self.lifecycle.fit(self.trainer)

    @property
    def logger(self) -> MetricLogger:
        return self.lifecycle.logger


def build_training(cfg: DictConfig, run_dir: Path, *, choices: dict[str, str] | None = None,
                   accepted: Callable[[], object] | None = None) -> Training:
    """Validate the whole config, resolve a resume, load data, then the model, and wire the trainer in its run.

    Everything that can fail on a user's input (config values, the resume checks, the datasets, a model dir that
    does not fit its config) is done before the model loads, and the checkpoint a run continues is loaded into the
    trainer (a file missing or damaged, LoRA adapters whose base changed) before the run dir opens: ``accepted``
    (gdro-train: the ``.hydra/`` files written) is called once the start is accepted, right before, so a refused
    start changes no file in the run dir.
    """
    comp = build_components(cfg)
    run, spec = comp.settings, comp.model
    device = place(run.threads, run.device, seed=run.seed)
    dist = join_processes(comp.dist, device, run.prompts_per_step)
    if comp.model.lora.enabled and dist.world > 1:
        raise ConfigError(f"model.lora.r={comp.model.lora.r} with {dist.world} processes: LoRA is not supported with FSDP2 "
                          "here yet; train it in one process, or set model.lora.r=0")
    if dist.world > 1 and not isinstance(comp.filter, NoFilter):  # the kept groups would differ between processes
        raise ConfigError(f"filter={type(comp.filter).__name__} runs in one process only (got {dist.world})")
    run_dir, resolved = Path(run_dir), OmegaConf.to_container(cfg, resolve=True)
    resume = resume_point(run, run_dir, resolved, dist)  # checked: resume=, the config, steps, the processes
    ckpt, ckpt_meta = resume or (None, None)
    splits = load_splits(spec, task_splits(comp.data))  # data before the model: a bad file fails in seconds
    meta = run_meta(resolved, choices, run, dist.world, {
        "train": len(splits.problems["train"]), "test": len(splits.problems["test"]),
        "dropped_long_prompts": splits.dropped})
    meta["model"] = model_provenance(spec)  # which weights: the path read, a fallback used, how gdro built them
    problem = spec_shape_problem(spec) or lora_target_problem(spec)  # weights that do not fit its config.json, LoRA
    #                                                                    targets it lacks: refused before the run dir opens
    if problem is not None:
        raise ConfigError(problem)
    policy = make_policy(spec, comp.rollout, device, splits.tokenizer, dist, train=True,
                         reference=comp.loss.beta_kl > 0)
    sampling = comp.rollout.sampling(spec.max_new_tokens)
    if comp.optim.engine_is_mode != "none":  # the engine-trainer importance weight reads the engine's log-probs
        sampling = dataclasses.replace(sampling, logprobs=True)
    trainer = Trainer(
        settings=run, policy=policy, reward=comp.reward,
        controllers=Controllers(comp.sampler, comp.allocator, comp.classifier),
        problems=Problems(splits.problems["train"], splits.problems["test"]),
        objective=Objective(comp.advantage, comp.loss), optim_cfg=comp.optim, eval_cfg=comp.eval,
        train_sampling=sampling, filter=comp.filter,
        execution=Execution(Forward.bind(comp.optim, pad_id=policy.engine.pad_id, temperature=sampling.temperature,
                                         dist=dist)),
    )
    try:
        first = restore(trainer, ckpt, dist)  # a checkpoint that cannot be loaded: refused before the start is accepted
        if accepted is not None:
            accepted()
        record = open_run_dir(run_dir, OmegaConf.to_yaml(cfg, resolve=True), meta, ckpt_meta, dist)
        logger = make_logger(run_dir, comp.logger, run_name=run_name(choices, run.seed), meta=meta, record=record,
                             resume=resume, dist=dist, choices=choices, seed=run.seed)
    except BaseException:
        close_engine(policy.engine)  # vLLM: its processes shut down here, not left to the interpreter's exit
        raise
    return Training(Lifecycle(run, run_dir, dist, logger, record, comp.checkpoint, ckpt, resolved, first=first),
                    trainer)
