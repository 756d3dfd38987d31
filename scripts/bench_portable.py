"""The portable mode's cost in step time (GDRO_PORTABLE=1, gdro/common/portable.py): the same short run with gdro's defaults
at one thread, under GDRO_PORTABLE=1, and with gdro's defaults at torch's default threads, in turn (A B C A B C ...),
each run's median ``time/step_s`` over its steps after the first; prints each setting's median over rounds and
the ratios to the one-thread default.

    python scripts/bench_portable.py [--rounds 3] [--steps 20] [-- extra gdro-train overrides]

Default run: #31's preset (experiment=toy-curriculum rollouts_per_prompt=4), no evaluation, nothing saved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = {  # name: (environment, overrides)
    "default, 1 thread": ({}, ["threads=1"]),
    "GDRO_PORTABLE=1": ({"GDRO_PORTABLE": "1"}, []),
    "default, torch's threads": ({}, []),
}


def step_time(env: dict[str, str], overrides: list[str], work: Path) -> float:
    gdro_train = Path(sys.executable).with_name("gdro-train")
    base = {k: v for k, v in os.environ.items() if k != "GDRO_PORTABLE"}
    proc = subprocess.run([str(gdro_train), *overrides, f"hydra.run.dir={work}"], env={**base, **env}, cwd=REPO,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench_portable: gdro-train failed ({proc.returncode}): {proc.stderr[-2000:]}")
    rows = [json.loads(x) for x in (work / "metrics.jsonl").read_text().splitlines() if x.strip()]
    times = [r["time/step_s"] for r in rows if isinstance(r.get("time/step_s"), (int, float)) and r.get("step", 0) > 1]
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    # no evaluation: eval.every=0 alone left the step-0 and final evaluations on (the held-out split twice a run)
    common = ["experiment=toy-curriculum", "rollouts_per_prompt=4", f"steps={args.steps}", "eval.every=0",
              "eval.at_start=false", "eval.at_end=false", "save_final=false", "logger=jsonl", "progress=false",
              "checkpoint.every=0", *args.overrides]
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="gdro-bench-portable-") as tmp:
        for rnd in range(args.rounds):
            for i, (name, (env, extra)) in enumerate(SETTINGS.items()):
                times[name].append(step_time(env, [*common, *extra], Path(tmp) / f"r{rnd}_{i}"))
                print(f"round {rnd + 1}: {name}: {times[name][-1]:.3f} s/step", flush=True)
    ref = statistics.median(times["default, 1 thread"])
    print(f"\nmedian s/step over {args.rounds} rounds (each a run's median over steps 2-{args.steps}):")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:26s} {med:.3f}  (x{med / ref:.2f} of the 1-thread default; runs {min(ts):.3f}-{max(ts):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
