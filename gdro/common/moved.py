"""Module paths that #50's floor folders retired, and the import hook that still answers to them.

#50 put each floor of the house in a folder of its own (docs/architecture.md, "Layers"). A user's code or notebook
written against the older layout may still say ``import gdro.trainer`` or ``from gdro.run.tracking import
read_metrics``; an old checkpoint's config may name ``gdro.filters.NoFilter`` as a ``_target_``. :data:`MOVED` is
the one table of those paths: gdro.run.migrations reads it for old checkpoints (its ``module`` entries), and
:func:`install` (called by ``import gdro``) adds a finder at the end of ``sys.meta_path`` that imports an old path as
the module at its new home, with a ``DeprecationWarning`` naming the new path. The finder comes last, so it answers
only for a name that nothing else provides; the module it returns is the one module, not a copy (``gdro.trainer.
Trainer is gdro.algorithm.trainer.Trainer``). ``gdro.cli`` is not in the table: the name is now the entry points'
folder, and ``python -m gdro.cli`` still runs gdro-train (gdro/cli/__main__.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED = {  # #50: old module path -> its home in the floor folders
    "gdro.interfaces": "gdro.common.interfaces",
    "gdro.interrupt": "gdro.common.interrupt",
    "gdro.validate": "gdro.common.validate",
    "gdro.portable": "gdro.common.portable",
    "gdro.resolvers": "gdro.common.resolvers",
    "gdro.run.ioerrors": "gdro.common.ioerrors",
    "gdro.rollout.base": "gdro.common.rollouts",
    "gdro.models.prompts": "gdro.data.prompts",
    "gdro.run.checkpoint_lora": "gdro.models.lora_state",
    "gdro.distributed": "gdro.parallel.distributed",
    "gdro.fsdp": "gdro.parallel.fsdp",
    "gdro.process_group": "gdro.parallel.process_group",
    "gdro.trainer": "gdro.algorithm.trainer",
    "gdro.filters": "gdro.algorithm.filters",
    "gdro.execution": "gdro.algorithm.execution",
    "gdro.evaluation.heldout": "gdro.algorithm.heldout",
    "gdro.run.samples": "gdro.algorithm.samples",
    "gdro.run.tracking": "gdro.algorithm.tracking",
    "gdro.run.settings": "gdro.algorithm.settings",
    "gdro.run.seeding": "gdro.algorithm.seeding",
    "gdro.build": "gdro.compose.build",
    "gdro.app": "gdro.cli.app",
    "gdro.entry": "gdro.cli.entry",
    "gdro.evaluation.evaluator": "gdro.cli.evaluate",
    "gdro.evaluation.rescore": "gdro.cli.rescore",
}
RETIRED_PACKAGES = {old.rpartition(".")[0] for old in MOVED} - {"gdro", "gdro.run", "gdro.rollout", "gdro.models"}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new home (imported once, under its own name)."""

    def __init__(self, new: str):
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.spec = module.__spec__  # the import system sets __spec__ to the alias's; exec_module puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Answers for the old paths of :data:`MOVED` (and their retired parent packages), after every other finder."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname in RETIRED_PACKAGES:  # e.g. gdro.evaluation: an empty package, so its old children resolve
            spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = []
            return spec
        new = MOVED.get(fullname)
        if new is None:
            return None
        warnings.warn(f"{fullname} moved to {new} (gdro #50); import it from there", DeprecationWarning,
                      stacklevel=2)
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Add :class:`MovedFinder` at the end of ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
