"""One GRPO step at Qwen3-1.7B's size on a GPU: throughput and peak CUDA memory per phase (issue #10).

A randomly initialised model with Qwen3-1.7B's dimensions (hidden 2048, 28 layers, 16/8 heads, head_dim 128,
intermediate 6144, vocabulary 151,936, tied embeddings) in bfloat16 on CUDA (nothing is downloaded); the shipped
character tokenizer supplies prompts (its ids are valid ids of the big model). The step is
``scripts/bench_memory.py``'s: HF-engine rollouts of exactly ``--new-tokens`` tokens, the reference log-probs,
and ``ppo_update`` with KL to the reference, gradient checkpointing and token-budget micro-batches (the
``experiment=paper`` settings). Prints rollout and training tokens/s, peak CUDA memory per phase
(``torch.cuda.max_memory_allocated``, reset per phase), and the share of parameters the step changed (bfloat16
weights with lr 1e-6 round most AdamW updates away: this number shows how many survive).

    .venv/bin/python scripts/gpu_check.py                  # 64 x 1,024 tokens
    .venv/bin/python scripts/gpu_check.py --rollouts 16 --new-tokens 256

Without CUDA it exits at once with status 2 and says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=64)
    ap.add_argument("--per-prompt", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=1024)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--layers", type=int, default=28, help="fewer for a quicker look")
    ap.add_argument("--lr", type=float, default=1e-6)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(f"gpu_check.py needs CUDA, and torch.cuda.is_available() is False (torch {torch.__version__}); "
              "run scripts/bench_memory.py for the CPU measurement", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_memory import GIB, grpo_step, qwen3_model

    from gdro.loss import LossConfig
    from gdro.models import build_tokenizer
    from gdro.policy import OptimConfig

    device = torch.device("cuda")
    tok = build_tokenizer()
    model = qwen3_model(tok, hidden_size=2048, num_hidden_layers=args.layers, num_attention_heads=16,
                        num_key_value_heads=8, head_dim=128, intermediate_size=6144, max_position_embeddings=40960,
                        dtype=torch.bfloat16, device=device, gradient_checkpointing=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{torch.cuda.get_device_name(device)}; Qwen3-1.7B-shaped, {args.layers} layers, {n_params / 1e9:.2f}B "
          f"parameters, bfloat16; weights {torch.cuda.memory_allocated(device) / GIB:.2f} GiB", flush=True)
    optim_cfg = OptimConfig(lr=args.lr, warmup_steps=0, micro_batch_size=8, micro_batch_tokens=args.micro_batch_tokens)
    phases = grpo_step(model, tok, rollouts=args.rollouts, per_prompt=args.per_prompt, new_tokens=args.new_tokens,
                       optim_cfg=optim_cfg, loss_cfg=LossConfig(beta_kl=0.001))
    gen, ref, upd = phases
    print(f"rollout {gen.tokens / gen.seconds:.0f} tok/s; reference {ref.tokens / ref.seconds:.0f} tok/s; "
          f"training (incl. its reference pass) {upd.tokens / upd.seconds:.0f} tok/s; "
          f"peak CUDA memory {max(p.peak_cuda for p in phases) / GIB:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
