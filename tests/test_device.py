"""The `device` setting: parsing, early config errors, and the same 1-step run on device=cpu and device=auto."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from gdro.algorithm.settings import RunSettings
from gdro.cli.evaluate import build_plan
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, build_training
from gdro.models.loading import process_device, resolve_device
from tests.conftest import CONF, FAST, compose_cfg

CUDA = torch.cuda.is_available()
no_cuda_only = pytest.mark.skipif(CUDA, reason="checks the error for CUDA where there is none")


def test_resolve_device():
    assert resolve_device("auto") == torch.device("cuda" if CUDA else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    for bad in ("tpu", "cuda:", "cuda:x", "gpu", ""):
        with pytest.raises(ValueError, match=r"^device must be one of auto, cpu, cuda or cuda:N"):
            resolve_device(bad)
    for bad in (0, None):
        with pytest.raises(TypeError, match=r"^device must be one of auto, cpu, cuda or cuda:N"):
            resolve_device(bad)


def test_process_device_on_the_cpu_is_the_cpu(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    for processes in (1, 2):
        assert process_device(torch.device("cpu"), processes) == torch.device("cpu")


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_process_device_under_several_processes_is_its_own_gpu(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert process_device(torch.device("cuda"), 1) == torch.device("cuda")  # one process: as set
    assert process_device(torch.device("cuda"), 2) == torch.device("cuda", 0)  # cuda:LOCAL_RANK
    assert torch.cuda.current_device() == 0


@no_cuda_only
def test_cuda_without_cuda_is_a_one_line_error():
    for setting in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match="device asks for CUDA but torch.cuda.is_available") as err:
            resolve_device(setting)
        assert "\n" not in str(err.value)


def test_run_config_rejects_bad_devices_early():
    assert RunSettings().device == "auto"
    with pytest.raises(ValueError, match="device must be one of"):
        RunSettings(device="tpu")
    with pytest.raises(ConfigError) as err:
        build_components(compose_cfg(FAST + ["device=tpu"]))
    assert str(err.value) == "device=tpu: must be one of auto, cpu, cuda or cuda:N"


@no_cuda_only
def test_config_device_cuda_without_cuda_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        build_components(compose_cfg(FAST + ["device=cuda"]))
    msg = str(err.value)
    assert msg.startswith("device=cuda: asks for CUDA") and "device=auto or device=cpu" in msg and "\n" not in msg


def test_eval_device_is_checked_before_the_model_loads():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="eval_app", overrides=["device=tpu", "eval.k=1", "eval.max_problems=2"])
    with pytest.raises(ConfigError, match=r"^device=tpu: must be one of auto, cpu, cuda or cuda:N$"):
        build_plan(cfg)


def _one_step(tmp_path: Path, device: str):
    cfg = compose_cfg(FAST + ["steps=1", f"device={device}"])  # beta_kl > 0 by default: a reference model too
    training = build_training(cfg, tmp_path, choices={"sampler": "uniform", "allocator": "fixed"})
    trainer = training.trainer
    try:
        rows = training.fit()
    finally:
        training.logger.close()
    placed = {next(m.parameters()).device for m in (trainer.policy.model, trainer.policy.reference)} | {trainer.policy.engine.device}
    return placed, [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.skipif(CUDA, reason="device=auto is CUDA here, so it need not match the CPU run")
def test_cpu_and_auto_give_identical_metrics(tmp_path: Path):
    placed_cpu, rows_cpu = _one_step(tmp_path / "cpu", "cpu")
    placed_auto, rows_auto = _one_step(tmp_path / "auto", "auto")
    assert placed_cpu == placed_auto == {torch.device("cpu")}
    assert rows_cpu and rows_cpu == rows_auto
