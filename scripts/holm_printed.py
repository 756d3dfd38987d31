"""Holm-corrected CIs for the verdicts of docs/results.md, derived from the printed paired numbers (issue #47).

The run dirs behind those tables were not kept, so nothing can be recomputed from runs. What can be done is this:
each printed paired cell "mean ± half-width" over n pairs is an unadjusted Student-t 95% interval, so it gives back
the standard error SE = half-width / t(0.975, n − 1), the t statistic mean / SE and its two-sided p-value. Per table
and column (the family: every row with a number in that column), Holm's step-down correction is applied to those
p-values, and each row gets the CI that agrees with Holm's decisions: with the column's m p-values sorted ascending
and r the number Holm rejects at α = 0.05, the i-th row's half-width is SE · t(1 − α / (2(m − i + 1)), n − 1) if
i ≤ r, else SE · t(1 − α / (2(m − r)), n − 1). A row's corrected CI excludes 0 exactly when Holm rejects it.

The inputs are experiments/results/printed/*.csv (table, row, column, mean, half_width, n, source), typed as printed
in docs/results.md; tests/test_holm_printed.py checks them against the docs and checks the docs' corrected numbers
against this script. The printed numbers are rounded (one decimal, mostly), so the recovered SE and p carry that
rounding: a row is flagged (a '*' in the markdown, "at the edge" in the listing) when moving its printed mean and
half-width by half a last digit could flip Holm's decision for it.

    python scripts/holm_printed.py                 # every CSV: per row, the printed and the Holm-corrected CI
    python scripts/holm_printed.py --markdown      # the same as the markdown table quoted in docs/results.md
    python scripts/holm_printed.py FILE.csv ...    # only these files
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from gdro.report.stats import holm_adjust

ALPHA = 0.05
PRINTED = Path(__file__).resolve().parent.parent / "experiments" / "results" / "printed"
FIELDS = ("table", "row", "column", "mean", "half_width", "n", "source")
ORDER = ("frontier-decisive", "curriculum-decisive", "allocation-31", "paper-regime-36", "allocation-31-rerun-36")
MINUS = "\u2212"


@dataclass(frozen=True)
class Cell:
    """One printed paired cell: ``mean`` and ``half_width`` as the strings the docs print (ASCII minus, no '+')."""

    table: str
    row: str
    column: str
    mean: str
    half_width: str
    n: int
    source: str


@dataclass(frozen=True)
class Corrected:
    cell: Cell
    se: float
    t: float
    p: float
    p_holm: float
    hw_holm: float
    rejected: bool
    robust: bool  # Holm's decision for this row is the same at either end of the printed rounding

    @property
    def decimals(self) -> int:
        """Decimals of the printed half-width: the corrected one is printed with as many."""
        text = self.cell.half_width
        return len(text.split(".")[1]) if "." in text else 0

    def printed(self) -> str:
        return f"{signed(self.cell.mean)} ± {self.cell.half_width}"

    def holm(self) -> str:
        return f"{signed(self.cell.mean)} ± {self.hw_holm:.{self.decimals}f}"

    @property
    def printed_excludes_zero(self) -> bool:
        return abs(float(self.cell.mean)) > float(self.cell.half_width)


def signed(mean: str) -> str:
    """The docs' style: a '+' before positive values, a real minus sign before negative ones, none before 0."""
    value = float(mean)
    if value > 0:
        return "+" + mean.lstrip("+")
    if value < 0:
        return MINUS + mean.lstrip("-")
    return mean.lstrip("+-")


def fmt_p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def load(path: Path) -> list[Cell]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise ValueError(f"{path}: columns must be {FIELDS}, got {reader.fieldnames}")
        return [Cell(r["table"], r["row"], r["column"], r["mean"], r["half_width"], int(r["n"]), r["source"])
                for r in reader]


def half_unit(text: str) -> float:
    """Half the last printed digit: how far the rounding may have moved a printed number."""
    return 0.5 * 10.0 ** -(len(text.split(".")[1]) if "." in text else 0)


def p_value(mean: float, half_width: float, n: int) -> float:
    """Two-sided p of a paired mean whose unadjusted Student-t 95% half-width over n pairs is ``half_width``."""
    se = half_width / stats.t.ppf(0.975, n - 1)
    return float(2.0 * stats.t.sf(abs(mean) / se, n - 1))


def holm_family(cells: list[Cell], alpha: float = ALPHA) -> list[Corrected]:
    """Holm over one family (one table's column): p from the printed CI, adjusted p, the Holm-consistent CI, and
    whether this row's decision survives the printed rounding (|mean| and half-width each moved by half a last digit,
    both ways, the other rows as printed)."""
    se = np.array([float(c.half_width) / stats.t.ppf(0.975, c.n - 1) for c in cells])
    t = np.array([float(c.mean) for c in cells]) / se
    p = np.array([p_value(float(c.mean), float(c.half_width), c.n) for c in cells])
    reject, p_holm = holm_adjust(p, alpha)
    robust = []
    for j, c in enumerate(cells):
        mean, hw = abs(float(c.mean)), float(c.half_width)
        dm, dh = half_unit(c.mean), half_unit(c.half_width)
        ends = (p_value(mean + dm, max(hw - dh, 1e-12), c.n), p_value(max(mean - dm, 0.0), hw + dh, c.n))
        robust.append(all(holm_adjust(np.where(np.arange(len(p)) == j, q, p), alpha)[0][j]
                          == reject[j] for q in ends))
    m, r = len(cells), int(reject.sum())
    order = np.argsort(p, kind="stable")
    hw = np.empty(m)
    for i, j in enumerate(order, start=1):  # i: rank of row j among the family's ascending p-values
        level = alpha / (2 * (m - i + 1)) if i <= r else alpha / (2 * (m - r))
        hw[j] = se[j] * stats.t.ppf(1 - level, cells[j].n - 1)
    return [Corrected(c, float(se[j]), float(t[j]), float(p[j]), float(p_holm[j]), float(hw[j]), bool(reject[j]),
                      robust[j]) for j, c in enumerate(cells)]


def correct(cells: list[Cell], alpha: float = ALPHA) -> list[Corrected]:
    """Every family of ``cells`` (a (table, column) pair) corrected, in the cells' order."""
    families: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        families.setdefault((c.table, c.column), []).append(c)
    done = {id(x.cell): x for fam in families.values() for x in holm_family(fam, alpha)}
    return [done[id(c)] for c in cells]


def all_corrected(paths: list[Path] | None = None) -> list[Corrected]:
    paths = paths if paths else sorted(PRINTED.glob("*.csv"), key=lambda q: (
        ORDER.index(q.stem) if q.stem in ORDER else len(ORDER), q.stem))
    return [x for path in paths for x in correct(load(path))]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def markdown(results: list[Corrected]) -> str:
    """One markdown table, a line per row and column: printed CI, Holm-corrected CI, p, p_Holm, excludes 0 (a '*':
    the printed rounding could flip Holm's decision for that row)."""
    lines = ["| table | column | row | n | m | printed | Holm-corrected | p | p_Holm | excludes 0: printed → Holm |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    sizes: dict[tuple[str, str], int] = {}
    for x in results:
        sizes[(x.cell.table, x.cell.column)] = sizes.get((x.cell.table, x.cell.column), 0) + 1
    for x in results:
        c = x.cell
        lines.append(f"| {c.table} | {c.column} | {c.row} | {c.n} | {sizes[(c.table, c.column)]} | {x.printed()} | "
                     f"{x.holm()} | {fmt_p(x.p)} | {fmt_p(x.p_holm)} | "
                     f"{_yes(x.printed_excludes_zero)} → {_yes(x.rejected)}{'' if x.robust else '*'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="CSV files (default: experiments/results/printed/*.csv)")
    parser.add_argument("--markdown", action="store_true", help="print the markdown table docs/results.md quotes")
    args = parser.parse_args(argv)
    results = all_corrected(args.files)
    if args.markdown:
        print(markdown(results), end="")
        return
    table = column = None
    for x in results:
        c = x.cell
        if (c.table, c.column) != (table, column):
            table, column = c.table, c.column
            m = sum(1 for y in results if (y.cell.table, y.cell.column) == (table, column))
            print(f"\n{table} | {column} (m = {m}, Holm at {ALPHA}; source: {c.source})")
        still = "still excludes 0" if x.rejected else ("no longer excludes 0" if x.printed_excludes_zero
                                                       else "includes 0")
        edge = "" if x.robust else " (at the edge: the printed rounding could flip it)"
        print(f"  {c.row}: {x.printed()} -> {x.holm()} (p {fmt_p(x.p)}, p_Holm {fmt_p(x.p_holm)}, n {c.n}); {still}{edge}")


if __name__ == "__main__":
    main()
