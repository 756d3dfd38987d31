"""The moving-frontier pilot's criteria (issue #48; protocol in docs/results.md, "A moving frontier (issue #48)"),
read from the pilot's GRPO run dirs or their committed summaries (gdro/report/summary.py):

    python experiments/moving_frontier_pilot.py outputs/moving-frontier-pilot/A [--hard 9]
    python experiments/moving_frontier_pilot.py experiments/results/moving-frontier-pilot/summaries.jsonl.gz
    python experiments/moving_frontier_pilot.py outputs/smollm2-frontier-pilot/A --hard 4    # item 5's pilot


Per run: the pool's share in accbin_0 and in accbin_0-2 after the first pass over the pool (``difficulty/pool/<bin>``
at the step that ends the first epoch, ceil(train_size / prompts_per_step)) and at the last step; the held-out
mean@k (the run's eval.k: 8 on the toy, 1 on SmolLM2) of the hardest levels at step 0 and at the end. Then whether each criterion holds in every run.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from gdro.report.runs import SweepRun, scan_runs
from gdro.report.summary import read_summaries


def criteria(run: SweepRun, hard: list[int]) -> dict:
    rows, cfg = run.rows, run.config
    epoch = math.ceil(cfg["data"]["train_size"] / cfg["prompts_per_step"])
    pool = {r["step"]: r for r in rows if any(k.startswith("difficulty/pool/") for k in r)}
    last = max(pool)

    def shares(row: dict) -> tuple[float, float]:
        counts = {k.rsplit("/", 1)[1]: v for k, v in row.items() if k.startswith("difficulty/pool/")}
        total = sum(counts.values())
        return counts.get("0", 0.0) / total, sum(counts.get(str(b), 0.0) for b in (0, 1, 2)) / total

    k = cfg["eval"]["k"]
    evals = [r for r in rows if all(f"eval/mean@{k}/level_{lv}" in r for lv in hard)]
    tail = [sum(r[f"eval/mean@{k}/level_{lv}"] for lv in hard) / len(hard) for r in evals]
    (b0_start, b02_start), (b0_end, b02_end) = shares(pool[epoch]), shares(pool[last])
    return {"run": run.path.name, "epoch_step": epoch, "last_step": last, "accbin0_start": b0_start,
            "accbin0_2_start": b02_start, "accbin0_end": b0_end, "accbin0_2_end": b02_end,
            "hard_step0": tail[0], "hard_final": tail[-1], "hard_curve": [round(t, 1) for t in tail],
            "c0_mostly_low": b02_start >= 0.5, "c1_accbin0_halves": b0_end <= 0.5 * b0_start,
            "c2_hard_rises": tail[0] <= 5.0 and tail[-1] - tail[0] >= 10.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path, help="a sweep dir or a summaries file")
    ap.add_argument("--hard", type=int, nargs="+", default=[9], help="the hardest third of the levels")
    args = ap.parse_args()
    runs = read_summaries(args.sweep)[0] if args.sweep.is_file() else scan_runs(args.sweep)[0]
    results = [criteria(r, args.hard) for r in runs]
    for res in results:
        print(json.dumps(res))
    for c in ("c0_mostly_low", "c1_accbin0_halves", "c2_hard_rises"):
        print(f"{c}: {'holds' if results and all(r[c] for r in results) else 'fails'} "
              f"({sum(r[c] for r in results)}/{len(results)} runs)")


if __name__ == "__main__":
    main()
