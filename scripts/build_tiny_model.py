"""Build and warm-start the embedded tiny model (0.8M-parameter Qwen3 + char-level tokenizer) on the copy task.

    python scripts/build_tiny_model.py                     # rebuilds the shipped checkpoint at gdro/assets/tiny-copy
    python scripts/build_tiny_model.py --out outputs/tiny-variant --sft-steps 300 --seed 1

Deterministic for a fixed seed and thread count (~20 s on 2 CPU threads). The defaults are those of
``gdro.models.tiny.build_tiny``, which were chosen so that the shipped model leaves GRPO headroom (see its docstring).
"""

from __future__ import annotations

import argparse
import inspect


def main() -> None:
    import torch

    from gdro.data.synthetic import CopyTask
    from gdro.models.source import TINY_DIR
    from gdro.models.tiny import build_tiny

    defaults = {k: v.default for k, v in inspect.signature(build_tiny).parameters.items()
                if v.default is not inspect.Parameter.empty}
    task_defaults = CopyTask()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(TINY_DIR), help="output directory (default: the shipped checkpoint)")
    ap.add_argument("--sft-steps", type=int, default=defaults["sft_steps"], help="SFT steps")
    ap.add_argument("--batch-size", type=int, default=defaults["batch_size"], help="SFT batch size")
    ap.add_argument("--lr", type=float, default=defaults["lr"], help="AdamW learning rate after warmup")
    ap.add_argument("--warmup", type=int, default=defaults["warmup"], help="linear warmup steps")
    ap.add_argument("--min-lr-ratio", type=float, default=defaults["min_lr_ratio"],
                    help="cosine decay floor as a fraction of --lr (1.0 = constant)")
    ap.add_argument("--sft-decay", type=float, default=defaults["sft_decay"], help="SFT levels ∝ decay^L")
    ap.add_argument("--seed", type=int, default=defaults["seed"], help="model init + SFT data seed")
    ap.add_argument("--max-level", type=int, default=task_defaults.max_level, help="longest level of the task")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (results depend on it bit-wise)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    build_tiny(args.out, task=CopyTask(max_level=args.max_level), sft_steps=args.sft_steps,
               batch_size=args.batch_size, lr=args.lr, warmup=args.warmup, min_lr_ratio=args.min_lr_ratio,
               sft_decay=args.sft_decay, seed=args.seed, progress=not args.no_progress)


if __name__ == "__main__":
    main()
