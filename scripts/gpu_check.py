"""One GRPO step at Qwen3-1.7B's size on a GPU: throughput and peak CUDA memory per phase (issue #10).

A randomly initialised model with Qwen3-1.7B's dimensions (hidden 2048, 28 layers, 16/8 heads, head_dim 128,
intermediate 6144, vocabulary 151,936, tied embeddings) on CUDA (nothing is downloaded), as the trainer holds it:
fp32 master weights computing under bf16 autocast (``--master-dtype bfloat16``: bf16 weights), a bf16 reference.
The shipped character tokenizer supplies prompts (its ids are valid ids of the big model). The step is
``scripts/bench_memory.py``'s: rollouts of ``--new-tokens`` tokens (HF engine, or ``--engine vllm``: the model is
saved to a temporary directory and an in-process vLLM colocated with it, ``--gpu-memory-utilization``, weights synced
from the policy), the reference log-probs, and ``ppo_update`` with KL to the reference, gradient checkpointing and
token-budget micro-batches (the ``experiment=paper`` settings). Prints rollout and training tokens/s, peak CUDA
memory per phase (``torch.cuda.max_memory_allocated``, reset per phase: PyTorch's allocations only, not vLLM's
pool), and the share of parameters the step changed (bf16 weights with lr 1e-6 round most AdamW updates away).

    .venv/bin/python scripts/gpu_check.py                  # 64 x 1,024 tokens, HF engine
    .venv/bin/python scripts/gpu_check.py --engine vllm    # needs vllm
    .venv/bin/python scripts/gpu_check.py --rollouts 16 --new-tokens 256

Without CUDA it exits at once with status 2 and says so. ``--cpu`` runs the same code path on the CPU at a tiny size
(hidden 64, 4/2 heads of 16, intermediate 192, the real vocabulary; HF engine only): a check that the script runs (CI's
short form, tests/test_documented_scripts.py), not a measurement.

    .venv/bin/python scripts/gpu_check.py --cpu --layers 1 --rollouts 4 --per-prompt 2 --new-tokens 8
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
    ap.add_argument("--master-dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.45)
    ap.add_argument("--cpu", action="store_true",
                    help="the same step on the CPU at a tiny size (a check, not a measurement)")
    args = ap.parse_args()
    if args.cpu and args.engine != "hf":
        ap.error("--cpu runs the HF engine only")
    if not args.cpu and not torch.cuda.is_available():
        print(f"gpu_check.py needs CUDA, and torch.cuda.is_available() is False (torch {torch.__version__}); "
              "run scripts/bench_memory.py for the CPU measurement", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_memory import GIB, grpo_step, qwen3_model

    from gdro.loss import GRPOLoss
    from gdro.models.loading import COMPUTE_DTYPE_ATTR
    from gdro.models.tiny import build_tokenizer
    from gdro.policy import OptimConfig

    device = torch.device("cpu" if args.cpu else "cuda")
    tok = build_tokenizer()
    dims = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
            "intermediate_size": 6144}
    if args.cpu:
        dims = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                "intermediate_size": 192}
    model = qwen3_model(tok, num_hidden_layers=args.layers, max_position_embeddings=40960,
                        dtype=getattr(torch, args.master_dtype), device=device, gradient_checkpointing=True, **dims)
    setattr(model, COMPUTE_DTYPE_ATTR, torch.bfloat16)  # as load_model(spec, train=True) marks the policy
    n_params = sum(p.numel() for p in model.parameters())
    where = ("CPU (--cpu: a check of the script, not a measurement); Qwen3-shaped, hidden 64" if args.cpu
             else f"{torch.cuda.get_device_name(device)}; Qwen3-1.7B-shaped")
    held = "" if args.cpu else f"; weights {torch.cuda.memory_allocated(device) / GIB:.2f} GiB"
    print(f"{where}, {args.layers} layers, {n_params / 1e9:.2f}B "
          f"parameters, {args.master_dtype} weights, bf16 compute{held}", flush=True)
    engine = None
    if args.engine == "vllm":
        import tempfile

        from gdro.rollout.vllm import VLLMEngineConfig, VLLMGenerator

        tmp = tempfile.mkdtemp(prefix="gdro-gpu-check-")
        model.save_pretrained(tmp, safe_serialization=True, state_dict={
            k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
        tok.save_pretrained(tmp)
        eng_cfg = VLLMEngineConfig(gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=True)
        engine = VLLMGenerator(eng_cfg, model, tok, model_path=tmp, use_chat_template=True, max_prompt_len=128,
                               max_new_tokens=args.new_tokens, dtype="bfloat16")
        print(f"vLLM engine up; CUDA memory reserved by torch {torch.cuda.memory_reserved(device) / GIB:.2f} GiB, "
              f"free on the device {torch.cuda.mem_get_info(device)[0] / GIB:.2f} GiB", flush=True)
    optim_cfg = OptimConfig(lr=args.lr, warmup_steps=0, micro_batch_size=8, micro_batch_tokens=args.micro_batch_tokens)
    phases = grpo_step(model, tok, rollouts=args.rollouts, per_prompt=args.per_prompt, new_tokens=args.new_tokens,
                       optim_cfg=optim_cfg, loss_cfg=GRPOLoss(beta_kl=0.001), engine=engine)
    if engine is not None:
        import time

        t0 = time.perf_counter()
        engine.sync_weights(model)
        print(f"vLLM weight sync after the update: {time.perf_counter() - t0:.2f} s", flush=True)
    gen, ref, upd = phases
    peak = (f"peak RSS {max(p.peak_rss for p in phases) / GIB:.2f} GiB" if args.cpu
            else f"peak CUDA memory {max(p.peak_cuda for p in phases) / GIB:.2f} GiB")
    print(f"rollout {gen.tokens / gen.seconds:.0f} tok/s; reference {ref.tokens / ref.seconds:.0f} tok/s; "
          f"training (incl. its reference pass) {upd.tokens / upd.seconds:.0f} tok/s; {peak}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
