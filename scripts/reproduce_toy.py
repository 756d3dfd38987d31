"""One command for the toy reproduction: every method × seeds on the embedded task, then the table and figures.

    python scripts/reproduce_toy.py [--seeds 0 1 2] [--steps 100] [--jobs 2] [--out outputs/toy-repro]

Methods (rows): GRPO (uniform + fixed), Prompt-GDRO, Rollout-GDRO, Prompt+Rollout-GDRO (joint), the
square-root allocator, and the ORACLE control (uniform over the generator's levels — it reads the label the
controllers never see). Each run is one single-thread ``gdro-train`` process; ``--jobs`` run at a time (2 on a
2-core machine). Then ``gdro-report`` writes ``table.md``, ``table.csv`` and the figures to ``<out>/report/``.
Runs that already finished (their metrics.jsonl has the last step) are skipped, so an interrupted
reproduction resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

METHODS: dict[str, list[str]] = {
    "grpo": ["sampler=uniform", "allocator=fixed"],
    "prompt-gdro": ["sampler=prompt-gdro", "allocator=fixed"],
    "rollout-gdro": ["sampler=uniform", "allocator=rollout-gdro"],
    "joint": ["sampler=prompt-gdro", "allocator=rollout-gdro"],
    "sqrt": ["sampler=uniform", "allocator=sqrt"],
    "oracle": ["sampler=oracle-levels", "allocator=fixed"],
}


def finished(run_dir: Path, steps: int) -> bool:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return False
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return any(r.get("step") == steps and any(k.startswith("eval/") for k in r) for r in rows)


def run_one(name: str, overrides: list[str], seed: int, steps: int, out: Path, extra: list[str]) -> tuple[str, int, float]:
    run_dir = out / f"{name}_s{seed}"
    if finished(run_dir, steps):
        return f"{name}_s{seed}", 0, 0.0
    cmd = [sys.executable, "-m", "gdro.cli", *overrides, f"seed={seed}", f"steps={steps}", "threads=1",
           "logger=jsonl", "progress=false", "save_final=false", f"hydra.run.dir={run_dir}", *extra]
    t0 = time.perf_counter()
    with (out / f"{name}_s{seed}.log").open("w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    return f"{name}_s{seed}", rc, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--out", type=Path, default=Path("outputs/toy-repro"))
    ap.add_argument("overrides", nargs="*", help="extra gdro-train overrides for every run, after --")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(m, METHODS[m], s) for s in args.seeds for m in args.methods]
    t0 = time.perf_counter()
    print(f"{len(jobs)} runs ({len(args.methods)} methods x {len(args.seeds)} seeds, {args.steps} steps), "
          f"{args.jobs} at a time -> {args.out}", flush=True)
    failed = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, m, o, s, args.steps, args.out, args.overrides) for m, o, s in jobs]
        for fut in futures:
            name, rc, dt = fut.result()
            status = "ok" if rc == 0 else f"FAILED (rc={rc}, see {args.out / (name + '.log')})"
            print(f"  {name:18s} {status}  {dt:6.0f} s   (elapsed {time.perf_counter() - t0:6.0f} s)", flush=True)
            if rc:
                failed.append(name)
    from gdro.report import main as report_main

    rc = report_main([str(args.out)])
    print(f"total elapsed {time.perf_counter() - t0:.0f} s; report in {args.out / 'report'}")
    sys.exit(1 if failed or rc else 0)


if __name__ == "__main__":
    main()
