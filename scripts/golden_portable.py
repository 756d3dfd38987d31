"""The portable mode's golden run: a short run under ``GDRO_PORTABLE=1`` whose every non-time metric is committed
(tests/fixtures/golden/portable_smoke.json), so that each machine CI runs on checks that one seed gives the same
bits there (docs/results.md, "The machine question"; gdro/common/portable.py).

    python scripts/golden_portable.py --check      # run it and compare with the committed golden (status 1: differs)
    python scripts/golden_portable.py --write      # run it and (re)write the golden, e.g. after a change of results

The comparison is exact (every value of every metrics row but ``time/*``). The golden records the machine and the
library versions it was made with; where torch, transformers or numpy differ from them, ``--check`` says so and
exits 3 (not comparable: a new golden is needed), since those versions change results by themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "fixtures" / "golden" / "portable_smoke.json"
# a few seconds on 2 cores; sampling, math-verify, the update, the classifier, Prompt-GDRO and two evaluations
OVERRIDES = ["experiment=smoke", "steps=4", "eval.every=2", "eval.max_problems=16", "logger=jsonl"]
PINNED = ("torch", "transformers", "numpy")  # versions that change results by themselves
EXIT_DIFFERS, EXIT_NOT_COMPARABLE = 1, 3


def run_golden(work: Path) -> dict:
    """Run the golden's command under GDRO_PORTABLE=1 in ``work``; return its record (metrics, machine, versions)."""
    env = {**os.environ, "GDRO_PORTABLE": "1", "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "1"}
    gdro_train = Path(sys.executable).with_name("gdro-train")
    cmd = [str(gdro_train), *OVERRIDES, f"hydra.run.dir={work}"]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"golden_portable: gdro-train failed (status {proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = [json.loads(x) for x in (work / "metrics.jsonl").read_text().splitlines() if x.strip()]
    meta = json.loads((work / "run.json").read_text())
    return {"command": "GDRO_PORTABLE=1 gdro-train " + " ".join(OVERRIDES),
            "machine": meta.get("machine"), "versions": meta.get("versions"),
            "rows": [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]}


def differences(golden: dict, now: dict) -> list[str]:
    out = []
    if len(golden["rows"]) != len(now["rows"]):
        out.append(f"{len(golden['rows'])} rows in the golden, {len(now['rows'])} now")
    for i, (a, b) in enumerate(zip(golden["rows"], now["rows"])):
        for k in sorted(set(a) | set(b)):
            if a.get(k, "<missing>") != b.get(k, "<missing>"):
                out.append(f"row {i} (step {a.get('step')}): {k}: golden {a.get(k, '<missing>')!r}, now "
                           f"{b.get(k, '<missing>')!r}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdro-golden-") as tmp:
        now = run_golden(Path(tmp) / "run")
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(now, indent=1) + "\n", encoding="utf-8")
        values = sum(len(r) for r in now["rows"])
        print(f"wrote {GOLDEN.relative_to(REPO)}: {len(now['rows'])} rows, {values} values, on {now['machine']['cpu']}")
        return 0
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    changed = [f"{p} {golden['versions'].get(p)} -> {now['versions'].get(p)}" for p in PINNED
               if golden["versions"].get(p) != now["versions"].get(p)]
    if changed:
        print(f"golden_portable: not comparable, library versions differ from the golden's ({'; '.join(changed)}): "
              "rerun with --write on a reference machine", file=sys.stderr)
        return EXIT_NOT_COMPARABLE
    diffs = differences(golden, now)
    where = f"here: {now['machine']['cpu']} ({now['machine']['cpu_capability']}); golden: {golden['machine']['cpu']}"
    if diffs:
        print(f"golden_portable: {len(diffs)} values differ from the golden ({where}); first ones:\n  "
              + "\n  ".join(diffs[:10]), file=sys.stderr)
        return EXIT_DIFFERS
    values = sum(len(r) for r in now["rows"])
    print(f"golden_portable: {len(now['rows'])} rows, {values} values identical to the golden ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
