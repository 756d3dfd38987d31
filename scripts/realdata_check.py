"""Load every real benchmark copy and score a fixed battery of answers against every gold; print counts and a digest.

    python scripts/realdata_check.py                   # the real copies beside the project (../shared/realdata)
    python scripts/realdata_check.py --load 4          # the same while 4 busy processes load the machine
    python scripts/realdata_check.py --data DIR
    python scripts/realdata_check.py --limit 8         # CI's short form: every file loads, its first 8 problems scored

Per benchmark file: rows, problems kept, golds prepared at load (read by gdro's rules / compared as normalised
text), the self-match rate on math-verify's path (fast path off) and on the default path, how many perturbed golds
(first integer + 1) were rejected, and the evaluation / training verdicts on a correct box followed by 400
characters of checking. The battery's verdicts are hashed into one digest: equal digests across runs (one of them
under load) show that verdicts do not depend on machine load. Timings are printed but not part of the digest.
``--limit N`` scores the first N problems of each file only (each file still loads whole); its digest is of those.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import re
import time
from pathlib import Path

from gdro.data.benchmarks import load_benchmark
from gdro.grading.rewards import MathVerifyReward

FILES = [
    ("math500", "math500.jsonl", {}),
    ("aime2024", "aime2024.jsonl", {}),
    ("aime2025", "aime2025.jsonl", {}),
    ("amc23", "amc23.jsonl", {}),
    ("minerva", "minerva.jsonl", {}),
    ("minerva", "minerva_qwen_eval.jsonl", {"solution_key": "solution"}),
    ("olympiadbench", "olympiadbench.jsonl", {}),
    ("dapo_math", "dapo_math_processed_sample.jsonl", {}),
    ("dapo_math", "dapo_math_chat_sample.jsonl", {}),
]
INT = re.compile(r"\d+")
CHECK = "\n\nLet me verify this once more.\n```python\nprint('checking the arithmetic step by step')\n```\n" * 5


def _busy(stop) -> None:
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1_000_003


def battery(golds: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Per gold: the box alone, the box followed by 400 characters of checking, the perturbed gold (if it has an
    integer). Returns texts, their golds and their kinds ("self", "checked", "perturbed")."""
    texts, gold_of, kinds = [], [], []
    for g in golds:
        m = INT.search(g)
        variants = [("self", f"So \\boxed{{{g}}}"), ("checked", f"So \\boxed{{{g}}}.{CHECK}")]
        if m:
            variants.append(("perturbed", f"So \\boxed{{{g[: m.start()]}{int(m.group()) + 1}{g[m.end():]}}}"))
        for kind, text in variants:
            texts.append(text)
            gold_of.append(g)
            kinds.append(kind)
    return texts, gold_of, kinds


def check(data: Path, limit: int | None = None) -> str:
    digest = hashlib.sha256()
    print("| file | rows | kept | golds prepared | by gdro's rules | as normalised text | self (math-verify) | "
          "self (default) | perturbed rejected | box + 400 chars: eval / train | s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for name, file, overrides in FILES:
        t0 = time.perf_counter()
        problems, report = load_benchmark(name, data_files=str(data / file), **overrides)
        golds = [p.answer for p in problems[:limit]]
        rows = {}
        for fast in (False, True):
            r = MathVerifyReward(fast_path=fast)
            r.use_golds(report.golds)
            b = r.score([f"So \\boxed{{{g}}}" for g in golds], golds, [True] * len(golds))
            rows[fast] = int(b.correct.sum())
            digest.update(b.correct.tobytes())
        r = MathVerifyReward()
        r.use_golds(report.golds)
        texts, gold_of, kinds = battery(golds)
        train = r.score(texts, gold_of, [True] * len(texts)).correct
        ev = r.for_eval().score(texts, gold_of, [True] * len(texts)).correct
        digest.update(train.tobytes() + ev.tobytes())
        perturbed = [i for i, k in enumerate(kinds) if k == "perturbed"]
        long_box = [i for i, k in enumerate(kinds) if k == "checked"]
        print(f"| {file} | {report.rows_read} | {report.kept} | {len(report.golds.golds)} | {len(report.golds.rewritten)} "
              f"| {len(report.golds.text_only)} | {rows[False]}/{len(golds)} | {rows[True]}/{len(golds)} "
              f"| {int((~ev[perturbed]).sum())}/{len(perturbed)} | {int(ev[long_box].sum())} / {int(train[long_box].sum())} "
              f"| {time.perf_counter() - t0:.1f} |")
    return digest.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata"))
    ap.add_argument("--load", type=int, default=0, help="busy processes to run meanwhile (0 = none)")
    ap.add_argument("--limit", type=int, default=None, help="score the first N problems of each file (default: all)")
    args = ap.parse_args()
    stop = mp.Event()
    procs = [mp.Process(target=_busy, args=(stop,), daemon=True) for _ in range(args.load)]
    for p in procs:
        p.start()
    try:
        t0 = time.perf_counter()
        digest = check(Path(args.data), args.limit)
        print(f"verdict digest {digest}  ({time.perf_counter() - t0:.1f} s, {args.load} busy processes)")
    finally:
        stop.set()
        for p in procs:
            p.join()


if __name__ == "__main__":
    main()
