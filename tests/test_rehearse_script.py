"""``scripts/rehearse_paper.py`` run as the README shows it, on a clone without the vLLM venv, says in one line what
to run, at once and with status 2 (issue #28 B10): it used to run the hf phases for minutes, then end in a
``FileNotFoundError`` traceback for ``.venv-vllm/bin/python``. ``--engines hf`` (what CI runs) needs no vLLM venv.
The real script, in a child process (its process group is killed should it run on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "rehearse_paper.py"


def _rehearse(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"rehearse_paper.py {' '.join(args)} still ran after {timeout} s (it should have stopped at once)")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_without_the_vllm_venv_the_rehearsal_says_what_to_run_in_one_line(tmp_path):
    missing = tmp_path / ".venv-vllm" / "bin" / "python"  # (the default, .venv-vllm/bin/python, may exist here)
    out = _rehearse("--vllm-python", str(missing), "--out", str(tmp_path / "out"))
    assert out.returncode == 2, out.stderr[-3000:]
    assert _lines(out.stderr) == [(
        f"rehearsal: --engines hf,vllm runs vLLM in its own venv, and {missing} is not there: build it with "
        "`bash scripts/test_vllm.sh` (a few minutes, ~3.5 GB; it runs the vLLM tests too), pass --vllm-python "
        "PYTHON, or rehearse without vLLM: --engines hf")]
    assert not (tmp_path / "out").exists()  # nothing ran


def test_a_python_without_vllm_and_an_unknown_engine_are_one_line_too(tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this venv has vllm")
    out = _rehearse("--vllm-python", sys.executable, "--out", str(tmp_path / "out"))  # this venv: no vllm in it
    lines = _lines(out.stderr)
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("rehearsal: ") and lines[0].endswith(
        " has no vllm: finish its venv with `bash scripts/test_vllm.sh`, pass --vllm-python PYTHON, or rehearse "
        "without vLLM: --engines hf"), lines
    out = _rehearse("--engines", "hf,vlm", "--out", str(tmp_path / "out"))
    assert out.returncode == 2 and _lines(out.stderr) == [
        "rehearsal: --engines hf,vlm: unknown engine 'vlm' (engines: hf, vllm)"], out.stderr[-3000:]


def test_the_hf_rehearsal_needs_no_vllm_venv(tmp_path):
    """CI's form (``--engines hf``) with no vLLM venv gets past the set-up check: here to the real-data check."""
    out = _rehearse("--engines", "hf", "--vllm-python", str(tmp_path / "none"), "--realdata", str(tmp_path / "nodata"),
                    "--out", str(tmp_path / "out"))
    assert out.returncode == 0 and out.stderr == "", out.stderr[-3000:]
    assert out.stdout.startswith("rehearsal: skipped, the real data copies are not here")
