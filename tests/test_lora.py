"""LoRA via peft (``model.lora.r > 0``, issue #30) on the real tiny Qwen3 model: only the adapters train, the
reference is the base with no second copy, an engine with its own weights gets the merged ones, the final save holds
a merged HF dir and a PEFT adapter that peft itself loads, resume is exact, and what cannot work is refused in one line.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gdro.algorithm.tracking import read_metrics
from gdro.cli import train as cli
from gdro.common.rollouts import SamplingParams
from gdro.common.validate import ConfigError
from gdro.compose.build import build_components, make_policy
from gdro.models.loading import ModelSpec, load_model
from gdro.models.lora import BaseView, LoraSpec, adapters_off, merged_state_dict, reference_model
from gdro.parallel.distributed import Dist
from gdro.rollout.hf import HFEngineConfig, HFGenerator
from gdro.run.record import config_differences
from tests.conftest import FAST, REPO, compose_cfg
from tests.test_resume import _env
from tests.test_user_errors import _main

SPEC = ModelSpec("tiny", max_prompt_len=64, max_new_tokens=8, lora=LoraSpec(r=4, alpha=8))


def _perturb(model: torch.nn.Module, seed: int = 0) -> None:
    """Give every adapter a non-zero B (peft starts B at 0, so the policy starts as the base)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


IDS = torch.tensor([[5, 17, 42, 8, 99, 3, 11, 64]])


def test_only_the_adapters_train_and_the_optimiser_holds_only_them():
    torch.manual_seed(0)
    model, _ = load_model(SPEC, train=True)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    wrapped = [n.removesuffix(".base_layer") for n, _ in model.named_modules() if n.endswith(".base_layer")]
    base, _ = load_model(dataclasses.replace(SPEC, lora=LoraSpec()), train=True)
    linear = [n for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    assert sorted(wrapped) == sorted(linear)  # all-linear: every linear layer but the (tied) output head
    assert len(trainable) == 2 * len(linear)  # an A and a B on each
    assert not any("lm_head" in n for n in trainable) and any("embed_tokens" in n for n in frozen)
    from gdro.policy import OptimConfig

    opt, _ = OptimConfig().make(model.parameters())
    held = {id(p) for group in opt.param_groups for p in group["params"]}
    assert held == {id(p) for p in model.parameters() if p.requires_grad}
    assert torch.equal(_logits(model, IDS), _logits(base, IDS))  # B = 0: the policy starts as the base


def test_the_reference_is_the_base_with_no_second_copy():
    torch.manual_seed(0)
    policy = make_policy(SPEC, HFEngineConfig(), torch.device("cpu"), None, Dist(), train=True, reference=True)
    assert isinstance(policy.reference, BaseView) and policy.reference.model is policy.model  # no copy
    base, _ = load_model(dataclasses.replace(SPEC, lora=LoraSpec()), train=True)
    _perturb(policy.model)
    moved = _logits(policy.model, IDS)
    with reference_model(policy.reference) as ref:
        assert torch.equal(_logits(ref, IDS), _logits(base, IDS))  # adapters off: exactly the base
    assert not torch.allclose(moved, _logits(base, IDS))
    assert torch.equal(_logits(policy.model, IDS), moved)  # and on again after the block


def test_merged_weights_equal_peft_own_merge_and_leave_the_model_as_it_was():
    torch.manual_seed(0)
    model, _ = load_model(SPEC, train=True)
    _perturb(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = merged_state_dict(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing merged in place
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    plain, _ = load_model(dataclasses.replace(SPEC, lora=LoraSpec()), train=True)
    ref = get_peft_model(plain, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    lora = {k: v for k, v in model.state_dict().items() if ".lora_" in k}
    ref.load_state_dict({"base_model.model." + k: v for k, v in lora.items()}, strict=False)
    expected = ref.merge_and_unload().state_dict()  # peft's own merge: the independent reference
    assert merged.keys() == expected.keys()
    for k in expected:
        torch.testing.assert_close(merged[k], expected[k], rtol=0, atol=1e-6)
    with adapters_off(model):  # the base, as the unmerged weights say
        torch.testing.assert_close(_logits(model, IDS), _logits(plain.__class__.from_pretrained(
            str(Path(__import__("gdro.models.source", fromlist=["TINY_DIR"]).TINY_DIR))), IDS), rtol=0, atol=1e-6)


def test_an_engine_with_its_own_weights_gets_the_merged_ones():
    """The vLLM path (weights pushed through ``state_dict()``) as an HF engine with its own copy takes it."""
    torch.manual_seed(0)
    model, tok = load_model(SPEC, train=True)
    _perturb(model)
    plain, _ = load_model(dataclasses.replace(SPEC, lora=LoraSpec()), train=False)
    engine = HFGenerator(plain, tok, use_chat_template=True, max_prompt_len=64)
    Dist().sync_engine(engine, model)
    torch.testing.assert_close(_logits(engine.model, IDS), _logits(model, IDS), rtol=0, atol=1e-5)
    roll = engine.generate(["12345"], [2], seed=0, sampling=SamplingParams(temperature=1.0))
    assert len(roll) == 2


def test_config_rejects_bad_lora_settings_in_one_line_and_old_configs_resume():
    for override, words in [("model.lora.r=-1", "r must be an int >= 0"), ("model.lora.dropout=1.5", "dropout"),
                            ("+model.lora.rank=2", "has no key 'rank'"),
                            ("model.lora.target_modules=[]", "target_modules")]:
        with pytest.raises(ConfigError) as err:
            build_components(compose_cfg([override]))
        assert "model.lora" in str(err.value) and words in str(err.value) and "\n" not in str(err.value)
    comp = build_components(compose_cfg(["model.lora.r=8", "model.lora.target_modules=[q_proj,v_proj]"]))
    assert comp.model.lora == LoraSpec(r=8, alpha=16, dropout=0.0, target_modules=("q_proj", "v_proj"))
    new = {"model": {"_target_": "gdro.models.loading.ModelSpec", "name_or_path": "tiny",
                     "lora": {"r": 0, "alpha": 16.0, "dropout": 0.0, "target_modules": "all-linear"}}}
    old = {"model": {"_target_": "gdro.models.loading.ModelSpec", "name_or_path": "tiny"}}  # before LoRA existed
    assert config_differences(old, new) == []
    new["model"]["lora"]["r"] = 8
    assert config_differences(old, new) == ['model.lora.r: <absent> -> 8']


def test_a_target_that_matches_nothing_is_one_line():
    with pytest.raises(ValueError, match=r"lora.target_modules=\('nope',\)") as err:
        load_model(dataclasses.replace(SPEC, lora=LoraSpec(r=2, target_modules=["nope"])), train=True)
    assert "\n" not in str(err.value)


LINEAR = "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head"  # the tiny model's, in its order
BAD_TARGETS = [  # (model.lora.target_modules=, what the one line says after "config error: ")
    ("[bogus_proj]", "model.lora.target_modules=[bogus_proj]: bogus_proj names no module of the model"),
    ("[mlp]", "model.lora.target_modules=[mlp]: mlp is a Qwen3MLP, not a linear layer"),
    ("[q_proj,bogus]", "model.lora.target_modules=[q_proj, bogus]: bogus names no module of the model"),
]


@pytest.mark.parametrize(("targets", "says"), BAD_TARGETS, ids=["unknown", "not_linear", "one_of_two"])
def test_a_target_the_model_lacks_is_one_line_naming_its_linear_layers(targets, says, tmp_path, monkeypatch,
                                                                       capsys):
    """Refused before the run dir is opened (no config.yaml, no run.json), the model's linear layers named."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    code, lines = _main(cli.train, ["gdro-train", *FAST, "model.lora.r=4", f"model.lora.target_modules={targets}",
                                    f"hydra.run.dir={tmp_path}"], monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == f"config error: {says} (its linear layers, the LoRA targets: {LINEAR})", lines
    assert not (tmp_path / "config.yaml").exists() and not (tmp_path / "run.json").exists()


def test_targets_the_model_has_pass_the_check():
    from gdro.models.lora import target_problem

    model, _ = load_model(dataclasses.replace(SPEC, lora=LoraSpec()))
    for targets in (("q_proj", "v_proj"), ("mlp.down_proj",), ("model.layers.0.self_attn.q_proj",), "all-linear",
                    r".*\.(q|v)_proj"):
        assert target_problem(model, targets) is None, targets
    assert "matches no module" in target_problem(model, r".*\.nope")


CLI = ["experiment=smoke", "eval.at_end=false", "eval.every=0", "model.lora.r=4", "model.lora.alpha=8", "loss.beta_kl=0.01", "optim.lr=0.01",
       "progress=false", "threads=1", "checkpoint.every=1", "save_final=true"]


def _train(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "gdro.cli.train", *CLI, f"hydra.run.dir={run_dir}", *extra], cwd=REPO,
                         env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _values(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run_dir)]


@pytest.mark.slow
def test_a_lora_run_trains_saves_and_resumes_exactly(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    _train(whole, "steps=3")
    _train(cut, "steps=2")
    _train(cut, "steps=3")  # resumes from step 2's checkpoint: adapters and optimiser
    assert _values(whole) == _values(cut)
    rows = _values(whole)
    assert any((r.get("train/kl") or 0) > 0 for r in rows)  # the adapters moved the policy away from the base
    final = whole / "checkpoint"
    # the merged HF dir loads as a plain model; the adapter in PEFT's format loads on the base with peft itself
    merged, _ = load_model(ModelSpec(str(final), max_prompt_len=64, max_new_tokens=8))
    from peft import PeftModel

    base, _ = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=8))
    adapted = PeftModel.from_pretrained(base, str(final / "adapter"))
    torch.testing.assert_close(_logits(adapted, IDS), _logits(merged, IDS), rtol=0, atol=1e-5)
    untouched, _ = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=8))
    assert not torch.allclose(_logits(merged, IDS), _logits(untouched, IDS))  # training changed the merged weights
    cfg = json.loads((final / "adapter" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and cfg["peft_type"] == "LORA"


@pytest.mark.slow
def test_lora_under_two_processes_is_refused_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "gdro.cli.train", *CLI, "steps=1", "prompts_per_step=8", f"hydra.run.dir={tmp_path / 'r'}"],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode != 0
    lines = [x for x in out.stderr.splitlines() if "model.lora.r=4 with 2 processes" in x]
    assert lines and "FSDP2" in lines[0], out.stderr[-3000:]
    assert not (tmp_path / "r" / "checkpoint").exists()
    assert not list((tmp_path / "r").glob("checkpoints/step_*"))  # refused before any step
