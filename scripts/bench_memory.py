"""Peak memory of one GRPO step at the paper's vocabulary (151,936 tokens), on the CPU (issue #10).

A randomly initialised Qwen3-shaped model (real vocabulary; tiny hidden size, 2 layers, tied embeddings; built
locally, nothing is downloaded) with the shipped character tokenizer (its ids are < 151,936, so they are valid
ids of the big model). One step: ``rollouts`` completions of exactly ``new_tokens`` tokens through the HF engine
(log-probs off; EOS suppressed with ``min_new_tokens`` so every row really is that long), the reference model's
log-probs, and the training update (``gdro.policy.ppo_update``, KL to the reference, so it runs the reference pass
again inside). Prints each phase's peak resident memory (RSS, sampled every 5 ms by a thread) and time.

    .venv/bin/python scripts/bench_memory.py                      # 64 x 1,024 tokens: a few minutes on 2 cores
    .venv/bin/python scripts/bench_memory.py --rollouts 16 --new-tokens 256   # quick

For scale, full float32 logits of the step would be rollouts x new_tokens x 151,936 x 4 bytes (64 x 1,024: 40 GB);
the chunked log-probs keep at most ``LOGITS_CHUNK_ELEMENTS`` of them (256 MiB) alive. ``scripts/gpu_check.py``
runs the same step on a GPU at Qwen3-1.7B's size.
"""

from __future__ import annotations

import argparse
import copy
import os
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from gdro.common.rollouts import RolloutBatch, SamplingParams, expand_groups
from gdro.data.prompts import encode_prompts
from gdro.data.synthetic import CopyTask
from gdro.loss import GRPOLoss
from gdro.loss.advantages import group_advantages
from gdro.models.tiny import build_tokenizer
from gdro.policy import (
    Forward,
    OptimConfig,
    ppo_update,
)
from gdro.policy.kernels import LOGITS_CHUNK_ELEMENTS
from gdro.policy.microbatch import group_micro_batches, micro_batches
from gdro.rollout.hf import HFGenerator

QWEN3_VOCAB = 151_936
GIB = 2**30


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss


class PeakRSS:
    """Peak RSS over a ``with`` block, sampled by a background thread (``getrusage``'s maxrss never resets)."""

    def __init__(self, every_s: float = 0.005):
        self.every_s, self.peak = every_s, 0
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.every_s)

    def __enter__(self):
        self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


@dataclass
class Phase:
    name: str
    seconds: float
    tokens: int
    peak_rss: int
    peak_cuda: int | None  # torch.cuda.max_memory_allocated during the phase (None on the CPU)

    def line(self) -> str:
        cuda = f"  peak CUDA {self.peak_cuda / GIB:6.2f} GiB" if self.peak_cuda is not None else ""
        return (f"{self.name:<34} {self.seconds:8.1f} s  {self.tokens / self.seconds:10.0f} tok/s  "
                f"peak RSS {self.peak_rss / GIB:6.2f} GiB{cuda}")


def measure(name: str, tokens: int, device: torch.device, fn):
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    with PeakRSS() as rss:
        out = fn()
        if cuda:
            torch.cuda.synchronize(device)
    phase = Phase(name, time.perf_counter() - t0, tokens, rss.peak,
                  torch.cuda.max_memory_allocated(device) if cuda else None)
    print(phase.line(), flush=True)
    return out, phase


def qwen3_model(tokenizer, *, hidden_size: int, num_hidden_layers: int, num_attention_heads: int,
                num_key_value_heads: int, head_dim: int, intermediate_size: int, vocab_size: int = QWEN3_VOCAB,
                max_position_embeddings: int = 4096, dtype: torch.dtype = torch.float32,
                device: torch.device | str = "cpu", gradient_checkpointing: bool = True, seed: int = 0):
    """A randomly initialised ``Qwen3ForCausalLM`` (tied embeddings) whose special ids are the tokenizer's."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                      num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                      head_dim=head_dim, intermediate_size=intermediate_size,
                      max_position_embeddings=max_position_embeddings, tie_word_embeddings=True,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return model.eval()


def random_rollouts(tokenizer, prompts: list[str], per_prompt: int, new_tokens: int, seed: int = 0) -> RolloutBatch:
    """Rollouts of exactly ``new_tokens`` random (non-special) tokens each: the shapes of a real batch, for
    measuring training memory and speed where generating it would take too long."""
    rng = np.random.default_rng(seed)
    prompt_ids = encode_prompts(tokenizer, prompts, use_chat_template=True, max_prompt_len=128)
    group_index = expand_groups([per_prompt] * len(prompts))
    low = len(tokenizer.all_special_ids)
    comps = [rng.integers(low, len(tokenizer), new_tokens).tolist() for _ in group_index]
    return RolloutBatch(prompt_ids, group_index, comps, None, [""] * len(comps), ["length"] * len(comps))


def grpo_step(model, tokenizer, *, rollouts: int, per_prompt: int, new_tokens: int, optim_cfg: OptimConfig,
              loss_cfg: GRPOLoss, gen_rollouts: int | None = None, gen_tokens: int | None = None,
              seed: int = 0, engine=None) -> list[Phase]:
    """Generation (``gen_rollouts`` x ``gen_tokens``, default the step's), reference log-probs and the update of one
    GRPO step on ``rollouts`` x ``new_tokens`` (the generated batch when the sizes agree, else random tokens).

    ``engine``: a ``Generator`` following ``model`` (default: the HF engine on ``model``, EOS suppressed so every row
    is full length). The reference model is a frozen copy in the model's compute dtype (bf16 for fp32 masters)."""
    from gdro.models.loading import compute_dtype

    device = next(model.parameters()).device
    gen_rollouts, gen_tokens = gen_rollouts or rollouts, gen_tokens or new_tokens
    task = CopyTask().train()
    name = "vLLM engine" if engine is not None else "HF engine"
    if engine is None:
        engine = HFGenerator(model, tokenizer, use_chat_template=True, max_prompt_len=128, batch_size=gen_rollouts)
        model.generation_config.min_new_tokens = gen_tokens  # EOS suppressed until then: every row is full length
    sampling = SamplingParams(max_new_tokens=gen_tokens)
    ref = copy.deepcopy(model).to(compute_dtype(model)).eval().requires_grad_(False)
    gen_prompts = [p.prompt for p in task[: gen_rollouts // per_prompt]]
    roll, gen = measure(f"generate {gen_rollouts} x {gen_tokens} ({name})", gen_rollouts * gen_tokens, device,
                        lambda: engine.generate(gen_prompts, [per_prompt] * len(gen_prompts), seed=seed,
                                                sampling=sampling))
    gen.tokens = int(roll.lengths.sum())  # a random model's EOS is rare but possible without min_new_tokens
    if (gen_rollouts, gen_tokens) != (rollouts, new_tokens) or gen.tokens != rollouts * new_tokens:
        prompts = [p.prompt for p in task[: rollouts // per_prompt]]
        roll = random_rollouts(tokenizer, prompts, per_prompt, new_tokens, seed)
        print(f"training on {rollouts} x {new_tokens} random completion tokens (same shapes as generated ones)")
    n_tok = int(roll.lengths.sum())
    rng = np.random.default_rng(seed)
    rewards = torch.as_tensor(rng.choice([-1.0, 1.0], len(roll)), dtype=torch.float32)
    adv = group_advantages(rewards, torch.as_tensor(roll.group_index), roll.num_groups)
    pad_id, rows = engine.pad_id, np.arange(len(roll))
    ref_fwd = Forward(pad_id, 1.0, optim_cfg.micro_batch_size, optim_cfg.micro_batch_tokens,
                      shared_prefix=optim_cfg.shared_prefix)
    _, ref_phase = measure("reference log-probs (no grad)", n_tok, device,
                           lambda: ref_fwd.logprobs_no_grad(ref, roll, rows))
    opt, sched = optim_cfg.make(model.parameters())
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    fwd = Forward.bind(optim_cfg, pad_id=pad_id, temperature=1.0)
    (stats, _), upd = measure("update (reference pass + fwd/bwd)", n_tok, device, lambda: ppo_update(
        model, opt, sched, roll, adv, loss_cfg, optim_cfg, fwd, rng=rng, ref_model=ref))
    changed = sum(int((p.detach() != before[k]).sum()) for k, p in model.named_parameters())
    total = sum(p.numel() for p in model.parameters())
    split = group_micro_batches if optim_cfg.shared_prefix else micro_batches  # as ppo_update forms them
    parts = split(roll, rows, optim_cfg.micro_batch_size, optim_cfg.micro_batch_tokens)
    print(f"update: {len(parts)} micro-batch(es) of <= {max(len(p) for p in parts)} rows; loss {stats['train/loss']:.4g}, "
          f"kl {stats['train/kl']:.3g}, grad_norm {stats['train/grad_norm']:.3g}; parameters changed by the step: "
          f"{changed / total:.1%} of {total:,}")
    return [gen, ref_phase, upd]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=64)
    ap.add_argument("--per-prompt", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=1024)
    ap.add_argument("--gen-rollouts", type=int, default=None, help="generation phase size (default: --rollouts)")
    ap.add_argument("--gen-tokens", type=int, default=None, help="generation phase length (default: --new-tokens)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--no-gradient-checkpointing", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tok = build_tokenizer()
    model = qwen3_model(tok, hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=args.hidden // 4, intermediate_size=3 * args.hidden,
                        gradient_checkpointing=not args.no_gradient_checkpointing)
    n_params = sum(p.numel() for p in model.parameters())
    full = args.rollouts * args.new_tokens * QWEN3_VOCAB * 4
    print(f"model: Qwen3, vocab {QWEN3_VOCAB:,}, hidden {args.hidden}, {args.layers} layers, {n_params:,} parameters "
          f"(float32); torch threads {torch.get_num_threads()}")
    print(f"full float32 logits of the step would be {full / GIB:.1f} GiB; a {args.micro_batch_tokens}-token "
          f"micro-batch's {args.micro_batch_tokens * QWEN3_VOCAB * 4 / GIB:.1f} GiB; one chunk "
          f"{LOGITS_CHUNK_ELEMENTS * 4 / GIB:.2f} GiB")
    print(f"RSS after building the model: {rss_bytes() / GIB:.2f} GiB", flush=True)
    optim_cfg = OptimConfig(lr=1e-6, warmup_steps=0, micro_batch_size=8, micro_batch_tokens=args.micro_batch_tokens)
    phases = grpo_step(model, tok, rollouts=args.rollouts, per_prompt=args.per_prompt, new_tokens=args.new_tokens,
                       optim_cfg=optim_cfg, loss_cfg=GRPOLoss(beta_kl=0.001), gen_rollouts=args.gen_rollouts,
                       gen_tokens=args.gen_tokens)
    print(f"peak RSS of the step: {max(p.peak_rss for p in phases) / GIB:.2f} GiB")


if __name__ == "__main__":
    main()
