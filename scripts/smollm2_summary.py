"""Before and after, per level, for runs of ``experiment=smollm2-add`` (issue #30): held-out accuracy and the answer
format apart from it, and each method's gain, paired with GRPO by seed.

    python scripts/smollm2_summary.py outputs/smollm2            # every run under the dir, grouped by method

A run is a dir holding ``run.json`` and ``metrics.jsonl`` whose run finished (``status`` completed). Per method,
mean ± the Student-t 95% half-width over seeds of: ``eval/mean@1`` (accuracy: the last number written equals the sum
and the end token came in time; overall and per level), ``eval/boxed`` (a complete ``\\boxed{}`` present) and
``eval/finished`` (the end token emitted), at the first evaluation (step 0) and the last; the gain last − first,
per seed; and each method − GRPO at the last evaluation, paired by seed. Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from gdro.report.table import mean_ci

BASELINE = "uniform+fixed"
NAMES = {"uniform+fixed": "GRPO", "prompt-gdro+fixed": "Prompt-GDRO", "uniform+rollout-gdro": "Rollout-GDRO"}


def load(root: Path) -> dict[str, dict[int, list[dict]]]:
    """method -> seed -> evaluation rows (step order) of the completed runs under ``root``."""
    out: dict[str, dict[int, list[dict]]] = {}
    for run_json in sorted(root.rglob("run.json")):
        meta = json.loads(run_json.read_text())
        if meta.get("status") != "completed":
            print(f"skipped (status {meta.get('status')}): {run_json.parent}", file=sys.stderr)
            continue
        rows = [json.loads(x) for x in (run_json.parent / "metrics.jsonl").read_text().splitlines() if x.strip()]
        evals = [r for r in rows if "eval/mean@1" in r]
        ch = meta.get("choices", {})
        method = f"{ch.get('sampler', '?')}+{ch.get('allocator', '?')}"
        out.setdefault(method, {})[int(meta["config"]["seed"])] = evals
    return out


def cell(values: list[float]) -> str:
    m, ci, n = mean_ci(values)
    if n == 0:
        return "–"
    return f"{m:.1f}" + (f" ± {ci:.1f}" if math.isfinite(ci) else " (n=1)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    args = ap.parse_args()
    runs = load(args.root)
    if not runs:
        print(f"smollm2_summary: no completed run under {args.root}", file=sys.stderr)
        return 2
    levels = sorted({int(k.rsplit("_", 1)[1]) for m in runs.values() for ev in m.values() for k in ev[0]
                     if k.startswith("eval/mean@1/level_")})
    cols = [("accuracy", "eval/mean@1")] + [(f"acc L{lv}", f"eval/mean@1/level_{lv}") for lv in levels] + \
           [("boxed", "eval/boxed")] + [(f"boxed L{lv}", f"eval/boxed/level_{lv}") for lv in levels] + \
           [("finished", "eval/finished")] + [(f"fin L{lv}", f"eval/finished/level_{lv}") for lv in levels]
    order = sorted(runs, key=lambda m: (m != BASELINE, m))
    print("| method | seeds | when | " + " | ".join(c for c, _ in cols) + " |")
    print("|---|---|---|" + "---:|" * len(cols))
    for method in order:
        seeds = sorted(runs[method])
        for when, idx in (("step 0", 0), ("last", -1)):
            step = runs[method][seeds[0]][idx]["step"]
            vals = [cell([runs[method][s][idx][k] for s in seeds]) for _, k in cols]
            print(f"| {NAMES.get(method, method)} | {len(seeds)} | {when} ({step}) | " + " | ".join(vals) + " |")
        gains = [cell([runs[method][s][-1][k] - runs[method][s][0][k] for s in seeds]) for _, k in cols]
        print(f"| {NAMES.get(method, method)} | {len(seeds)} | **gain** | " + " | ".join(gains) + " |")
    if BASELINE in runs:
        print("\nAt the last evaluation, each method − GRPO, paired by seed (mean ± 95% CI):\n")
        print("| method | pairs | " + " | ".join(c for c, _ in cols[: len(levels) + 1]) + " |")
        print("|---|---|" + "---:|" * (len(levels) + 1))
        base = runs[BASELINE]
        for method in order[1:]:
            pairs = sorted(set(runs[method]) & set(base))
            diffs = [cell([runs[method][s][-1][k] - base[s][-1][k] for s in pairs]) for _, k in cols[: len(levels) + 1]]
            print(f"| {NAMES.get(method, method)} | {len(pairs)} | " + " | ".join(diffs) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
