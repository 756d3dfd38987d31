"""Print where a run's GDRO weight went: per-bin weights, shares, pass rates and scores, early vs late.

    python scripts/summarize_gdro.py RUN_DIR [RUN_DIR ...] [--early 0.2] [--late 0.4]

"early" averages the first ``--early`` fraction of training steps, "late" the last ``--late`` fraction
(the paper's Fig. 1 uses steps ≥ the 60th percentile). Also prints the eval curve (mean@k overall and per
level) so the weights can be read against the frontier.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

from gdro.algorithm.tracking import read_metrics

BIN_KEY = re.compile(r"^gdro/(weight|share|passrate|score|rollouts)/(.+)$")


def _avg(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(vals)) if vals else float("nan")


def summarize(run_dir: Path, early: float, late: float) -> None:
    rows = read_metrics(run_dir)
    train = [r for r in rows if "train/loss" in r]
    if not train:
        print(f"{run_dir}: no training rows")
        return
    n = len(train)
    head, tail = train[: max(1, int(n * early))], train[int(n * (1 - late)) :]
    kinds: dict[str, set[str]] = {}
    for r in train:
        for k in r:
            m = BIN_KEY.match(k)
            if m:
                kinds.setdefault(m.group(1), set()).add(m.group(2))
    labels = sorted({b for s in kinds.values() for b in s}, key=lambda b: (not b.isdigit(), int(b) if b.isdigit() else 0, b))
    print(f"\n== {run_dir}  ({n} steps; early = first {len(head)}, late = last {len(tail)})")
    if labels:
        print("bin      " + " ".join(f"{b:>7s}" for b in labels))
        for kind in ("weight", "share", "passrate", "score", "rollouts"):
            if kind not in kinds:
                continue
            for name, part in (("early", head), ("late", tail)):
                vals = [_avg(part, f"gdro/{kind}/{b}") for b in labels]
                print(f"{kind[:5]:5s} {name:5s}" + " ".join(f"{v:7.3f}" if np.isfinite(v) else "      -" for v in vals))
    for key in ("gdro/weight_entropy", "gdro/lead_lag", "gdro/mu", "rollout/n_per_prompt_mean"):
        if any(key in r for r in train):
            print(f"{key}: early {_avg(head, key):.3f}  late {_avg(tail, key):.3f}")
    evals = [r for r in rows if any(k.startswith("eval/mean@") for k in r)]
    if evals:
        mk = next(k for k in evals[0] if k.startswith("eval/mean@") and "/level_" not in k)
        levels = sorted(int(k.rsplit("_", 1)[1]) for k in evals[0] if k.startswith(mk + "/level_"))
        print(f"eval step  {mk:>12s}  pass@k   " + " ".join(f"L{lv:<4d}" for lv in levels))
        pk = mk.replace("mean@", "pass@")
        for r in evals:
            print(f"     {r['step']:4d}  {r[mk]:12.1f}  {r.get(pk, float('nan')):6.1f}   "
                  + " ".join(f"{r[f'{mk}/level_{lv}']:5.0f}" for lv in levels))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--early", type=float, default=0.2)
    ap.add_argument("--late", type=float, default=0.4)
    args = ap.parse_args()
    missing = [str(run) for run in args.runs if not (run / "metrics.jsonl").is_file()]
    if missing:  # a sweep dir instead of its run dirs, or a typo: one line, nothing printed for the others
        ap.error(f"no metrics.jsonl in {', '.join(missing)} (pass run dirs, e.g. SWEEP/*_s0)")
    for run in args.runs:
        summarize(run, args.early, args.late)


if __name__ == "__main__":
    main()
