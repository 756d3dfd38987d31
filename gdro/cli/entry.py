"""Console entry points that are safe to interrupt from their first instruction to their last: each installs the
one-line Ctrl-C handler (gdro.common.interrupt) before it imports its command's module (Hydra, torch, transformers), and
ends without the interpreter's teardown, in which a Ctrl-C would kill the process with no word
(:func:`gdro.common.interrupt.exit_now`). A Ctrl-C is one line and status 130 at every moment, or, once the command has
said its own line, its own status.

This module imports nothing at its top but importlib and gdro.common.interrupt (standard library only).
"""

from __future__ import annotations

import importlib
from typing import NoReturn

from gdro.common.interrupt import BEFORE_THE_RUN, exit_now, interrupt_at_once

WHILE_RUNNING = "before it finished (what it had written stays; run the same command again)"
AFTER_FINISHING = "after it had finished (its output is complete)"


def _command(prog: str, target: str, during: str, after: str) -> NoReturn:
    """Install the handler, then import ``target`` (``module:function``), run it and end through ``exit_now``."""
    interrupt_at_once(prog, during)
    module, _, name = target.partition(":")
    main = getattr(importlib.import_module(module), name)
    try:
        code = main()
    except SystemExit as stop:
        code = stop.code
    exit_now(prog, code, after)


def train() -> NoReturn:
    """Console script ``gdro-train``: the handler first, then gdro.cli.train (Hydra, and later torch) is imported."""
    _command("gdro-train", "gdro.cli.train:train", BEFORE_THE_RUN, "after the run had ended (nothing was lost)")


def evaluate() -> NoReturn:
    """Console script ``gdro-eval``."""
    _command("gdro-eval", "gdro.cli.evaluate:main", WHILE_RUNNING, AFTER_FINISHING)


def report() -> NoReturn:
    """Console script ``gdro-report``."""
    _command("gdro-report", "gdro.cli.report:main", WHILE_RUNNING, AFTER_FINISHING)


def rescore() -> NoReturn:
    """Console script ``gdro-rescore``."""
    _command("gdro-rescore", "gdro.cli.rescore:main", WHILE_RUNNING, AFTER_FINISHING)
