"""Rebuild the tables of docs/results.md from the committed run summaries (experiments/results/<table>/), without
run dirs or training: every number of a generated block comes out of this command.

    python scripts/rebuild_results.py              # print every table
    python scripts/rebuild_results.py machine      # one table
    python scripts/rebuild_results.py --check      # status 1 when a block of docs/results.md differs from it
    python scripts/rebuild_results.py --write      # rewrite the blocks in docs/results.md

A generated block in docs/results.md sits between ``<!-- table: NAME -->`` and ``<!-- /table: NAME -->``; the tables
of docs/results.md without such a block are historical: their run dirs were not kept, and they say so. A table's
summaries are written by ``gdro-report SWEEP_DIR --summaries experiments/results/<table>/summaries.jsonl.gz``
(gdro/report/summary.py). Statistics: gdro/report/stats.py (scipy, statsmodels, rliable).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gdro.report.stats import iqm_ci, mean_ci, paired_test, probability_of_improvement, t_quantile
from gdro.report.summary import metrics_rows, summary_lines

RESULTS = REPO / "experiments" / "results"
DOCS = REPO / "docs" / "results.md"


def read_summaries(path: Path) -> list[dict]:
    """The raw summaries of a committed file (gzip'd or not), one dict per run (gdro/report/summary.py's reader)."""
    return [json.loads(line) for line in summary_lines(path) if line.strip()]


def rows_of(summary: dict) -> list[dict]:
    return metrics_rows(summary["metrics"])


def final_tail(rows: list[dict], levels: tuple[int, ...], k: int = 8) -> float:
    """The mean of ``eval/mean@k/level_L`` over ``levels`` at the last evaluation row (each level the same size)."""
    last = [r for r in rows if all(f"eval/mean@{k}/level_{lv}" in r for lv in levels)][-1]
    return float(np.mean([last[f"eval/mean@{k}/level_{lv}"] for lv in levels]))


def first_difference(a: list[dict], b: list[dict]) -> float | None:
    """The first logged step at which two runs' rows hold a different value for a key both log (None: identical)."""
    for x, y in zip(a, b):
        if any(x[k] != y[k] for k in x.keys() & y.keys() if k != "step" and not (x[k] != x[k] and y[k] != y[k])):
            return x.get("step")
    return None


def fmt(x: float, digits: int = 1) -> str:
    return "–" if not math.isfinite(x) else f"{x:.{digits}f}"


def seeds_for(sd: float, width: float) -> int:
    """The fewest seeds n whose Student-t 95% half-width t_{n-1} · sd / √n is at most ``width``."""
    n = 2
    while t_quantile(n - 1) * sd / math.sqrt(n) > width:
        n += 1
    return n


# ------------------------------------------------------------------------------------------ the machine question
def machine() -> str:
    """GRPO on #31's preset, seeds 0-15, on one machine with ATen's native (AVX-512) dispatch and under
    GDRO_PORTABLE=1 (AVX2 dispatch, MKL pinned): seed noise against the machine's effect."""
    runs = read_summaries(RESULTS / "machine" / "summaries.jsonl.gz")
    groups: dict[str, dict[int, dict]] = {}
    for s in runs:
        groups.setdefault(s["run"].split("/")[0], {})[int(s["seed"])] = s
    nat, por = groups["native"], groups["portable"]
    tail = {g: {seed: final_tail(rows_of(s), (7, 8)) for seed, s in grp.items()} for g, grp in groups.items()}
    cpu = {g: sorted({f"{s['machine']['cpu']}, {s['machine']['cpu_capability']}" for s in grp.values()})
           for g, grp in groups.items()}
    lines = [("| Dispatch | machine | seeds | final tail mean@8 (L7–8), primary: mean ± 95% CI | s.d. | IQM [95% CI] | "
             "seeds 0–7 | seeds 8–15 |"),
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for g, name in (("native", "native (gdro default)"), ("portable", "`GDRO_PORTABLE=1`")):
        vals = [tail[g][s] for s in sorted(tail[g])]
        m, h, n = mean_ci(vals)
        iqm = iqm_ci(vals)
        lo, hi = ([tail[g][s] for s in sorted(tail[g]) if s < 8], [tail[g][s] for s in sorted(tail[g]) if s >= 8])
        lines.append(f"| {name} | {'; '.join(cpu[g])} | {n} | {fmt(m)} ± {fmt(h)} | {fmt(float(np.std(vals, ddof=1)))}"
                     f" | {fmt(iqm.point)} [{fmt(iqm.low)}, {fmt(iqm.high)}] | {fmt(mean_ci(lo)[0])} ± "
                     f"{fmt(mean_ci(lo)[1])} | {fmt(mean_ci(hi)[0])} ± {fmt(mean_ci(hi)[1])} |")
    common = sorted(set(nat) & set(por))
    diffs = [tail["portable"][s] - tail["native"][s] for s in common]
    pt = paired_test(diffs)
    poi = probability_of_improvement([tail["portable"][s] for s in common], [tail["native"][s] for s in common])
    parts = [first_difference(rows_of(nat[s]), rows_of(por[s])) for s in common]
    same = sum(p is None for p in parts)
    from scipy import stats

    lo8 = [tail["native"][s] for s in sorted(tail["native"]) if s < 8]
    hi8 = [tail["native"][s] for s in sorted(tail["native"]) if s >= 8]
    welch = stats.ttest_ind(lo8, hi8, equal_var=False)
    pooled = float(np.sqrt((np.var(list(tail["native"].values()), ddof=1)
                            + np.var(list(tail["portable"].values()), ddof=1)) / 2))
    sd_diff = float(np.std(diffs, ddof=1))
    lines += [
        "",
        "| Paired by seed: portable − native | value |",
        "|---|---:|",
        f"| seeds paired | {len(common)} |",
        f"| Δ final tail (primary), mean ± 95% CI (t-test p) | {pt.mean:+.1f} ± {pt.half_width:.1f} (p {pt.p:.3f}) |",
        f"| P(portable > native) [95% bootstrap CI] | {poi.point:.2f} [{poi.low:.2f}, {poi.high:.2f}] |",
        f"| seeds whose runs are identical to the bit | {same} of {len(common)} |",
        (f"| first step at which the pair's summaries differ (held-out evaluation, generated tokens, bins): median (range) | "
        f"{fmt(float(np.median([p for p in parts if p is not None])), 0)} "
        f"({fmt(min(p for p in parts if p is not None), 0)}–{fmt(max(p for p in parts if p is not None), 0)}) |"),
        f"| native seeds 0–7 against 8–15, same machine (Welch t-test p) | {np.mean(lo8) - np.mean(hi8):+.1f} (p {welch.pvalue:.3f}) |",
        "",
        "| Seeds for a 95% CI half-width of | 10 points | 5 points | 3 points |",
        "|---|---:|---:|---:|",
        (f"| one row's mean (s.d. {pooled:.1f}, pooled over both) | {seeds_for(pooled, 10)} | {seeds_for(pooled, 5)} "
        f"| {seeds_for(pooled, 3)} |"),
        (f"| a paired Δ of two rows (s.d. of Δ {sd_diff:.1f}, as measured above) | {seeds_for(sd_diff, 10)} | "
        f"{seeds_for(sd_diff, 5)} | {seeds_for(sd_diff, 3)} |"),
        "",
        "Per seed (final tail, native / portable): " + "; ".join(
            f"{s}: {tail['native'][s]:.1f} / {tail['portable'][s]:.1f}" for s in common) + ".",
    ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ #48's pilot
def pilot_criteria(name: str, hard: int, k: int, model: str) -> str:
    """A moving-frontier pilot's runs (GRPO only, seeds 100-101) and its three criteria, from its committed
    summaries: the hardest level ``hard``'s held-out mean@``k`` at each evaluation, the pool's accbin_0 share."""
    sys.path.insert(0, str(REPO / "experiments"))
    from moving_frontier_pilot import criteria

    from gdro.report.summary import read_summaries as load

    runs = load(RESULTS / name / "summaries.jsonl.gz")[0]
    res = [criteria(r, [hard]) for r in runs]
    last, every = res[0]["last_step"], runs[0].config["eval"]["every"]
    lines = [(f"| Run | accbin_0 share: after the first pass (step {res[0]['epoch_step']}) → step {last} | accbin_0–2 "
              f"after the first pass | L{hard} held-out mean@{k}: step 0 → final | L{hard} every {every} steps |"),
             "|---|---:|---:|---:|---|"]
    for r in res:
        lines.append(f"| {model}, seed {r['run'].rsplit('_s', 1)[-1]} | {100 * r['accbin0_start']:.1f}% → "
                     f"{100 * r['accbin0_end']:.1f}% | {100 * r['accbin0_2_start']:.1f}% | {r['hard_step0']:.1f} → "
                     f"{r['hard_final']:.1f} | {' '.join(f'{v:.0f}' for v in r['hard_curve'])} |")
    names = {"c0_mostly_low": "0. ≥ 50% of the pool in accbin_0–2 after the first pass",
             "c1_accbin0_halves": "1. accbin_0's share at most halves by the last step",
             "c2_hard_rises": f"2. L{hard} ≤ 5 at step 0 and +10 points or more by the end"}
    lines += ["", "| Criterion (each in both runs) | holds |", "|---|---|"]
    lines += [f"| {text} | {'yes' if all(r[c] for r in res) else 'no'} ({sum(r[c] for r in res)}/{len(res)}) |"
              for c, text in names.items()]
    return "\n".join(lines) + "\n"


def moving_frontier_pilot() -> str:
    """GRPO on experiment=toy-moving-frontier (candidate A), seeds 100-101: the pilot's three criteria."""
    return pilot_criteria("moving-frontier-pilot", 9, 8, "GRPO")


def smollm2_frontier_pilot() -> str:
    """GRPO on experiment=smollm2-frontier (candidate A, SmolLM2-135M-Instruct), seeds 100-101: its criteria."""
    return pilot_criteria("smollm2-frontier-pilot", 4, 1, "GRPO (SmolLM2)")


def report_tables(summaries: Path, options: list[str], name: str = "compute.md") -> str:
    """The tables of one gdro-report output file (``compute.md``: Holm columns and the primary endpoint's IQM and
    P(> GRPO)) for a committed summaries file and gdro-report options."""
    return report_files(summaries, options, (name,))[0]


def report_files(summaries: Path, options: list[str], names: tuple[str, ...]) -> list[str]:
    """The tables of several gdro-report output files, from one gdro-report run (--no-figures: the tables are the
    same, in a fraction of the time)."""
    import contextlib
    import io
    import tempfile

    from gdro.cli.report import main as report_main

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        if report_main([str(summaries), *options, "--no-figures", "--out", tmp]) != 0:
            raise SystemExit(f"rebuild_results: gdro-report {summaries} failed")
        texts = [(Path(tmp) / name).read_text(encoding="utf-8") for name in names]
    out = []
    for text in texts:
        kept = "\n".join(line for line in text.splitlines() if line.startswith("|") or not line.strip()).strip()
        out.append(re.sub(r"\n{3,}", "\n\n", kept) + "\n")
    return out


def moving_frontier_learnability() -> str:
    """Learnability at windows 2 and 4 against GRPO, seeds 100-101 (the pilot that sets the table's window)."""
    return report_tables(RESULTS / "moving-frontier-learnability" / "summaries.jsonl.gz",
                         ["--tail-levels", "8-9", "--axis", "tokens", "--primary", "area"])


def against_control(summaries: Path, levels: list[int], control: str, baseline: str = "uniform+fixed") -> str:
    """Each row minus the ``control`` row on the primary endpoint (the area under the held-out tail mean@k curve
    against generated tokens, up to the pair's smaller total, as compute.md pairs with GRPO), paired by seed, Holm
    over the rows (gdro/report/stats.py): issue #48's rule that a gain counts beyond "stop spending on the wall"
    only where it beats the zero-variance control."""
    from gdro.report.compute import area, curve
    from gdro.report.names import display_name, method_rank
    from gdro.report.paired import add_tail_metrics, tail_name
    from gdro.report.stats import holm
    from gdro.report.summary import read_summaries as load

    runs = load(summaries)[0]
    added = add_tail_metrics(runs, levels)
    key = next(k for k in added if k.startswith("eval/mean@") and k.endswith(f"/{tail_name(levels)}"))  # the run's k
    by: dict[str, dict] = {}
    for r in runs:
        by.setdefault(r.method, {})[r.seed] = r
    if control not in by:
        raise SystemExit(f"rebuild_results: {summaries} holds no run of the control {control!r}")
    rows = [m for m in sorted(by, key=method_rank) if m not in (control, baseline)]
    family = []
    for m in rows:
        diffs = []
        for seed in sorted(set(by[m]) & set(by[control])):
            (xa, ya), (xc, yc) = curve(by[m][seed], key, "tokens"), curve(by[control][seed], key, "tokens")
            if len(xa) and len(xc):
                x = min(xa[-1], xc[-1])
                a, c = area(xa, ya, x), area(xc, yc, x)
                diffs.append(None if a is None or c is None else a - c)
        family.append(diffs)
    cells = holm(family)
    out = [f"| Row minus {display_name(control)} | pairs | Δ area, Holm-consistent CI (p_H) | beats the control? |",
           "|---|---:|---:|---|"]
    for m, c in zip(rows, cells):
        verdict = ("yes" if c.reject and c.mean > 0 else "no: behind it" if c.reject else "no: its equal")
        p = "–" if not math.isfinite(c.p_holm) else f"{c.p_holm:.3f}"
        out.append(f"| {display_name(m)} | {c.n} | {c.mean:+.1f} ± {c.half_width:.1f} (p_H {p}) | {verdict} |")
    return "\n".join(out) + "\n"


def moving_frontier() -> str:
    """Issue #48's table: every row against GRPO (compute.md: Holm over the rows, the primary endpoint's IQM and
    P(> GRPO)), against the zero-variance control, and whether its budget follows the frontier (wave.md)."""
    path = RESULTS / "moving-frontier" / "summaries.jsonl.gz"
    opts = ["--tail-levels", "8-9", "--axis", "tokens", "--primary", "area"]
    compute, wave = report_files(path, opts, ("compute.md", "wave.md"))  # one gdro-report run
    return "\n".join([compute, against_control(path, [8, 9], "zero-variance"), wave])


def smollm2_frontier() -> str:
    """Issue #48 item 5's table on SmolLM2-135M-Instruct: its rows against GRPO (compute.md), against the
    zero-variance control, and the wave, as moving_frontier's, on the tail its pilot set (levels 2-4, mean@1)."""
    path = RESULTS / "smollm2-frontier" / "summaries.jsonl.gz"
    opts = ["--tail-levels", "2-4", "--axis", "tokens", "--primary", "area"]
    compute, wave = report_files(path, opts, ("compute.md", "wave.md"))
    return "\n".join([compute, against_control(path, [2, 3, 4], "uniform+zero-variance"), wave])


TABLES: dict[str, Callable[[], str]] = {"machine": machine, "moving-frontier-pilot": moving_frontier_pilot,
                                        "moving-frontier-learnability": moving_frontier_learnability,
                                        "smollm2-frontier-pilot": smollm2_frontier_pilot}
if (RESULTS / "moving-frontier" / "summaries.jsonl.gz").is_file():  # once the table's runs are committed
    TABLES["moving-frontier"] = moving_frontier
if (RESULTS / "smollm2-frontier" / "summaries.jsonl.gz").is_file():
    TABLES["smollm2-frontier"] = smollm2_frontier
BLOCK = re.compile(r"<!-- table: (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /table: (?P=name) -->", re.DOTALL)


def docs_blocks(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tables", nargs="*", help=f"tables to rebuild (default: all: {', '.join(TABLES)})")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare with docs/results.md's blocks (status 1: differ)")
    mode.add_argument("--write", action="store_true", help="rewrite docs/results.md's blocks")
    ap.add_argument("--docs", type=Path, default=DOCS, help="the docs file (default: docs/results.md)")
    args = ap.parse_args()
    unknown = [t for t in args.tables if t not in TABLES]
    if unknown:
        ap.error(f"unknown table(s) {unknown}; tables: {', '.join(TABLES)}")
    built = {name: TABLES[name]() for name in (args.tables or TABLES)}
    text = args.docs.read_text(encoding="utf-8")
    blocks = docs_blocks(text)
    if args.write:
        for name, body in built.items():
            if name not in blocks:
                print(f"rebuild_results: docs/results.md has no block <!-- table: {name} -->", file=sys.stderr)
                return 2
            text = text.replace(f"<!-- table: {name} -->\n{blocks[name]}", f"<!-- table: {name} -->\n{body}")
        args.docs.write_text(text, encoding="utf-8")
        print(f"rewrote {len(built)} block(s) of docs/results.md: {', '.join(built)}")
        return 0
    if args.check:
        bad = [n for n, body in built.items() if blocks.get(n) != body]
        for n in bad:
            print(f"rebuild_results: docs/results.md's table {n!r} differs from its summaries "
                  f"({'no block' if n not in blocks else 'numbers changed'}); rerun with --write", file=sys.stderr)
        missing = [n for n in blocks if n not in TABLES]
        for n in missing:
            print(f"rebuild_results: docs/results.md has a block {n!r} that no table builds", file=sys.stderr)
        if not bad and not missing:
            print(f"docs/results.md: {len(built)} table(s) agree with their summaries: {', '.join(built)}")
        return 1 if bad or missing else 0
    for name, body in built.items():
        print(f"## {name}\n\n{body}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
