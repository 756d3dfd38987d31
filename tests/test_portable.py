"""The portable CPU mode (GDRO_PORTABLE=1, gdro/common/portable.py): the golden run's bits on this machine, and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GDRO_PORTABLE"}
    return {**env, **extra}


def test_golden_run_is_identical_to_the_bit():
    """Every non-time value of the committed golden run, recomputed here under GDRO_PORTABLE=1 (the check every CI
    machine runs); library versions other than the golden's are reported as a skip that names them."""
    proc = subprocess.run([PY, str(REPO / "scripts" / "golden_portable.py"), "--check"], cwd=REPO, capture_output=True,
                          text=True, env=_env(), check=False)
    if proc.returncode == 3:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr[-4000:]
    golden = json.loads((REPO / "tests" / "fixtures" / "golden" / "portable_smoke.json").read_text())
    values = sum(len(r) for r in golden["rows"])
    assert f"{len(golden['rows'])} rows, {values} values identical" in proc.stdout
    assert golden["machine"]["portable"] is True and golden["machine"]["cpu_capability"] == "AVX2"
    assert any("train/grad_norm" in r for r in golden["rows"]) and any("eval/mean@4" in r for r in golden["rows"])


def test_switch_sets_the_dispatch_before_torch_and_off_leaves_it_alone():
    code = ("import gdro, os, torch, numpy; from gdro import portable; "
            "print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(), "
            "all(os.environ.get(k) == v for k, v in portable.ENV.items()))")
    on = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=_env(GDRO_PORTABLE="1"), check=True)
    assert on.stdout.split() == ["AVX2", "1", "True"]
    off = subprocess.run([PY, "-c", code], capture_output=True, text=True,
                         env={k: v for k, v in _env().items() if k not in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")},
                         check=True)
    assert off.stdout.split()[2] == "False"


@pytest.mark.parametrize(("code", "value", "message"), [
    ("import torch, gdro", "1", "GDRO_PORTABLE=1 must take effect before torch and numpy load: import gdro first, or set ATEN_CPU_CAPABILITY=avx2 "),
    ("import gdro", "maybe", "GDRO_PORTABLE='maybe': use 1 (portable CPU mode) or 0"),
])
def test_refusals_are_one_line(code, value, message):
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=_env(GDRO_PORTABLE=value),
                          check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gdro: {message}"), proc.stderr


def test_threads_above_one_is_a_config_error(tmp_path):
    proc = subprocess.run([str(Path(PY).with_name("gdro-train")), "experiment=smoke", "threads=2",
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True,
                          env=_env(GDRO_PORTABLE="1"), cwd=REPO, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        ("config error: GDRO_PORTABLE=1 runs one thread (a reduction split over threads sums in another order); drop "
        "threads= or set threads=1")]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
