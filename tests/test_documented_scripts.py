"""The scripts the README and docs name, each run in a short form, so that a change that breaks one fails CI
(issue #52 item 4; more scripts join as they get a short form)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_bench_vs_trl_runs_in_short_form():
    """The README's "Performance" comparison with TRL: one round of a tiny step against TRL's own GRPOTrainer. It
    stopped at an interpolation error once (its reward node read alone could not resolve ${model.max_new_tokens})."""
    pytest.importorskip("trl")
    proc = subprocess.run([sys.executable, "scripts/bench_vs_trl.py", "--sizes", "tiny", "--repeats", "1",
                           "--prompts", "4", "--per-prompt", "2", "--new-tokens", "4", "--threads", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("ours/trl tiny=") and "tiny=n/a" not in last, proc.stdout[-2000:]
