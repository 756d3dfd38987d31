"""Every option of every config group composes and instantiates; bad input fails early and clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import MissingConfigException
from hydra.utils import get_class
from omegaconf import OmegaConf

from gdro.common.validate import ConfigError
from gdro.compose.build import GROUPS, build_components
from tests.conftest import CONF, REPO, compose_cfg


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


ALL = [(g, o) for g in GROUPS for o in options(g)]


def test_every_group_has_options():
    for g in GROUPS:
        assert options(g), f"config group {g} has no options"


@pytest.mark.parametrize(("group", "option"), ALL, ids=[f"{g}={o}" for g, o in ALL])
def test_compose_and_instantiate_every_option(group, option):
    cfg = compose_cfg([f"{group}={option}"])
    comp = build_components(cfg)  # instantiates every group; loads no model weights
    target = OmegaConf.select(cfg, f"{group}._target_")
    obj = getattr(comp, group)
    assert type(obj) is get_class(target)  # the class itself (a package may re-export it: gdro.policy.OptimConfig)


@pytest.mark.parametrize("experiment", options("experiment"))
def test_experiments_compose(experiment):
    cfg = compose_cfg([f"experiment={experiment}"])
    build_components(cfg)


def test_paper_experiment_values():
    cfg = compose_cfg(["experiment=paper", "model=qwen3-1.7b"])
    comp = build_components(cfg)
    assert comp.model.name_or_path == "Qwen/Qwen3-1.7B-Base"
    assert comp.model.dtype == "bfloat16"
    assert comp.loss.clip_low == 0.2 and comp.loss.clip_high == 0.28 and comp.loss.beta_kl == 0.001
    assert comp.optim.lr == 1e-6 and comp.settings.prompts_per_step == 256 and comp.settings.rollouts_per_prompt == 4
    assert comp.reward.incorrect == -1.0


@pytest.mark.parametrize(("experiment", "sampler", "allocator"), [
    ("paper", "UniformSampler", "FixedAllocator"),
    ("paper-prompt-gdro", "PromptGDRO", "FixedAllocator"),
    ("paper-rollout-gdro", "UniformSampler", "RolloutGDRO"),
])
def test_each_paper_preset_is_one_row_of_the_paper(experiment, sampler, allocator):
    """experiment=paper is the GRPO row whatever the default sampler; each GDRO preset adds exactly one adversary."""
    comp = build_components(compose_cfg([f"experiment={experiment}", "model=qwen3-1.7b"]))
    assert type(comp.sampler).__name__ == sampler and type(comp.allocator).__name__ == allocator


def test_toy_frontier_experiment_values():
    """Each prompt visited about as often as in the paper (150 steps x 32 / 256 = 18.75), levels past the warm
    start, half sticky strings, pass@1 bins over recent visits."""
    comp = build_components(compose_cfg(["experiment=toy-frontier"]))
    data, clf = comp.data, comp.classifier
    assert comp.settings.steps * comp.settings.prompts_per_step / data.train_size >= 18
    assert data.max_level == 12 and data.sticky_frac == 0.5
    assert clf.estimator == "unbiased_passk" and clf.k == 1 and clf.window == 4
    assert len(data.train()) == 256


def test_paper_cfg_job_shows_device_precision_and_the_engines_memory(tmp_path):
    """`gdro-train experiment=paper model=qwen3-1.7b rollout=vllm --cfg job`, as a user runs it."""
    out = subprocess.run([sys.executable, "-m", "gdro.cli.train", "experiment=paper", "model=qwen3-1.7b", "rollout=vllm",
                          "--cfg", "job"], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    cfg = OmegaConf.create(out)
    assert cfg.device == "auto"
    assert cfg.model.dtype == "bfloat16" and cfg.model.master_dtype == "float32"
    assert cfg.model.gradient_checkpointing is True and cfg.optim.micro_batch_tokens == 32768
    assert cfg.rollout._target_ == "gdro.rollout.vllm.VLLMEngineConfig"
    assert cfg.rollout.gpu_memory_utilization == 0.45 and cfg.rollout.enable_sleep_mode is False


@pytest.mark.parametrize("name", [p.stem for p in (CONF / "memory").glob("*.yaml")])
def test_memory_files_name_a_model_and_an_engine_and_compose(name):
    """conf/memory/<model>-<rollout>.yaml is picked by the model and engine choices; each validates."""
    model, rollout = name.rsplit("-", 1)
    assert model in options("model") and rollout in options("rollout"), name
    cfg = compose_cfg([f"model={model}", f"rollout={rollout}"])
    built = build_components(cfg)
    assert built.model.gradient_checkpointing is True and built.optim.micro_batch_tokens is not None
    default = compose_cfg(["model=tiny", f"rollout={rollout}"])  # the tiny model has no memory file: defaults
    assert default.optim.micro_batch_tokens is None and default.model.gradient_checkpointing is False


@pytest.mark.parametrize("size", ["1.7B", "4B", "8B"])
def test_qwen3_options_name_real_models(size):
    cfg = compose_cfg([f"model=qwen3-{size.lower()}"])
    assert cfg.model.name_or_path == f"Qwen/Qwen3-{size}-Base"
    assert cfg.model.max_new_tokens == 4096


def test_unknown_option_names_choices():
    with pytest.raises(MissingConfigException) as err:
        compose_cfg(["sampler=nope"])
    assert "uniform" in str(err.value)  # Hydra lists the available options


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("optim.lr=-1e-4", "lr"),
        ("loss.clip_low=0", "clip_low"),
        ("loss.clip_high=-0.1", "clip_high"),
        ("loss.beta_kl=-1", "beta_kl"),
        ("loss.agg=bogus", "agg"),
        ("eval.k=0", "k"),
        ("steps=-3", "steps"),
        ("prompts_per_step=0", "prompts_per_step"),
        ("rollouts_per_prompt=0", "rollouts_per_prompt"),
        ("rollout.temperature=0", "temperature"),
        ("rollout.top_p=1.5", "top_p"),
        ("reward.timeout_s=0", "timeout_s"),
        ("model.dtype=float7", "dtype"),
        ("model.max_new_tokens=0", "max_new_tokens"),
        ("data.max_level=0", "max_level"),
        ("optim.micro_batch_size=0", "micro_batch_size"),
        ("logger.wandb_mode=sometimes", "wandb_mode"),
        ("classifier.edges=[0.5,0.2]", "edges"),
        ("classifier.edges=[0.0,0.5]", "edges"),
        ("classifier.edges=[0.5,1.2]", "edges"),
        ("classifier.window=-1", "window"),
        ("classifier.hysteresis=0.05", "hysteresis"),
        ("classifier.k=0", "k"),
        ("classifier.unseen=somewhere", "unseen"),
        ("sampler=prompt-gdro sampler.gamma=0", "gamma"),
        ("sampler=prompt-gdro sampler.gamma=1.5", "gamma"),
        ("sampler=prompt-gdro sampler.eta=0", "eta"),
        ("sampler=prompt-gdro sampler.eta=-1", "eta"),
        ("sampler=prompt-gdro sampler.mode=shuffle", "mode"),
        ("sampler=prompt-gdro sampler.signal=vibes", "signal"),
        ("allocator=rollout-gdro rollouts_per_prompt=1", "n_bar"),
        ("allocator=rollout-gdro rollouts_per_prompt=30", "n_bar"),
        ("allocator=sqrt allocator.n_min=10", "n_bar"),
        ("allocator=rollout-gdro allocator.alpha_mu=-1", "alpha_mu"),
    ],
)
def test_invalid_values_name_the_key(override, key):
    cfg = compose_cfg(override.split())
    with pytest.raises(ConfigError) as err:
        build_components(cfg)
    assert key in str(err.value)


def test_cli_rejects_bad_value_before_loading_model(tmp_path: Path):
    # the model path does not exist: if the model were loaded first, the error would be about it
    proc = subprocess.run(
        [sys.executable, "-m", "gdro.cli.train", "optim.lr=-1", "model.name_or_path=nonexistent-org/nonexistent-model",
         f"hydra.run.dir={tmp_path}/run"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "config error: optim.lr=-1: must be > 0"  # one line, no traceback
    out = proc.stdout + proc.stderr
    assert "ModelUnavailable" not in out and "loading model" not in out
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_cli_prints_composed_config():
    proc = subprocess.run(
        [sys.executable, "-m", "gdro.cli.train", "--cfg", "job", "sampler=uniform"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    cfg = OmegaConf.create(proc.stdout)
    assert set(GROUPS) <= set(cfg.keys()) and "seed" in cfg and "steps" in cfg
