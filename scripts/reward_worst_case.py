"""The reward's slowest inputs among the hostile-input tests' completions: CPU seconds per completion, slowest first.

    python scripts/reward_worst_case.py            # all of them (about a minute on 2 busy cores)
    python scripts/reward_worst_case.py --top 10

Scores each completion in its own ``score()`` call (one reward per group): the seeded fuzz of
``tests/test_reward_fuzz.py`` (its three cases, ``timeout_s`` 0.5 as there), its huge-exponent literals, and the junk
batch and the huge irrational powers of ``tests/test_rewards.py``, in the main thread (default ``timeout_s``) and in a
worker thread (no deadline: only the magnitude guard bounds the time). Prints the slowest per group and overall, in
CPU seconds of the scoring thread (what the reward's deadline bounds; wall time also counts whatever else the machine
runs). Figures, not a test: the fuzz asserts the documented per-completion bound, nothing here does.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_reward_fuzz as fuzz
from test_rewards import HUGE_POWERS, _junk

from gdro.grading.rewards import MathVerifyReward


def _timed(r: MathVerifyReward, text: str, gold: str) -> tuple[float, str]:
    t0 = time.thread_time()
    b = r.score([text], [gold], [True])
    dt = time.thread_time() - t0
    status = "correct" if b.correct[0] else "timeout" if b.n_timeout else "unparsable" if b.n_unparsable else \
        "error" if b.n_error else "bad_gold" if b.n_bad_gold else "incorrect"
    return dt, status


def _fuzz() -> list[tuple[float, str, str, str]]:
    out = []
    for i, (case, (kwargs, n)) in enumerate(fuzz.CASES.items()):
        rng = np.random.default_rng([fuzz.SEED, i])
        r = MathVerifyReward(timeout_s=fuzz.TIMEOUT_S, correct=1.0, incorrect=-1.0, **kwargs)
        for _kind, text in fuzz.completions(rng, n):
            gold = fuzz._pick(rng, fuzz.GOLDS)
            dt, status = _timed(r, text, gold)
            out.append((dt, f"fuzz/{case}", status, text))
    r = MathVerifyReward(timeout_s=fuzz.TIMEOUT_S)
    for answer in fuzz.HUGE_EXPONENTS:
        dt, status = _timed(r, f"\\boxed{{{answer}}}", "28452683")
        out.append((dt, "huge-exponent", status, answer))
    return out


def _junk_rows(where: str) -> list[tuple[float, str, str, str]]:
    r = MathVerifyReward()
    texts = [*_junk(), *(f"\\boxed{{{h}}}" for h in HUGE_POWERS)]
    return [(dt, f"junk/{where}", status, text) for text in texts for dt, status in [_timed(r, text, "389192")]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    rows = _fuzz() + _junk_rows("main-thread")
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("rows", _junk_rows("worker-thread")))
    th.start()
    th.join()
    rows += box["rows"]
    groups = sorted({g for _, g, _, _ in rows})
    for group in [*groups, "all"]:
        mine = sorted((row for row in rows if group in ("all", row[1])), reverse=True)
        print(f"{group}: {len(mine)} completions, slowest {mine[0][0]:.3f} s, total {sum(r[0] for r in mine):.1f} s")
        for dt, g, status, text in mine[: args.top if group == "all" else 1]:
            shown = text[-80:].encode("unicode_escape").decode()
            print(f"  {dt:7.3f} s  {g:22s} {status:10s} ...{shown}")


if __name__ == "__main__":
    main()
