"""The main job when it shares the CPU (issue #52): its wall time alone, beside one busy process and beside two, for
each way of choosing its CPU threads, so a default can be picked from figures (docs/performance.md).

    python scripts/bench_contention.py                       # every setting, 30 steps, 0/1/2 busy processes
    python scripts/bench_contention.py --settings auto today --steps 30 --repeats 2
    python scripts/bench_contention.py --short               # CI's short form: 2 steps, settings today and auto

A busy process is ``python -c 'while True: pass'`` (one core's worth of work, as another run's thread). The job is
``gdro-train`` on the embedded tiny default for ``--steps`` steps with no evaluation and no checkpoint; its time is
the process's wall time, from start to exit (imports included: a user waits for them too). Settings:

    today     threads=null, torch's default (a thread per core), OpenMP's default wait policy: gdro before #52
    passive   today + OMP_WAIT_POLICY=PASSIVE (a waiting OpenMP thread sleeps at once instead of spinning)
    threads1  threads=1
    auto      threads=auto: the cores this process may use less the busy ones, measured at start and again when a
              step runs far slower than the first ones (gdro.common.threads)

Each figure is the median over ``--repeats``; ratios are to the same setting alone and to ``today`` alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = {
    "today": ({}, ["threads=null"]),
    "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, ["threads=null"]),
    "threads1": ({}, ["threads=1"]),
    "auto": ({}, ["threads=auto"]),
}
BUSY = "while True: pass"


def run_job(setting: str, steps: int, busy: int, out: Path) -> float:
    env_extra, overrides = SETTINGS[setting]
    env = {**os.environ, **env_extra, "WANDB_MODE": "disabled"}
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0.0)  # the busy processes are running before the job starts
        run_dir = out / f"{setting}_b{busy}_{time.monotonic_ns()}"
        cmd = [sys.executable, "-m", "gdro.cli.train", f"steps={steps}", "eval.at_start=false", "eval.every=0",
               "eval.at_end=false", "save_final=false", "checkpoint.every=0", "logger=jsonl", "progress=false",
               *overrides, f"hydra.run.dir={run_dir}"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    if proc.returncode != 0:
        raise SystemExit(f"bench_contention: {setting} beside {busy} failed ({proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
    return wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["today", "passive", "threads1", "auto"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2], help="busy processes beside the job")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--short", action="store_true", help="CI's short form: 2 steps, today and auto, 0 and 1 busy")
    args = ap.parse_args(argv)
    if args.short:
        args.steps, args.settings, args.busy, args.repeats = 2, ["today", "auto"], [0, 1], 1
    print(f"cores this process may use: {len(os.sched_getaffinity(0))}; {args.steps} steps; median of "
          f"{args.repeats}")
    walls: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="gdro-contention-") as tmp:
        for setting in args.settings:
            for busy in args.busy:
                walls[setting, busy] = statistics.median(run_job(setting, args.steps, busy, Path(tmp))
                                                         for _ in range(args.repeats))
                print(f"  {setting:9s} beside {busy} busy: {walls[setting, busy]:7.1f} s", flush=True)
    base = walls.get(("today", 0))
    print("\n| setting | " + " | ".join(f"beside {b}" for b in args.busy) + " | alone vs today's alone |")
    print("|---|" + "---|" * (len(args.busy) + 1))
    for setting in args.settings:
        alone = walls.get((setting, 0))
        cells = [f"{walls[setting, b]:.1f} s" + (f" ({walls[setting, b] / alone:.2f}x)" if alone and b else "")
                 for b in args.busy]
        vs = f"{alone / base:.2f}x" if alone and base else "-"
        print(f"| {setting} | " + " | ".join(cells) + f" | {vs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
