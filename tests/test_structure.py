"""The codebase's shape, measured from the files (issue 21): no function in gdro/ over 80 lines, Trainer._fit and
ppo_update on one screen, and no import from a higher floor (docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_function_lengths_and_import_floors():
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "check_structure.py")], capture_output=True,
                         text=True, check=False, cwd=REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "imports from a higher floor or a folder beside: 0" in res.stdout
