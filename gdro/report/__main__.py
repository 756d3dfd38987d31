"""``python -m gdro.report SWEEP_DIR``: the same as ``gdro-report`` (its Ctrl-C handler first)."""

from gdro.entry import report

report()
