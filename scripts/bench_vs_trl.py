"""Side by side: one GRPO step of ours (``gdro.algorithm.trainer.Trainer``) against TRL's ``GRPOTrainer``, same work (issue #11).

    .venv/bin/python -m pip install -e '.[bench]'     # TRL: a benchmark-only extra, never a runtime dependency
    .venv/bin/python scripts/bench_vs_trl.py                            # tiny and 20m, 3 repeats: ~15-25 min on 2 cores
    .venv/bin/python scripts/bench_vs_trl.py --sizes tiny --repeats 1  # quick
    .venv/bin/python scripts/bench_vs_trl.py --sizes smollm2 --prompts 8 --per-prompt 8 --new-tokens 32 --repeats 2
                       # the real SmolLM2-135M-Instruct (scripts/get_smollm2.py) on the addition task, answer_mode=number

TRL (1.16, ``pip install "trl>=1.16"``) installs into the project's venv without touching torch or transformers
(it only adds ``accelerate``; ``pip install --dry-run`` first). Without TRL the script exits with status 2.

The work, identical on both sides: the same initial weights, the same ``--prompts`` prompts (the first ones of
``CopyTask().train()``, chat-formatted by the tokenizer's ChatML template: the prompt token ids are checked to be
equal), ``--per-prompt`` completions each, sampled at temperature 1 (top-p 1, no top-k) up to ``--new-tokens``
tokens, scored by ``gdro.grading.rewards.MathVerifyReward`` (conf/reward/math-verify.yaml), group-normalised advantages
(std with Bessel's correction and ε = 1e-4: TRL's formula, which ours is set to), the clipped surrogate
(ε_low 0.2, ε_high 0.28) plus β·k3-KL to the frozen initial policy (β = ``--beta``; 0: no reference model)
aggregated as one token mean over the whole batch, and ONE AdamW step (lr 1e-4, weight decay 0.01, grad clip 1)
on the whole batch, in micro-batches of ``--micro-batch`` rows (default: ours, conf/optim/adamw.yaml) with
gradient accumulation. float32, no gradient checkpointing, CPU, ``--threads`` torch threads.

Sizes: ``tiny``, the shipped 0.8M-parameter model (gdro/assets/tiny-copy), and ``20m``, a randomly initialised
Qwen3 of ~20M parameters (hidden 384, 8 layers, 6 query / 2 KV heads of 64, MLP 1792, tied embeddings) with the
same character tokenizer, saved to a temporary directory so that both trainers load it from disk.

Ours: a real ``Trainer`` from ``gdro.compose.build.build_training`` on the composed config (uniform sampler without
shuffling, fixed allocator, no evaluation, checkpoints or saving); the time is the step's own ``time/step_s``
(prompt sampling to the logged row; model loading and set-up excluded). Its split is the row's own
(``time/gen_s``, ``time/reward_s``, ``time/ref_s`` and ``time/update_s``, which includes the reference forward and
is shown without it).
TRL: ``GRPOTrainer`` (``use_vllm=False``, transformers ``generate``) with its settings aligned (see
``trl_config``); the time is from ``on_step_begin`` to ``on_step_end`` of a callback (generation, reference
log-probs, reward, loss, backward, optimiser and scheduler step; trainer set-up excluded). Its split: probes on
``_generate``, ``_calculate_rewards`` and the reference model's forwards; the rest is "update+other".
Each size: one warm-up step of each (not counted), then ``--repeats`` rounds of ours, TRL, ours, TRL, ...,
each a fresh trainer from the same checkpoint, so every measured step is the first one from the same weights.

The floor: the fp32 matmul rate of this machine (``torch.mm`` of 1024×1024 at the set thread count, median GFLOP/s)
and the FLOPs the step needs, each prompt once and no padding:

    FLOPs = 2·N·T (generation) + 2·N·T·[β > 0] (reference forward) + 6·N·T (update forward + backward),
    T = P + C: P = the prompt tokens, once per group; C = the completion tokens the measured step generated;
    N = the model's parameters (tied embeddings counted once: the LM head's matmul);

attention scores and the optimiser are not counted. floor seconds = FLOPs / rate; ours ÷ floor is printed.
The last line is ``ours/trl tiny=<ratio> 20m=<ratio> smollm2=<ratio>`` (medians; ``n/a`` for a size not run).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

CONF = Path(__file__).resolve().parent.parent / "conf"
SIZES = ("tiny", "20m", "smollm2")
Q20M = {"hidden_size": 384, "num_hidden_layers": 8, "num_attention_heads": 6, "num_key_value_heads": 2,
        "head_dim": 64, "intermediate_size": 1792}
LR, WEIGHT_DECAY, GRAD_CLIP, CLIP_LOW, CLIP_HIGH, ADV_EPS = 1e-4, 0.01, 1.0, 0.2, 0.28, 1e-4
SEED = 0


def require_trl():
    if importlib.util.find_spec("trl") is None:
        print("bench_vs_trl: TRL is not installed (a benchmark-only extra): "
              ".venv/bin/python -m pip install -e '.[bench]'", file=sys.stderr)
        sys.exit(2)
    import trl

    return trl


# ---------------------------------------------------------------------------------------------------------------
# Models, prompts, the reward
# ---------------------------------------------------------------------------------------------------------------
def model_path(size: str, tmp: Path) -> str:
    """``tiny`` for the shipped model; for ``20m`` a random Qwen3 (tiny tokenizer) saved under ``tmp``."""
    if size == "tiny":
        return "tiny"
    if size == "smollm2":  # the real SmolLM2-135M-Instruct weights (de-quantised Q4_1), built once
        import subprocess

        out = subprocess.run([sys.executable, str(CONF.parent / "scripts" / "get_smollm2.py")], capture_output=True,
                             text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"bench_vs_trl: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
        return out.stdout.strip().splitlines()[-1]
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from gdro.models.loading import ModelSpec, load_tokenizer

    tok = load_tokenizer(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=16))
    cfg = Qwen3Config(vocab_size=len(tok), max_position_embeddings=128, tie_word_embeddings=True,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None, **Q20M)
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(cfg).float().eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    out = tmp / "qwen3-20m"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return str(out)


def spec_for(path: str, args):
    from gdro.models.loading import ModelSpec

    return ModelSpec(path, max_prompt_len=64, max_new_tokens=args.new_tokens)


def task_for(size: str):
    """The copy task for our own models; for SmolLM2 the addition task of experiment=smollm2-add (conf/data/add.yaml)."""
    from gdro.data.arithmetic import AddTask
    from gdro.data.synthetic import CopyTask

    return AddTask() if size == "smollm2" else CopyTask()


def bench_problems(args, tokenizer):
    """The first ``--prompts`` training problems that fit in 64 prompt tokens, as our trainer sees them."""
    from gdro.data.filtering import drop_long_prompts

    kept, _ = drop_long_prompts(task_for(args.size).train(), tokenizer, max_prompt_len=64, use_chat_template=True)
    if len(kept) < args.prompts:
        raise SystemExit(f"only {len(kept)} prompts fit")
    return kept[: args.prompts]


def prompt_tokens(tokenizer, problems) -> tuple[list[list[int]], list[list[int]]]:
    """(ours, TRL's) prompt token ids: ``encode_prompts`` vs TRL's ``apply_chat_template(tokenize=True)`` call."""
    from gdro.data.prompts import encode_prompts

    ours = encode_prompts(tokenizer, [p.prompt for p in problems], use_chat_template=True, max_prompt_len=64)
    trl = tokenizer.apply_chat_template(conversation=[[{"role": "user", "content": p.prompt}] for p in problems],
                                        add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    return ours, [list(r) for r in trl]


def make_reward(size: str = "tiny"):
    """``MathVerifyReward`` as ``gdro-train`` builds it (fresh cache): the reward node of the composed training
    config, whose keys may interpolate other groups' (``reward.overlong_max_tokens: ${model.max_new_tokens}``); for
    SmolLM2 experiment=smollm2-add's (``answer_mode=number``)."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=smollm2-add"] if size == "smollm2" else [])
    return instantiate(cfg.reward)


class TRLReward:
    """Our reward as a TRL reward function: ``(prompts, completions, completion_ids, answer, ...) -> [float]``."""

    def __init__(self, reward, eos_ids: list[int], clock: dict[str, float]):
        self.reward, self.eos_ids, self.clock = reward, set(eos_ids), clock
        self.__name__ = "math_verify"

    def __call__(self, prompts, completions, completion_ids, answer, **kwargs) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        finished = [bool(ids) and ids[-1] in self.eos_ids for ids in completion_ids]  # ends on EOS, as ours
        return [float(r) for r in self.reward.score(texts, list(answer), finished).rewards]


def time_forwards(model: torch.nn.Module, clock: dict[str, float], key: str) -> None:
    """Add the wall time of every ``model(...)`` call to ``clock[key]`` (forward hooks)."""
    start: list[float] = []
    model.register_forward_pre_hook(lambda m, a: start.append(time.perf_counter()))
    model.register_forward_hook(lambda m, a, o: clock.__setitem__(key, clock[key] + time.perf_counter() - start.pop()))


def time_method(obj, name: str, clock: dict[str, float], key: str) -> None:
    """Wrap ``obj.name`` (on the instance) so that its wall time adds to ``clock[key]``."""
    fn = getattr(obj, name)

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            clock[key] += time.perf_counter() - t0

    setattr(obj, name, timed)


# ---------------------------------------------------------------------------------------------------------------
# One step of ours
# ---------------------------------------------------------------------------------------------------------------
def our_overrides(path: str, args) -> list[str]:
    return [
        "logger=jsonl", "steps=1", f"seed={SEED}", f"threads={args.threads}", "device=cpu",
        f"prompts_per_step={args.prompts}", f"rollouts_per_prompt={args.per_prompt}",
        "save_final=false", "progress=false", "resume=false",
        "eval.at_start=false", "eval.at_end=false", "eval.every=0",
        "sampler=uniform", "sampler.shuffle=false", "allocator=fixed",  # the first --prompts prompts, n̄ each
        "checkpoint.every=0", "checkpoint.at_end=false",
        f"model.name_or_path={path}", "model.max_prompt_len=64", f"model.max_new_tokens={args.new_tokens}",
        "model.dtype=float32", "model.master_dtype=float32", "model.gradient_checkpointing=false",
        "rollout=hf", "rollout.temperature=1.0", "rollout.top_p=1.0", "rollout.top_k=0",
        f"loss.beta_kl={args.beta}", f"loss.clip_low={CLIP_LOW}", f"loss.clip_high={CLIP_HIGH}", "loss.agg=token-mean",
        "loss.kl_estimator=low_var_kl", "advantage.norm_adv_by_std=true", "advantage.unbiased_std=true", f"advantage.eps={ADV_EPS}",
        f"optim.lr={LR}", f"optim.weight_decay={WEIGHT_DECAY}", f"optim.grad_clip={GRAD_CLIP}", "optim.warmup_steps=0",
        "optim.ppo_epochs=1", "optim.mini_batches=1", f"optim.micro_batch_size={args.micro_batch}",
        "optim.skip_zero_adv=false",  # equal work: every row goes through the update, as in TRL
        *(["data=add", "reward.answer_mode=number"] if args.size == "smollm2" else []),
    ]


def run_ours(path: str, args, run_dir: Path) -> dict[str, float]:
    """One step of a real trainer; its split is the trainer's own ``time/*`` keys."""
    from hydra import compose, initialize_config_dir

    from gdro.compose.build import build_training

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=our_overrides(path, args))
    training = build_training(cfg, run_dir)
    trainer = training.trainer
    torch.set_num_threads(args.threads)
    try:
        row = training.fit()[-1]
    finally:
        training.logger.close()
    args.shared_prefix = trainer.optim_cfg.shared_prefix and trainer.optim_cfg.pack
    args.prune_every = getattr(trainer.policy.engine, "prune_every", 0)
    step, gen, reward, upd, ref = (row[k] for k in ("time/step_s", "time/gen_s", "time/reward_s", "time/update_s",
                                                    "time/ref_s"))
    return {"step": step, "gen": gen, "reward": reward, "ref": ref, "update": upd - ref,
            "other": step - gen - reward - upd,
            "completion_tokens": row["rollout/len_mean"] * row["rollout/n_total"], "reward_mean": row["reward/mean"]}


# ---------------------------------------------------------------------------------------------------------------
# One step of TRL
# ---------------------------------------------------------------------------------------------------------------
def trl_config(args, out_dir: Path):
    """``GRPOConfig`` aligned to ours. Batch semantics (TRL 1.16): ``per_device_train_batch_size`` counts
    completions; ``steps_per_generation`` batches are generated at once (``generation_batch_size`` = per-device
    batch × processes × steps_per_generation); with ``gradient_accumulation_steps`` = ``steps_per_generation`` they
    form one optimiser step, and old log-probs are skipped (π_old = π_θ) as in ours. ``loss_type="dapo"`` divides
    the summed token losses by the active tokens of the whole generation batch: our token mean over the batch
    (``"bnpo"`` would divide per micro-batch, which differs as soon as there is more than one)."""
    from trl import GRPOConfig

    total = args.prompts * args.per_prompt
    accum = total // args.micro_batch
    return GRPOConfig(
        output_dir=str(out_dir), max_steps=1, seed=SEED, use_cpu=True, bf16=False, fp16=False,
        per_device_train_batch_size=args.micro_batch, gradient_accumulation_steps=accum, steps_per_generation=accum,
        num_generations=args.per_prompt, num_iterations=1, max_completion_length=args.new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, use_vllm=False,
        beta=args.beta, loss_type="dapo", epsilon=CLIP_LOW, epsilon_high=CLIP_HIGH, scale_rewards="group",
        importance_sampling_level="token", mask_truncated_completions=False,
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=WEIGHT_DECAY,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=GRAD_CLIP, optim="adamw_torch",
        gradient_checkpointing=False, shuffle_dataset=False, remove_unused_columns=False,
        dataloader_num_workers=0, report_to="none", logging_strategy="no", save_strategy="no", eval_strategy="no",
        log_completions=False, disable_tqdm=True,
    )


def run_trl(path: str, args, problems, run_dir: Path) -> dict[str, float]:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    from gdro.models.loading import load_model

    policy, tokenizer = load_model(spec_for(path, args), train=True)  # fresh weights, as ours loads them
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p.prompt}], "answer": p.answer}
                                 for p in problems])
    clock: dict[str, float] = defaultdict(float)

    class StepTimer(TrainerCallback):
        seconds, metrics = math.nan, {}

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.seconds = time.perf_counter() - self.t0
            self.metrics = {key: list(v) for key, v in trainer._metrics["train"].items()}

    timer = StepTimer()
    eos = policy.generation_config.eos_token_id
    eos_ids = sorted({tokenizer.eos_token_id, *([eos] if isinstance(eos, int) else eos or [])})
    trainer = GRPOTrainer(model=policy, reward_funcs=TRLReward(make_reward(args.size), eos_ids, clock),
                          args=trl_config(args, run_dir), train_dataset=dataset, processing_class=tokenizer,
                          callbacks=[timer])
    trainer.remove_callback(PrinterCallback)  # the end-of-training metrics dict
    if trainer.ref_model is not None:
        time_forwards(trainer.ref_model, clock, "ref")
    time_method(trainer, "_generate", clock, "gen")
    time_method(trainer, "_calculate_rewards", clock, "reward")
    torch.set_num_threads(args.threads)
    trainer.train()
    m = timer.metrics
    step = timer.seconds
    return {"step": step, "gen": clock["gen"], "reward": clock["reward"], "ref": clock["ref"],
            "update": step - clock["gen"] - clock["reward"] - clock["ref"], "other": 0.0,
            "completion_tokens": m["completions/mean_length"][-1] * args.prompts * args.per_prompt,
            "reward_mean": m["reward"][-1]}


# ---------------------------------------------------------------------------------------------------------------
# Floor and report
# ---------------------------------------------------------------------------------------------------------------
def matmul_gflops(n: int = 1024, reps: int = 20) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def step_flops(n_params: int, prompt_tokens: int, completion_tokens: float, beta: float) -> float:
    """2·N·T (generation) + 2·N·T·[β>0] (reference) + 6·N·T (update), T = prompt tokens once + completion tokens."""
    return (2 + (2 if beta > 0 else 0) + 6) * n_params * (prompt_tokens + completion_tokens)


def split_line(r: dict[str, float], ours: bool) -> str:
    keys = ("gen", "reward", "ref", "update", "other") if ours else ("gen", "reward", "ref", "update")
    names = {"gen": "generation", "reward": "reward", "ref": "reference fwd",
             "update": "update (fwd+bwd+optim)" if ours else "update+other", "other": "other"}
    return ", ".join(f"{names[k]} {r[k]:.2f}" for k in keys)


def bench_size(size: str, args, rate: float, tmp: Path) -> float:
    from gdro.models.loading import load_model

    args.size = size
    path = model_path(size, tmp)
    model, tokenizer = load_model(spec_for(path, args))
    n_params = sum(p.numel() for p in model.parameters())
    c = model.config
    print(f"\n== {size}: {type(model).__name__}, {n_params:,} parameters (vocab {c.vocab_size}, hidden {c.hidden_size}, "
          f"{c.num_hidden_layers} layers, MLP {c.intermediate_size}) ==", flush=True)
    del model
    problems = bench_problems(args, tokenizer)
    ours_ids, trl_ids = prompt_tokens(tokenizer, problems)
    n_prompt = sum(len(r) for r in ours_ids)
    print(f"prompt tokens identical (ours vs TRL's chat template): {'yes' if ours_ids == trl_ids else 'NO'}; "
          f"{len(problems)} prompts, {n_prompt} prompt tokens")
    results: dict[str, list[dict[str, float]]] = {"ours": [], "trl": []}
    k = 0
    for rnd in range(args.repeats + 1):
        for name in ("ours", "trl"):
            k += 1
            d = tmp / f"{size}-{name}-{k}"
            r = run_ours(path, args, d) if name == "ours" else run_trl(path, args, problems, d)
            label = "warm-up" if rnd == 0 else f"run {rnd}"
            print(f"{label:>8} {name:<4} {r['step']:7.2f} s  ({r['completion_tokens']:.0f} completion tokens, "
                  f"reward mean {r['reward_mean']:.3f}; {split_line(r, name == 'ours')})", flush=True)
            if rnd:
                results[name].append(r)
    med = {name: statistics.median(r["step"] for r in rs) for name, rs in results.items()}
    ratio = med["ours"] / med["trl"]
    if getattr(args, "shared_prefix", False):
        print("  (ours: optim.shared_prefix and optim.pack on: each group one span, its prompt once, under a block "
              "mask; rollout.prune_every=" + str(getattr(args, "prune_every", "?")) + ": ended rows leave generation)")
    print(f"median s/step: ours {med['ours']:.2f}, trl {med['trl']:.2f}; ours/trl {ratio:.2f}")
    for name, rs in results.items():
        mid = sorted(rs, key=lambda r: r["step"])[len(rs) // 2]
        print(f"  {name} split of the median run (s): {split_line(mid, name == 'ours')}")
    for name, rs in results.items():
        floors = [step_flops(n_params, n_prompt, r["completion_tokens"], args.beta) / (rate * 1e9) for r in rs]
        over = statistics.median(r["step"] / f for r, f in zip(rs, floors))
        c_med = statistics.median(r["completion_tokens"] for r in rs)
        print(f"  {name} floor: {2 + (2 if args.beta > 0 else 0) + 6}·N·(P+C), N={n_params:,} P={n_prompt} "
              f"C={c_med:.0f} -> {statistics.median(floors):.3f} s at {rate:.1f} GFLOP/s; {name} ÷ floor = {over:.1f}")
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="tiny,20m", help="comma-separated: tiny, 20m, smollm2")
    ap.add_argument("--repeats", type=int, default=3, help="measured rounds per size (after one warm-up each)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--per-prompt", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--beta", type=float, default=0.001, help="KL coefficient (0: no reference model)")
    ap.add_argument("--micro-batch", type=int, default=None,
                    help="rows per forward/backward on both sides (default: ours, conf/optim/adamw.yaml)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in SIZES]
    if bad or not sizes or args.repeats < 1 or args.per_prompt < 2 or args.beta < 0:
        ap.error(f"--sizes from {SIZES}, --repeats >= 1, --per-prompt >= 2, --beta >= 0")
    trl = require_trl()
    total = args.prompts * args.per_prompt
    if args.micro_batch is None:
        from omegaconf import OmegaConf

        args.micro_batch = min(int(OmegaConf.load(CONF / "optim" / "adamw.yaml").micro_batch_size), total)
    if total % args.micro_batch:
        ap.error(f"--micro-batch must divide prompts x per-prompt = {total}")

    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.basicConfig(level=logging.ERROR)
    torch.set_num_threads(args.threads)
    rate = matmul_gflops()
    print(f"bench_vs_trl: trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"work: {args.prompts} prompts x {args.per_prompt} completions, <= {args.new_tokens} new tokens, T=1.0, "
          f"beta={args.beta:g}, token-mean loss, 1 optimiser step in {total // args.micro_batch} micro-batch(es) of "
          f"{args.micro_batch} rows")
    print(f"matmul: fp32 1024x1024 torch.mm, median {rate:.1f} GFLOP/s")
    print("floor FLOPs = 2·N·(P+C) generation + 2·N·(P+C)·[beta>0] reference + 6·N·(P+C) update; "
          "P = prompt tokens once per group, C = completion tokens of the step")
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_vs_trl-") as tmp:
        for size in sizes:
            ratios[size] = bench_size(size, args, rate, Path(tmp))
    print("ours/trl " + " ".join(f"{s}={ratios[s]:.2f}" if s in ratios else f"{s}=n/a" for s in SIZES))


if __name__ == "__main__":
    main()
