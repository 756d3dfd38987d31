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

from gdro.report.exclusions import exclusion_notes
from gdro.report.figures import make_figures
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
from gdro.report.plotting import method_colors, over_seeds
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
from gdro.report.summary import load_summaries, summarize, write_summaries
from gdro.report.table import (
    aggregate,
    format_cell,
    format_gain,
    to_markdown,
    write_table,
)

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
