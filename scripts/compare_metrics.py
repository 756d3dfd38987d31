"""Compare two runs to the bit: every non-``time/`` key of every ``metrics.jsonl`` row (and ``eval.json``'s metrics,
and the final checkpoint's tensors where both runs saved one). Exit status 1 on any difference.

    python scripts/compare_metrics.py BEFORE_DIR AFTER_DIR [--pairs main rgdro ...] [--allow-added compute/ ...]

With ``--pairs``, BEFORE_DIR and AFTER_DIR are parents and each named subdirectory is compared (the layout of
``scripts/equivalence_runs.sh``).

``--allow-added PREFIX`` (repeatable): a metrics key that starts with PREFIX and is *absent from every row of
BEFORE* is not a difference (a run of a newer gdro logs metrics an older one did not, e.g. the compute ledger's
``compute/``). A key BEFORE has is always compared, whatever its prefix; the number of keys skipped is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _strip(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("time/")}


def compare(a: Path, b: Path, allow_added: tuple[str, ...] = ()) -> list[str]:
    """Differences between run dirs ``a`` and ``b`` (empty: identical); keys only ``b`` has that start with one of
    ``allow_added`` are skipped."""
    diffs: list[str] = []
    compared = []
    if (a / "metrics.jsonl").is_file() or (b / "metrics.jsonl").is_file():
        ra, rb = _rows(a / "metrics.jsonl"), _rows(b / "metrics.jsonl")
        if len(ra) != len(rb):
            diffs.append(f"metrics.jsonl: {len(ra)} rows vs {len(rb)}")
        keys, known = 0, {k for r in ra for k in r}
        added = {k for r in rb for k in r if k not in known and allow_added and k.startswith(allow_added)}
        for i, (x, y) in enumerate(zip(ra, rb)):
            x, y = _strip(x), _strip(y)
            y = {k: v for k, v in y.items() if k not in added}
            keys += len(x)
            for k in sorted(set(x) | set(y)):
                if x.get(k, "<missing>") != y.get(k, "<missing>"):
                    diffs.append(f"metrics.jsonl row {i} (step {x.get('step')}): {k}: {x.get(k, '<missing>')!r} "
                                 f"vs {y.get(k, '<missing>')!r}")
        compared.append(f"{len(ra)} rows, {keys} non-time values" + (f" ({len(added)} added keys skipped)"
                                                                     if added else ""))
    if (a / "eval.json").is_file() or (b / "eval.json").is_file():
        ea, eb = (json.loads((d / "eval.json").read_text())["metrics"] for d in (a, b))
        for k in sorted(set(ea) | set(eb)):
            if not k.startswith("time/") and ea.get(k) != eb.get(k):
                diffs.append(f"eval.json: {k}: {ea.get(k)!r} vs {eb.get(k)!r}")
        compared.append(f"eval.json {len(ea)} metrics")
    fa, fb = a / "checkpoint" / "model.safetensors", b / "checkpoint" / "model.safetensors"
    if fa.is_file() and fb.is_file():
        import torch
        from safetensors.torch import load_file

        ta, tb = load_file(fa), load_file(fb)
        if ta.keys() != tb.keys():
            diffs.append("checkpoint: different tensor names")
        for k in sorted(ta.keys() & tb.keys()):
            if not torch.equal(ta[k], tb[k]):
                diffs.append(f"checkpoint: {k} differs (max {float((ta[k] - tb[k]).abs().max()):.3g})")
        compared.append(f"{len(ta)} final tensors")
    if not compared:
        diffs.append(f"nothing to compare in {a} and {b}")
    print(f"{a.name}: " + ", ".join(compared) + (": identical" if not diffs else f": {len(diffs)} difference(s)"))
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--pairs", nargs="*", help="subdirectories of both to compare")
    ap.add_argument("--allow-added", action="append", default=[], metavar="PREFIX",
                    help="metrics keys with this prefix that BEFORE never logged are not differences (repeatable)")
    args = ap.parse_args()
    pairs = [(args.before / p, args.after / p) for p in args.pairs] if args.pairs else [(args.before, args.after)]
    failed = False
    for a, b in pairs:
        diffs = compare(a, b, tuple(args.allow_added))
        for d in diffs[:20]:
            print("   ", d)
        failed |= bool(diffs)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
