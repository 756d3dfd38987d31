"""``gdro-report``: the command line of gdro.report (the table, the figures and the run summaries of a sweep)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

from gdro.common.ioerrors import atomic_write_text
from gdro.report.compute import AXES, PRIMARY, write_compute
from gdro.report.exclusions import exclusion_notes
from gdro.report.figures import fig_compute_curves, make_figures
from gdro.report.mechanism import mechanism_markdown, mechanism_rows
from gdro.report.names import BASELINE, METRIC_KEY, display_name, is_headline, metric_sort_key
from gdro.report.paired import add_tail_metrics, paired_comparison, paired_markdown, parse_levels
from gdro.report.paper_plots import write_paper_figures
from gdro.report.presets import tail_levels_or_preset
from gdro.report.runs import Skipped, SweepRun, UnusableRun, group_by_method, scan_runs
from gdro.report.summary import read_summaries, write_summaries
from gdro.report.table import aggregate, to_markdown, write_table
from gdro.report.table1 import log_to_wandb, write_table1
from gdro.report.wave import write_wave


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (its own print the usage block first)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    """Console script ``gdro-report``: a usage error is one line (status 2), an unwritable ``--out`` or a full disk
    one line naming the path (status 74; each file is written whole or not at all: gdro.common.ioerrors.atomic_write);
    ``HYDRA_FULL_ERROR=1`` shows the traceback, as in gdro-train."""
    from gdro.common.ioerrors import is_environment_error, one_line

    try:
        return _main(argv)
    except OSError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or not is_environment_error(err):
            raise
        print(f"gdro-report: {one_line(err)}", file=sys.stderr)
        return 74


def _parser() -> _Parser:
    ap = _Parser(prog="gdro-report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR",
                    help="a sweep dir, or a file of run summaries (written by --summaries)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output dir (default: SWEEP_DIR/report; for a summaries file, report/ beside it)")
    ap.add_argument("--summaries", type=Path, default=None, metavar="FILE",
                    help="also write the summary of every run pooled to FILE, one JSON line each (gzip'd when FILE "
                         "ends in .gz): `gdro-report FILE` rebuilds this report from it (gdro/report/summary.py)")
    ap.add_argument("--which", choices=("final", "best"), default="final",
                    help="eval row per run: the last one, or the one with the best overall mean@k")
    ap.add_argument("--include-incomplete", action="store_true",
                    help="also pool runs that did not complete (interrupted, failed, running, short or with "
                         "malformed metrics lines), marked in the table; unreadable runs are still left out")
    ap.add_argument("--tail-levels", default=None, metavar="LEVELS",
                    help="the hard tail, e.g. 7-12: adds eval/...@k/levels_7-12 (the mean of those levels) to the "
                         "table, and to paired.md the oracle-gain recovery and steps to GRPO's final tail mean@k")
    ap.add_argument("--axis", choices=AXES, default="tokens",
                    help="compute.md's x: generated tokens (default) or training steps; its header names the one used")
    ap.add_argument("--primary", choices=PRIMARY, default="area",
                    help="the pre-registered primary endpoint, a column of compute.md (default: area, the area under "
                         "the held-out curve); the others are secondary; it gets the IQM and P(method > GRPO) block")
    ap.add_argument("--no-figures", action="store_true",
                    help="the tables alone (table.md/csv, paired.md, compute.md, mechanism.md, wave.md), in a "
                         "fraction of the time: no PNG, and no paper_mechanism.md (its text goes with its figures)")
    ap.add_argument("--wandb", action="store_true",
                    help="also log the report (tables, Table 1, figures) to the sweep's W&B group (gdro/report/table1.py)")
    return ap


def _write_mechanism(runs: list[SweepRun], out: Path, figs: list[Path] | None) -> tuple[Path | None, str, Path | None]:
    """mechanism.md (and its text) and the paper's mechanism figures (paper_mechanism.md; their PNGs appended to
    ``figs``, the ones skipped named on stderr; ``figs`` None: --no-figures, the figures and their pages skipped)."""
    mech_rows, mech_bins = mechanism_rows(runs)
    mech_md, mech_text = None, ""
    if mech_rows:
        mech_md = out / "mechanism.md"
        mech_text = mechanism_markdown(mech_rows, mech_bins)
        atomic_write_text(mech_md, "Mechanism columns over each run's training steps after the unseen phase; mean "
                                   "± 95% CI over runs (gdro/report/mechanism.py).\n\n" + mech_text)
    if figs is None:  # the wave's table alone: it is what a reader of the tables needs to say whether budgets move
        write_wave(runs, out, figures=False)
        return mech_md, mech_text, None
    paper_md, paper_figs, paper_skipped = write_paper_figures(runs, out)  # the paper's §7.4 figures
    figs += paper_figs
    for line in paper_skipped:
        print(f"gdro-report: paper figures: {line}", file=sys.stderr)
    wave_files, wave_skipped = write_wave(runs, out)  # the traveling wave: does the budget follow the frontier?
    figs += wave_files
    for line in wave_skipped:
        print(f"gdro-report: wave: {line}", file=sys.stderr)
    return mech_md, mech_text, paper_md


def _scan(ap: _Parser, args: argparse.Namespace) -> tuple[list[SweepRun], list[Skipped], Path]:
    """The runs under SWEEP_DIR (or of a summaries file: a corrupt line is one line, status 2), those left out, and
    the root the report names run dirs from; a bad ``--summaries`` path is refused first."""
    from gdro.common.ioerrors import check_creatable

    if args.summaries is not None:
        if args.sweep_dir.is_file():
            ap.error(f"--summaries: {args.sweep_dir} is a summaries file already; --summaries writes a sweep dir's")
        if args.summaries.is_dir():
            ap.error(f"--summaries {args.summaries}: is a directory; the summaries go into a file")
        check_creatable(args.summaries.absolute().parent)
    if not args.sweep_dir.is_file():
        return (*scan_runs(args.sweep_dir), args.sweep_dir)
    try:
        runs, root = read_summaries(args.sweep_dir)
    except UnusableRun as err:
        print(f"gdro-report: {err}", file=sys.stderr)
        sys.exit(2)
    return runs, [], root


def _summaries(args: argparse.Namespace, runs: list[SweepRun], root: Path) -> Path | None:
    """``--summaries FILE``: the runs' summaries written (a run.json gone since the scan is one line, status 2)."""
    if args.summaries is None:
        return None
    try:
        return write_summaries(runs, args.summaries, root)
    except UnusableRun as err:
        print(f"gdro-report: --summaries: {err}", file=sys.stderr)
        sys.exit(2)


_TEMP = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")  # gdro.common.ioerrors.atomic_write's: .<name>.<mkstemp's 8>.tmp


def _remove_stale_temps(out: Path, summaries: Path | None) -> None:
    """Remove the temporary files an earlier gdro-report left in ``out`` (and beside ``--summaries``) when it was
    stopped mid-write (a Ctrl-C between creating one and renaming it into place): hidden, named as
    :func:`gdro.common.ioerrors.atomic_write` names them, never read by anything."""
    for folder, prefix in ((out, "."), *(((summaries.parent, f".{summaries.name}."),) if summaries else ())):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.name.startswith(prefix) and _TEMP.fullmatch(path.name) and path.is_file():
                path.unlink(missing_ok=True)


def _main(argv: list[str] | None) -> int:
    from gdro.common.ioerrors import check_creatable

    ap = _parser()
    args = ap.parse_args(argv)
    try:
        tail_levels = parse_levels(args.tail_levels) if args.tail_levels else None
    except ValueError as e:
        ap.error(f"--tail-levels: {e}")
    out = args.out or (args.sweep_dir.parent if args.sweep_dir.is_file() else args.sweep_dir) / "report"
    if args.out is not None:  # before the scan lists what it leaves out: a bad --out is the only line
        if out.exists() and not out.is_dir():
            ap.error(f"--out {out}: is a file; the report goes into a directory")
        check_creatable(out)
    _remove_stale_temps(out, args.summaries)
    found, skipped, root = _scan(ap, args)
    runs = [r for r in found if r.complete or args.include_incomplete]
    notes, lines = exclusion_notes(found, skipped, root, include_incomplete=args.include_incomplete)
    for line in lines:
        print(f"gdro-report: {line}", file=sys.stderr)
    if not runs:
        what = "runs" if args.include_incomplete else "completed runs"
        where = "in" if args.sweep_dir.is_file() else "(dirs with run.json + metrics.jsonl) found under"
        print(f"gdro-report: no {what} {where} {args.sweep_dir}"
              + (f"; {len(lines)} left out (above)" if lines else ""), file=sys.stderr)
        return 2
    for method, rs in group_by_method(runs).items():
        seeds = [r.seed for r in rs]
        if len(set(map(str, seeds))) < len(seeds):
            print(f"gdro-report: warning: {display_name(method)} has repeated seeds {seeds}; "
                  "its runs are pooled as independent samples", file=sys.stderr)
    summaries = _summaries(args, runs, root)  # before the tail metrics: the rows as logged
    args.tail_levels, tail_levels = tail_levels_or_preset(args.tail_levels, tail_levels, runs, args.sweep_dir)
    tail_keys = add_tail_metrics(runs, tail_levels) if tail_levels else []
    if tail_levels and not tail_keys:
        print(f"gdro-report: --tail-levels {args.tail_levels}: no run logs eval/...@k/level_L for every one of "
              f"levels {tail_levels}; no tail metric", file=sys.stderr)
    rows = aggregate(runs, which=args.which)
    md, csv_path = write_table(rows, out, notes=notes)
    figs = None if args.no_figures else make_figures(runs, out)
    paired_md = None
    if any(r.method == BASELINE for r in runs) and len(group_by_method(runs)) > 1:
        heads = sorted({k for r in rows for k in r["metrics"] if is_headline(k)}, key=metric_sort_key)
        keys = heads + tail_keys
        mean_tail = next((k for k in tail_keys if METRIC_KEY.match(k)["kind"] == "mean"), None)
        prows, info = paired_comparison(runs, keys, tail_key=mean_tail, which=args.which)
        paired_md = out / "paired.md"
        text = paired_markdown(prows, keys, info)
        atomic_write_text(
            paired_md,
            f"Each method minus GRPO, paired by seed ({args.which} evaluation row). Secondary endpoints: the primary "
            f"(--primary {args.primary}) is in compute.md.\n\n" + text)
    compute = None
    if paired_md is not None:  # the held-out curve at equal compute: the tail mean@k, else the first mean@k
        curve_key = mean_tail or next((k for k in heads if METRIC_KEY.match(k)["kind"] == "mean"), None)
        compute = write_compute(runs, out, curve_key, args.axis, args.which, args.primary) if curve_key else None
        if figs is not None and compute is not None and fig_compute_curves(runs, curve_key, compute[2],
                                                                           out / "compute_curves.png"):
            figs.append(out / "compute_curves.png")
    mech_md, mech_text, paper_md = _write_mechanism(runs, out, figs)
    n_left = sum(line.startswith("left out") for line in lines)
    print(f"{len(runs)} runs, {len(rows)} methods ({args.which} eval row)"
          + (f"; {n_left} run dirs left out (listed above and in {md.name})" if n_left else "") + "\n")
    print(to_markdown(rows))
    if paired_md is not None:
        print(f"paired against GRPO:\n\n{text}")
    if compute is not None:
        print(f"at equal compute:\n\n{compute[1]}")
    if mech_md is not None:
        print(f"mechanism:\n\n{mech_text}")
    table1 = write_table1(runs, out)  # from gdro-eval results kept in the run dirs (<run>/eval/eval.json)
    if table1 is not None:
        print(table1.read_text(encoding="utf-8"))
    written = [md, csv_path, *([paired_md] if paired_md else []), *([compute[0]] if compute else []),
               *([mech_md] if mech_md else []), *([paper_md] if paper_md else []), *([table1] if table1 else []), *(figs or []),
               *([summaries] if summaries else [])]
    print("wrote " + ", ".join(p.name if i else str(p) for i, p in enumerate(written)))
    if args.wandb:
        print(f"logged the report to the sweep's W&B group: {log_to_wandb(root, out, runs, written)}")
    return 0



if __name__ == "__main__":  # `python -m gdro.cli.report ...`: gdro-report itself (its Ctrl-C handler, its exit)
    from gdro.cli.entry import report

    report()
