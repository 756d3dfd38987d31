"""Markdown rows of the baseline table in docs/smollm2-pilots.md from completion files written by baseline.py --out.

    python experiments/smollm2-pilots/table.py experiments/smollm2-pilots/results/sweep_*.jsonl
"""
import json
import sys
from pathlib import Path

import numpy as np

for f in sys.argv[1:]:
    rows = [json.loads(line) for line in Path(f).read_text().splitlines()]
    for lv in sorted({r["level"] for r in rows}):
        rs = [r for r in rows if r["level"] == lv]

        def pct(key, rs=rs):
            return 100 * float(np.mean([bool(r[key]) if not callable(key) else key(r) for r in rs]))
        any_eos = 100 * float(np.mean([r["correct_any"] and r["finished"] for r in rs]))
        print(f"| {f.split('/')[-1].removesuffix('.jsonl')} | {rs[0]['prompt'][:58]!r} | L{lv} | {len(rs)} | "
              f"{pct('boxed'):.0f} | {pct('finished'):.0f} | {pct('correct'):.1f} | {any_eos:.1f} | "
              f"{sum(r['eot'] for r in rs)} |")
