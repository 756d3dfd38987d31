"""``python -m gdro.cli ...`` runs gdro-train exactly as ``python -m gdro.cli.train ...`` does (torchrun too)."""

import runpy

runpy.run_module("gdro.cli.train", run_name="__main__", alter_sys=True)
