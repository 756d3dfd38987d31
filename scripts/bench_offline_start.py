"""Start-up of ``model=smollm2-135m`` without a reachable hub, and the size of its LoRA checkpoints (issue #49, item 4).

    python scripts/bench_offline_start.py                    # both parts, this machine's own network
    python scripts/bench_offline_start.py --no-hub           # on a machine with network: HF_ENDPOINT at a closed port
    python scripts/bench_offline_start.py --part start --repeats 3
    python scripts/bench_offline_start.py --no-hub --short   # CI's short form: a check that it runs, not a measurement

``start``: one-step ``gdro-train experiment=smollm2-add`` runs (no evaluation, no checkpoint), alternately with and
without ``HF_HUB_OFFLINE=1``; for each, the seconds from launch to the line ``loading model`` (the weights chosen:
the hub's, or the local copy ``model.fallback``) and to the end of the run, and whether huggingface_hub retried
(``Retrying in``). The acceptance of issue #49: without ``HF_HUB_OFFLINE`` the run starts its training less than 5 s
later than with it.

``lora``: two steps of the same preset with LoRA (r 8, every linear layer; lr 1e-3, no warm-up: seed 0's steps
train, so AdamW holds its moments), a checkpoint after them; its files' sizes
against the base model's weights files (``model.safetensors`` of the dir run.json names), and what the checkpoint
would have held with the base inside (the layout before issue #49: its ``meta.json`` ``lora_base.bytes`` more).

The model dir is built first if missing (``scripts/get_smollm2.py``). Prints markdown tables; the machine's load
moves the seconds, so compare the two modes of one invocation only. ``--short``: every run at 2 prompts x 2
rollouts of <= 8 tokens (``SHORT``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = ["experiment=smollm2-add", "steps=1", "eval.at_start=false", "eval.every=0", "eval.at_end=false",
        "logger=jsonl", "progress=false", "save_final=false"]
SHORT = ["prompts_per_step=2", "rollouts_per_prompt=2", "model.max_new_tokens=8"]  # --short


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_dir(python: str) -> Path:
    out = subprocess.run([python, str(REPO / "scripts" / "get_smollm2.py")], cwd=REPO, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        sys.exit(f"bench_offline_start: the SmolLM2 dir cannot be built: {out.stderr.strip().splitlines()[-1:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def timed_run(python: str, args: list[str], env: dict[str, str]) -> dict:
    """One gdro-train run: seconds to ``loading model`` and to its end, and what it printed of the hub."""
    t0 = time.monotonic()
    proc = subprocess.Popen([python, "-m", "gdro.cli.train", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    chosen, lines = None, []
    for line in proc.stdout:
        lines.append(line)
        if chosen is None and "loading model" in line:
            chosen = time.monotonic() - t0
    rc = proc.wait()
    total = time.monotonic() - t0
    if rc != 0:
        sys.exit(f"bench_offline_start: gdro-train failed ({rc}): {''.join(lines[-5:])}")
    which = next((ln.split(" - ", 1)[-1].strip() for ln in lines if "cannot be had here" in ln), "the hub's weights")
    return {"chosen_s": chosen, "total_s": total, "retries": sum("Retrying in" in ln for ln in lines), "which": which}


def bench_start(python: str, env: dict[str, str], repeats: int, tmp: Path, base: list[str] = BASE) -> None:
    rows: dict[str, list[dict]] = {"HF_HUB_OFFLINE=1": [], "no HF_HUB_OFFLINE": []}
    for i in range(repeats):
        for mode, done in rows.items():
            run_env = {k: v for k, v in env.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
            if mode == "HF_HUB_OFFLINE=1":
                run_env["HF_HUB_OFFLINE"] = "1"
            out = tmp / f"start-{i}-{mode.split('=')[0].replace(' ', '_')}"
            done.append(timed_run(python, [*base, "checkpoint.every=0", "checkpoint.at_end=false",
                                                 f"hydra.run.dir={out}"], run_env))
    print("\n| mode | to `loading model` (s) | 1-step run (s) | hub retries | runs |\n|---|---|---|---|---|")
    med = {}
    for mode, runs in rows.items():
        med[mode] = statistics.median(r["chosen_s"] for r in runs)
        print(f"| {mode} | {med[mode]:.1f} | {statistics.median(r['total_s'] for r in runs):.1f} | "
              f"{sum(r['retries'] for r in runs)} | {len(runs)} |")
    print(f"\nwithout HF_HUB_OFFLINE the weights are chosen {med['no HF_HUB_OFFLINE'] - med['HF_HUB_OFFLINE=1']:+.1f} s "
          f"later (acceptance: < 5 s); it said: {rows['no HF_HUB_OFFLINE'][0]['which']}")


def bench_lora(python: str, env: dict[str, str], tmp: Path, base: list[str] = BASE) -> None:
    run = tmp / "lora"
    timed_run(python, [*base, "steps=2", "model.lora.r=8", "optim.lr=1e-3", "optim.warmup_steps=0",
                       "checkpoint.every=2", f"hydra.run.dir={run}"], {**env, "HF_HUB_OFFLINE": "1"})
    ckpt = run / "checkpoints" / "step_000002"
    files = {p.name: p.stat().st_size for p in sorted(ckpt.iterdir())}
    meta = json.loads((ckpt / "meta.json").read_text())
    weights_dir = Path(json.loads((run / "run.json").read_text())["model"]["path"])
    base_files = sum(p.stat().st_size for p in weights_dir.glob("*.safetensors"))
    total = sum(files.values())
    print(f"\nLoRA checkpoint {ckpt.name} (format {meta['format_version']}), base weights {weights_dir}:\n")
    print("| file | bytes | of the base weights' files |\n|---|---|---|")
    for name, size in files.items():
        print(f"| {name} | {size:,} | {100 * size / base_files:.2f}% |")
    print(f"| **checkpoint** | **{total:,}** | **{100 * total / base_files:.2f}%** |")
    print(f"| base weights' files (*.safetensors) | {base_files:,} | 100% |")
    old = total + meta["lora_base"]["bytes"]
    print(f"| the same checkpoint with the base inside (before #49) | {old:,} | {100 * old / base_files:.2f}% |")
    print(f"\nbase reference: sha256 {meta['lora_base']['sha256']} over {meta['lora_base']['tensors']} tensors "
          f"({meta['lora_base']['bytes']:,} bytes) of {meta['lora_base']['name_or_path']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("start", "lora", "both"), default="both")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each mode (start)")
    ap.add_argument("--no-hub", action="store_true", help="HF_ENDPOINT at a closed local port: no hub, on any machine")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--short", action="store_true",
                    help="2 prompts x 2 rollouts of <= 8 tokens (a check that it runs)")
    args = ap.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "GDRO_SMOLLM2_DIR": str(model_dir(args.python))}
    if args.no_hub:
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{closed_port()}"
    base = [*BASE, *SHORT] if args.short else BASE
    with tempfile.TemporaryDirectory(prefix="bench-offline-") as tmp:
        if args.part in ("start", "both"):
            bench_start(args.python, env, args.repeats, Path(tmp), base)
        if args.part in ("lora", "both"):
            bench_lora(args.python, env, Path(tmp), base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
