"""gdro/report/'s modules meet at public names only (issue #50): no file of gdro/, tests/, scripts/, experiments/ or
notebooks/ imports a private (``_``) name of a gdro.report module, reaches one as an attribute of a gdro.report
module or names one in a string (a monkeypatch target); and gdro.report's ``__all__`` lists
public names that exist."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = "gdro.report"
ROOTS = ("gdro", "tests", "scripts", "experiments")
PRIVATE_PATH = re.compile(r"\bgdro\.report(?:\.[a-z_0-9]+)*\._[a-z]\w*")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _report_module(node: ast.ImportFrom, path: Path) -> str | None:
    """The gdro.report module a ``from ... import`` reads from (relative imports inside gdro/report resolved)."""
    if node.level:
        here = ".".join(path.relative_to(REPO).with_suffix("").parts[:-node.level])
        module = f"{here}.{node.module}" if node.module else here
    else:
        module = node.module or ""
    return module if module == PACKAGE or module.startswith(PACKAGE + ".") else None


def private_uses(source: str, path: Path) -> list[str]:
    """Each private name of a gdro.report module that ``source`` (the file at ``path``) imports, reaches as an
    attribute of a name bound to a gdro.report module, or names in a string; ``"line: what"``."""
    tree = ast.parse(source)
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (module := _report_module(node, path)):
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: from {module} import {alias.name}")
                else:
                    modules.add(alias.asname or alias.name)  # maybe a module (from gdro.report import figures)
        elif isinstance(node, ast.ImportFrom) and node.module == "gdro" and not node.level:
            modules |= {a.asname or a.name for a in node.names if a.name == "report"}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE):
                    modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = ast.unparse(node.value)
            if base in modules or base == PACKAGE or base.startswith(PACKAGE + "."):
                found.append(f"{node.lineno}: {base}.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{node.lineno}: {m!r}" for m in PRIVATE_PATH.findall(node.value)]
    return found


def _sources() -> list[tuple[Path, str]]:
    files = [(p, p.read_text(encoding="utf-8")) for root in ROOTS for p in sorted((REPO / root).rglob("*.py"))]
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        lines = (line for cell in code for line in cell.splitlines())
        files.append((nb, "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))))
    return files


def test_no_private_name_of_gdro_report_crosses_a_file():
    found = [f"{path.relative_to(REPO)}:{use}" for path, source in _sources() for use in private_uses(source, path)]
    assert not found, "private names of gdro.report used across files (make them public):\n" + "\n".join(found)


U = "_"  # the samples below spell a private name {U}name, so that a grep of the repo for one does not find them


@pytest.mark.parametrize("source", [
    f"from gdro.report.runs import SweepRun, {U}groups",
    f"from gdro.report import figures\nfigures.{U}save(1, 2)",
    f"import gdro.report.summary as s\ns.{U}lines(p)",
    f"from gdro import report\nreport.{U}colors([])",
    f"monkeypatch.setattr('gdro.report.figures.{U}save', f)",
])
def test_the_scan_finds_each_kind_of_private_use(source: str):
    assert private_uses(source, REPO / "tests" / "example.py")


def test_the_scan_resolves_relative_imports_inside_the_package():
    assert private_uses(f"from .names import {U}rank", REPO / "gdro" / "report" / "table.py")
    assert not private_uses("from .names import method_rank", REPO / "gdro" / "report" / "table.py")


@pytest.mark.parametrize("module", sorted(
    f"{PACKAGE}.{p.stem}" if p.stem != "__init__" else PACKAGE for p in (REPO / "gdro" / "report").glob("*.py")
    if p.stem != "__main__"))
def test_all_lists_public_names_that_exist(module: str):
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", [])
    assert not [n for n in names if n.startswith("_")], f"{module}.__all__ lists private names"
    assert not [n for n in names if not hasattr(mod, n)], f"{module}.__all__ lists names it does not define"
