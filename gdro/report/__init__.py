"""Sweep report: a results table (mean ± 95% CI over seeds) and diagnostic figures for a set of runs.

    gdro-report SWEEP_DIR [--out DIR] [--which final|best] [--include-incomplete] [--tail-levels 7-12]
                [--axis tokens|steps] [--primary area|equal_tokens|equal_steps] [--wandb] [--summaries FILE]
    gdro-report SUMMARIES.jsonl[.gz] [options]     # the same report from run summaries (no run dirs)

Every directory under ``SWEEP_DIR`` holding both ``run.json`` and ``metrics.jsonl`` is a run. A run's method is
``"<sampler>+<allocator>"`` from the Hydra group choices in ``run.json`` (or, when those are absent, from the
``_target_`` class names of the resolved config); runs of one method are pooled over seeds.

Only *completed* runs are pooled: ``run.json`` ``"status"`` is ``"completed"``, its ``"last_step"`` is the
last step in ``metrics.jsonl``, that step is ``config["steps"]`` and every metrics line is a valid JSON
object. A run written before the trainer recorded a status counts as completed when its last logged step is
``config["steps"]``. Every other run dir is named with the reason on stderr and beneath the table in
``table.md``; nothing aborts the report. ``--include-incomplete`` pools the incomplete runs that load (their
malformed lines dropped), marked; dirs that cannot give a result (a corrupt ``run.json``, an empty
``metrics.jsonl``, or one holding two runs because a run dir was re-used: the step goes backwards) are always
left out.

Run summaries (gdro/report/summary.py): ``--summaries FILE`` also writes one JSON line per run pooled (completed
runs, and the incomplete ones with ``--include-incomplete``) holding all the report reads from it (its method, seed,
status, config, choices, overrides, commit, versions, machine and the metrics it reads), small enough to commit
(``FILE.gz``: gzip'd). ``gdro-report FILE`` then writes the same tables and figures from the file alone (into
``<FILE's dir>/report`` by default), without its list of run dirs left out; a corrupt line or a summary of another
schema is one line naming the file and the line (status 2).

Table: for each method, the final (or best) evaluation row's ``eval/...mean@k`` / ``eval/...pass@k`` metrics,
overall and per level (``eval/mean@k/level_L``) or per benchmark (``eval/<bench>/pass@k``), as mean ± the
Student-t 95% half-width over seeds, plus the relative pass@k gain of the method's mean over GRPO's mean
(``100 * (m - m_GRPO) / m_GRPO``). Written as ``table.md`` and ``table.csv``.

Paired table (``paired.md``, when GRPO and another method are present): per method, the difference to GRPO
of each headline metric paired by seed (mean ± CI over the seeds both have and p_H, Holm-adjusted over the rows of
each column; see *Statistics* below), the rollouts each run spent, and
the batch's mean difficulty bin in the first and last quarter of the steps after the unseen phase. With
``--tail-levels 7-12`` the table gains ``eval/...@k/levels_7-12`` (the mean of those levels, the *hard tail*), and
the paired table the recovery of the oracle control's tail gain (a method's mean Δ ÷ the oracle's) and the first
evaluation step at which each run's tail mean@k reaches GRPO's final one (median over the runs that reach it).

Mechanism table (``mechanism.md``, when runs log ``difficulty/informative``): per method, the share of groups that
carry gradient (overall, first → last quarter, per bin), the weighted standard error against a uniform allocation
of the same batch, and Prompt-GDRO's lead–lag Δμ (gdro/report/mechanism.py).

Compute table (``compute.md``, when GRPO and another method are present): each method against GRPO at equal
generated tokens as well as at equal steps, the held-out curve (the tail mean@k with ``--tail-levels``, else the
first overall mean@k) interpolated between evaluations: tokens (or steps, ``--axis steps``) to GRPO's final value,
the area under the curve, and the value at equal tokens and at equal steps, paired by seed; its header names the
axis (gdro/report/compute.py). ``--primary`` names the pre-registered primary endpoint among its last three columns
(default ``area``), marked "primary" (the others "secondary"); beneath the table, on each run's own value of it, the
IQM per method [95% stratified-bootstrap CI] and P(method > GRPO) [95% CI] (rliable).

Statistics (gdro/report/stats.py): mean ± the Student-t 95% half-width over seeds (scipy); in paired.md and
compute.md each Δ column against GRPO is a family (every non-GRPO method with ≥ 2 pairs), its two-sided paired
t-tests Holm-adjusted (statsmodels), each shown with a Holm-consistent CI, which excludes 0 exactly when Holm rejects
at 5%, and its adjusted p (``+2.8 ± 1.7 (p_H 0.03)``); rliable's bootstraps use a fixed seed and 2000 replications,
so the report is deterministic.

Figures (each skipped when no run logs its keys): ``eval_curves.png``, ``bin_share_heatmap.png``,
``weights_heatmap.png``, ``rollouts_heatmap.png``, ``wse.png``, ``mean_bin.png``, ``informative.png``,
``informative_heatmap.png``, ``wse_ratio_batch.png`` (the batch's own per-step σ, not Eq. 33).

The paper's mechanism figures (``paper_mechanism.md``, gdro/report/paper_figures.py; §7.4 of the paper, with its
definitions): ``wse_ratio.png`` (Eq. 33 with an offline σ̂_b, Fig. 6 right), ``budget_vs_data_<method>.png`` (Fig. 7),
``budget_snapshots.png`` (Fig. 9), ``macro_dynamics.png`` (Figs. 4 and 8), ``lead_lag.png`` (Eq. 32, Fig. 6 left);
a figure whose keys no run logs is named on stderr and in the markdown.

The traveling wave (``wave.md``, gdro/report/wave.py; issue #48): ``wave_frontier.png`` (per method, mean over seeds:
the batch's mean bin index, data- and budget-weighted, and the frontier bin, the pass bin with the most mixed groups),
``wave_heatmap.png`` (bins × steps of budget share − data share, diverging at 0, the frontier drawn over it; GRPO's
is 0), and in ``wave.md`` per method whether its budget follows the frontier (hit rate against a budget that stays
put); each skipped with a line on stderr when no run logs its keys.

The package: ``names`` (methods' and metrics' names and order), ``runs`` (reading run dirs, completeness, a run's
evaluation row, the runs per method), ``exclusions`` (the runs left out), ``table`` (the results table), ``paired``
(the paired table and the hard tail), ``compute``, ``stats`` (intervals, tests, Holm, rliable), ``figures``,
``paper_figures`` / ``paper_plots``, ``wave`` and ``plotting`` (the figure kit they share); this module is the
``gdro-report`` command and re-exports their names. No module imports another's private (``_``) name
(tests/test_report_api.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from gdro.report.compute import AXES, PRIMARY, write_compute
from gdro.report.exclusions import exclusion_notes
from gdro.report.figures import fig_compute_curves, make_figures
from gdro.report.mechanism import mechanism_markdown, mechanism_rows
from gdro.report.names import (
    BASELINE,
    DISPLAY_NAMES,
    METHOD_ORDER,
    METRIC_KEY,
    bin_sort_key,
    display_name,
    is_headline,
    method_rank,
    metric_label,
    metric_sort_key,
)
from gdro.report.paired import (
    ORACLE,
    add_tail_metrics,
    mean_bin_drift,
    paired_comparison,
    paired_markdown,
    parse_levels,
    rollouts_spent,
    steps_to,
    tail_name,
)
from gdro.report.paper_plots import write_paper_figures
from gdro.report.plotting import method_colors, over_seeds
from gdro.report.presets import tail_levels_or_preset
from gdro.report.runs import (
    STATUSES,
    Skipped,
    SweepRun,
    UnusableRun,
    find_runs,
    group_by_method,
    load_run,
    ordered_groups,
    read_metrics,
    scan_runs,
    select_row,
)
from gdro.report.stats import mean_ci, t975
from gdro.report.summary import load_summaries, read_summaries, summarize, write_summaries
from gdro.report.table import (
    aggregate,
    format_cell,
    format_gain,
    to_markdown,
    write_table,
)
from gdro.report.table1 import log_to_wandb, write_table1
from gdro.report.wave import write_wave
from gdro.run.ioerrors import atomic_write_text

__all__ = [
    "BASELINE",
    "DISPLAY_NAMES",
    "METHOD_ORDER",
    "METRIC_KEY",
    "ORACLE",
    "STATUSES",
    "Skipped",
    "SweepRun",
    "UnusableRun",
    "add_tail_metrics",
    "aggregate",
    "bin_sort_key",
    "display_name",
    "exclusion_notes",
    "find_runs",
    "format_cell",
    "format_gain",
    "group_by_method",
    "is_headline",
    "load_run",
    "load_summaries",
    "main",
    "make_figures",
    "mean_bin_drift",
    "mean_ci",
    "method_colors",
    "method_rank",
    "metric_label",
    "metric_sort_key",
    "ordered_groups",
    "over_seeds",
    "paired_comparison",
    "paired_markdown",
    "parse_levels",
    "read_metrics",
    "rollouts_spent",
    "scan_runs",
    "select_row",
    "steps_to",
    "summarize",
    "t975",
    "tail_name",
    "to_markdown",
    "write_summaries",
    "write_table",
]


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (its own print the usage block first)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    """Console script ``gdro-report``: a usage error is one line (status 2), an unwritable ``--out`` or a full disk
    one line naming the path (status 74; each file is written whole or not at all: gdro.run.ioerrors.atomic_write);
    ``HYDRA_FULL_ERROR=1`` shows the traceback, as in gdro-train."""
    from gdro.run.ioerrors import is_environment_error, one_line

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
    ap.add_argument("--wandb", action="store_true",
                    help="also log the report (tables, Table 1, figures) to the sweep's W&B group (gdro/report/table1.py)")
    return ap


def _write_mechanism(runs: list[SweepRun], out: Path, figs: list[Path]) -> tuple[Path | None, str, Path | None]:
    """mechanism.md (and its text) and the paper's mechanism figures (paper_mechanism.md; their PNGs appended to
    ``figs``, the ones skipped named on stderr)."""
    mech_rows, mech_bins = mechanism_rows(runs)
    mech_md, mech_text = None, ""
    if mech_rows:
        mech_md = out / "mechanism.md"
        mech_text = mechanism_markdown(mech_rows, mech_bins)
        atomic_write_text(mech_md, "Mechanism columns over each run's training steps after the unseen phase; mean "
                                   "± 95% CI over runs (gdro/report/mechanism.py).\n\n" + mech_text)
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
    from gdro.run.ioerrors import check_creatable

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


def _main(argv: list[str] | None) -> int:
    from gdro.run.ioerrors import check_creatable

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
    figs = make_figures(runs, out)
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
        if compute is not None and fig_compute_curves(runs, curve_key, compute[2], out / "compute_curves.png"):
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
               *([mech_md] if mech_md else []), *([paper_md] if paper_md else []), *([table1] if table1 else []), *figs,
               *([summaries] if summaries else [])]
    print("wrote " + ", ".join(p.name if i else str(p) for i, p in enumerate(written)))
    if args.wandb:
        print(f"logged the report to the sweep's W&B group: {log_to_wandb(root, out, runs, written)}")
    return 0

