"""How close the pilots' "last integer" rule is to gdro's reward with answer_mode=any (math-verify extraction).

    python experiments/smollm2-pilots/check_any_mode.py completions.jsonl [...]   (files written by baseline.py --out)

Prints the agreement between the two verdicts (both with require_eos) and a few disagreements.
"""
import json
import sys
from pathlib import Path

from gdro.grading.reward_config import RewardConfig
from gdro.grading.rewards import MathVerifyReward

rows = [json.loads(line) for f in sys.argv[1:] for line in Path(f).read_text().splitlines()]
for mode in ("any", "boxed"):
    rw = MathVerifyReward(RewardConfig(answer_mode=mode))
    got = rw.score([r["text"] for r in rows], [r["gold"] for r in rows], [r["finished"] for r in rows]).correct
    mine = [bool((r["correct_any"] if mode == "any" else r["correct_noeos"]) and r["finished"]) for r in rows]
    agree = sum(int(a == b) for a, b in zip(got, mine))
    print(json.dumps({"answer_mode": mode, "n": len(rows), "agree": agree, "gdro_correct": int(sum(got)),
                      "pilot_correct": int(sum(mine))}))
    for r, a, b in [(r, a, b) for r, a, b in zip(rows, got, mine) if a != b][:6]:
        print(f"  gdro={a} pilot={b} gold={r['gold']} text={r['text'][:100]!r}")
