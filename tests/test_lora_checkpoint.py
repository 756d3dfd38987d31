"""LoRA checkpoints (issue #49, item 4) on the real tiny Qwen3 model: a training checkpoint holds the adapters, their
optimiser and a reference to the base weights with its checksum, not the base; it resumes exactly; a base that
changed is refused in one line; a checkpoint of the old layout (the base inside ``policy.pt``) still resumes
exactly; and what LoRA trains is logged once at the start."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gdro.algorithm.tracking import read_metrics
from gdro.models.loading import ModelSpec, load_model
from gdro.models.lora import AdapterBaseChanged, LoraSpec
from gdro.models.lora_state import BASE_REF, is_adapter_key, lean_policy_state, state_digest
from gdro.models.source import TINY_DIR
from gdro.run.checkpoint import (
    FORMAT_VERSION,
    LEAN_FORMAT_VERSION,
    load_checkpoint,
    save_checkpoint,
)
from tests.conftest import REPO
from tests.test_resume import _env

SPEC = ModelSpec("tiny", max_prompt_len=64, max_new_tokens=8, lora=LoraSpec(r=4, alpha=8))
CLI = ["experiment=smoke", "eval.at_end=false", "eval.every=0", "model.lora.r=4", "model.lora.alpha=8",
       "loss.beta_kl=0.01", "optim.lr=0.01", "progress=false", "threads=1", "checkpoint.every=1", "save_final=false"]


def _trained_lora(seed: int = 0) -> torch.nn.Module:
    """The tiny model with adapters whose B is not 0 (peft starts B at 0)."""
    torch.manual_seed(seed)
    model, _ = load_model(SPEC, train=True)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model


def _base(state: dict) -> dict:
    return {k: t for k, t in state.items() if not is_adapter_key(k)}


def test_lean_policy_state_keeps_the_adapters_and_the_base_checksum():
    model = _trained_lora()
    state = model.state_dict()
    lean, ref = lean_policy_state(state)
    assert set(lean) == {k for k in state if is_adapter_key(k)} | {BASE_REF}
    assert ref["sha256"] == state_digest(_base(state)) and ref["tensors"] == len(_base(state))
    assert ref["bytes"] == sum(p.numel() * p.element_size() for n, p in model.named_parameters()  # tied: once
                               if not is_adapter_key(n))
    full, _ = load_model(dataclasses.replace(SPEC, lora=LoraSpec()))  # no adapters: saved whole, as before
    assert lean_policy_state(full.state_dict()) is None
    assert lean_policy_state(lean) is None  # already lean


def test_a_lean_state_loads_into_a_fresh_model_with_the_same_base_exactly():
    trained = _trained_lora(seed=1)
    lean, _ = lean_policy_state(trained.state_dict())
    fresh = _trained_lora(seed=2)  # other adapters, the same base (loaded from the same files)
    fresh.load_state_dict(dict(lean))  # strict: the hook adds the base from the model itself
    for (k, a), (k2, b) in zip(trained.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b), k


def test_a_changed_base_is_refused_in_one_line_naming_the_checkpoint():
    lean, _ = lean_policy_state(_trained_lora().state_dict())
    lean[BASE_REF] = {**lean[BASE_REF], "checkpoint": "/runs/r/checkpoints/step_000002"}
    other = _trained_lora()
    with torch.no_grad():
        next(p for n, p in other.named_parameters() if not is_adapter_key(n)).add_(1e-3)
    with pytest.raises(AdapterBaseChanged) as err:
        other.load_state_dict(dict(lean))
    line = str(err.value)
    assert "\n" not in line and line.startswith("/runs/r/checkpoints/step_000002: the base weights changed")
    assert lean[BASE_REF]["sha256"][:16] in line and "only the adapters" in line


def test_checkpoint_files_lean_for_lora_whole_otherwise(tmp_path):
    model = _trained_lora()
    meta = {"config": {"model": {"name_or_path": "tiny", "revision": None, "fallback": None}}}
    path = save_checkpoint(tmp_path / "lora", 1, {"policy": model.state_dict(), "trainer": {"step": 1}}, meta, keep=2)
    saved = json.loads((path / "meta.json").read_text())
    assert saved["format_version"] == LEAN_FORMAT_VERSION
    assert saved["lora_base"]["sha256"] == state_digest(_base(model.state_dict()))
    assert saved["lora_base"]["name_or_path"] == "tiny"
    loaded = load_checkpoint(path, ("policy",))["policy"]
    assert loaded[BASE_REF]["checkpoint"] == str(path)  # for the one line of a changed base
    assert (path / "policy.pt").stat().st_size < 0.1 * (TINY_DIR / "model.safetensors").stat().st_size
    plain, _ = load_model(dataclasses.replace(SPEC, lora=LoraSpec()))
    path = save_checkpoint(tmp_path / "full", 1, {"policy": plain.state_dict()}, meta, keep=2)
    saved = json.loads((path / "meta.json").read_text())
    assert saved["format_version"] == FORMAT_VERSION and "lora_base" not in saved
    assert load_checkpoint(path, ("policy",))["policy"].keys() == plain.state_dict().keys()


def test_lora_says_once_what_it_trains(caplog):
    with caplog.at_level(logging.INFO, logger="gdro.models.lora"):
        model, _ = load_model(SPEC, train=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "gdro.models.lora"]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    assert len(lines) == 1
    assert lines[0].startswith("LoRA r=4 alpha=8 dropout=0 on all-linear ([q_proj, k_proj, v_proj, o_proj, gate_proj,")
    assert f": {trainable:,} trainable of {total:,} parameters ({100 * trainable / total:.2f}%)" in lines[0]


# ---------------------------------------------------------------------------------------------------------------
# whole runs (gdro-train processes)
# ---------------------------------------------------------------------------------------------------------------
def _train(run_dir: Path, *extra: str, ok: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "gdro.cli.train", *CLI, f"hydra.run.dir={run_dir}", *extra], cwd=REPO,
                         env=_env(), capture_output=True, text=True, timeout=600, check=False)
    if ok:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


def _values(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run_dir)]


@pytest.mark.slow
def test_a_lora_checkpoint_holds_no_base_and_resumes_exactly(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    _train(whole, "steps=3")
    _train(cut, "steps=2")
    ckpt = cut / "checkpoints" / "step_000002"
    policy = torch.load(ckpt / "policy.pt", weights_only=False)
    assert policy and all(is_adapter_key(k) or k == BASE_REF for k in policy)
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["format_version"] == LEAN_FORMAT_VERSION and meta["lora_base"].items() >= policy[BASE_REF].items()
    model, _ = load_model(SPEC, train=True)  # the base as the run loads it (fp32 master weights)
    assert meta["lora_base"]["sha256"] == state_digest(_base(model.state_dict()))
    assert meta["lora_base"]["name_or_path"] == "tiny"
    size = sum(f.stat().st_size for f in ckpt.iterdir())
    assert (ckpt / "policy.pt").stat().st_size < 0.1 * (TINY_DIR / "model.safetensors").stat().st_size
    assert size < 0.25 * (TINY_DIR / "model.safetensors").stat().st_size  # adapters, AdamW's two moments, the rest
    out = _train(cut, "steps=3")  # resumes from step 2's checkpoint: adapters, optimiser, the base checked
    assert "resumed from" in out.stdout + out.stderr
    assert _values(whole) == _values(cut)
    log_lines = [x for x in (cut / "cli.log").read_text().splitlines() if "trainable of" in x]
    assert len(log_lines) == 2 and "LoRA r=4 alpha=8" in log_lines[0]  # once per start


@pytest.mark.slow
def test_a_resume_on_changed_base_weights_is_refused_in_one_line(tmp_path):
    weights = tmp_path / "tiny"
    shutil.copytree(TINY_DIR, weights)
    run = tmp_path / "run"
    _train(run, "steps=1", f"model.name_or_path={weights}")
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(weights / "model.safetensors"))
    name = min(k for k in tensors if k.endswith("gate_proj.weight"))
    tensors[name][0, 0] += 1e-3
    save_file(tensors, str(weights / "model.safetensors"), metadata={"format": "pt"})
    before = {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    out = _train(run, "steps=2", f"model.name_or_path={weights}", ok=False)
    assert out.returncode == 2
    after = {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    assert after.keys() == before.keys() and [n for n in after if after[n] != before[n]] == []  # .hydra/, logs too
    lines = [x for x in out.stderr.splitlines() if x.startswith("checkpoint error:")]
    assert len(lines) == 1 and "step_000001: the base weights changed" in lines[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert [r["step"] for r in read_metrics(run) if r.get("step")] == [1]  # nothing was trained on the other base


@pytest.mark.slow
def test_an_old_lora_checkpoint_holding_the_base_still_resumes_exactly(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    _train(whole, "steps=3")
    _train(cut, "steps=2")
    ckpt = cut / "checkpoints" / "step_000002"
    # rewrite it in the layout of an older gdro: the whole state dict (base and adapters) in policy.pt, format 1
    lean = torch.load(ckpt / "policy.pt", weights_only=False)
    model, _ = load_model(SPEC, train=True)
    model.load_state_dict(lean)
    full = model.state_dict()
    assert len(full) > len(lean) and BASE_REF not in full
    torch.save(full, ckpt / "policy.pt")
    meta = json.loads((ckpt / "meta.json").read_text())
    meta.pop("lora_base")
    (ckpt / "meta.json").write_text(json.dumps({**meta, "format_version": FORMAT_VERSION}, indent=1))
    _train(cut, "steps=3")
    assert _values(whole) == _values(cut)
