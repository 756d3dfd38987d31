"""notebooks/curriculum.ipynb: committed without outputs, and runs top to bottom on a tiny real sweep of the
curriculum preset (experiment=toy-curriculum: pass@1 bins, levels 1-8, sticky strings); run headless as the README
says (``GDRO_SWEEP_DIR=<relative dir> jupyter execute``), it agrees with gdro-report, and a sweep dir that is missing
or holds no run fails it by name."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gdro.cli.report import main as report_main
from gdro.compose.build import build_training
from tests.conftest import FAST, REPO, compose_cfg
from tests.test_report_presets import make_sweep

nbformat = pytest.importorskip("nbformat")

NOTEBOOK = REPO / "notebooks" / "curriculum.ipynb"

# name -> (Hydra overrides, group choices as gdro-train would record them)
CURRICULUM = {"experiment": "toy-curriculum"}
RUNS = {
    "grpo": ([], CURRICULUM | {"sampler": "uniform", "allocator": "fixed"}),
    "pgdro": (["sampler=prompt-gdro", "sampler.signal=frontier"],
              CURRICULUM | {"sampler": "prompt-gdro", "allocator": "fixed"}),
    "rgdro": (["allocator=rollout-gdro"], CURRICULUM | {"sampler": "uniform", "allocator": "rollout-gdro"}),
}
# evaluated before training and after every step, as a real sweep evaluates before and after
SHORT = ["seed=0", "steps=3", "eval.at_start=true", "eval.every=1", "data.train_size=16", "data.test_per_level=1"]


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    dirty = [i for i, c in enumerate(code) if c.outputs or c.execution_count is not None]
    assert not dirty, f"code cells {dirty} carry outputs/execution counts: clear them before committing"
    assert "SWEEP_DIR" in code[0].source and "GDRO_SWEEP_DIR" in code[0].source


def _make_sweep(root: Path) -> Path:
    for name, (overrides, choices) in RUNS.items():
        cfg = compose_cfg(["experiment=toy-curriculum", *FAST, *SHORT, *overrides])
        training = build_training(cfg, root / name, choices=choices)
        try:
            training.fit()
        finally:
            training.logger.close()
    return root


@pytest.mark.slow
def test_notebook_executes_on_a_tiny_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    sweep = _make_sweep(tmp_path / "sweep")

    monkeypatch.setenv("GDRO_SWEEP_DIR", str(sweep))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "3 runs under" in text
    assert "hard tail: GDRO_TAIL_LEVELS 7-8: not given, the hard tail of experiment=toy-curriculum's" in text, text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # eval curves, share/weights/rollouts heatmaps, WSE and hardest levels at least (lead-lag needs
    # >= 2 pass-rate bins present, which 3 tiny steps may not give)
    assert len(images) >= 6, text
    tables = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert tables and all(n in tables[0] for n in ("GRPO", "Prompt-GDRO", "Rollout-GDRO"))
    # the mechanism table and curves (groups with gradient, per bin, WSE against uniform), every row
    mech = next(t for t in tables if "groups with gradient" in t)
    assert all(f"| {n} | 1 |" in mech for n in ("GRPO", "Prompt-GDRO", "Rollout-GDRO")), mech
    assert len(images) >= 10, text
    assert "skipped informative" not in text and "skipped wse_ratio" not in text
    # the allocation section: every row against GRPO at equal generated tokens, and its curves
    comp = next(t for t in tables if "Axis: **generated tokens" in t)
    assert "levels_7-8" in comp and all(f"| {n} |" in comp for n in ("GRPO", "Prompt-GDRO", "Rollout-GDRO")), comp
    assert "skipped: the compute comparison" not in text
    assert len(images) >= 11, text
    # the paper's mechanism figures (gdro/report/paper_figures.py): paper_mechanism.md, every row in its WSE table
    # (Eq. 33 with the offline sigma), and at least the WSE ratio and the macro dynamics (Figs. 4, 8); Figs. 7 / 9
    # need an allocation that differs between bins and the lead-lag two pass-rate bins, which 3 steps may not give
    paper = next(t for t in tables if "## WSE (Eq. 33, the paper's)" in t)  # not mechanism.md's note naming it
    assert all(f"| {n} | 1 |" in paper for n in ("GRPO", "Prompt-GDRO", "Rollout-GDRO")), paper
    assert "| 0 |" in paper and "High bins: pass-rate lower edge ≥ 0.5" in paper, paper
    assert "skipped wse_ratio.png" not in text and "skipped macro_dynamics.png" not in text, text
    assert len(images) >= 13, text


JUPYTER = Path(sys.executable).parent / "jupyter"


def _jupyter_execute(cwd: Path, sweep_dir: str, output: Path | None = None) -> subprocess.CompletedProcess:
    """The README's headless command, run by a shell in ``cwd`` (which sets ``PWD`` as a shell does):
    ``GDRO_SWEEP_DIR=<sweep_dir> jupyter execute notebooks/curriculum.ipynb [--output=...]``."""
    if not JUPYTER.is_file():
        pytest.skip(f"{JUPYTER} is not installed (nbclient gives `jupyter execute`)")
    cmd = (f"cd {shlex.quote(str(cwd))} && GDRO_SWEEP_DIR={shlex.quote(sweep_dir)} {shlex.quote(str(JUPYTER))} "
           f"execute {shlex.quote(str(NOTEBOOK))}" + (f" --output={shlex.quote(str(output))}" if output else ""))
    env = {k: v for k, v in os.environ.items() if k not in ("GDRO_SWEEP_DIR", "GDRO_CWD", "GDRO_TAIL_LEVELS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(["bash", "-c", cmd], check=False, env=env, capture_output=True, text=True, timeout=300)


def _threshold(text: str) -> str:
    (found,) = re.findall(r"threshold = GRPO's final ([0-9.]+)", text)
    return found


@pytest.mark.slow
def test_headless_notebook_on_a_relative_sweep_dir_agrees_with_gdro_report(tmp_path: Path, capsys):
    """A paper-regime sweep (levels 1-12 logged), named relative to the directory the command runs in: the notebook
    reads it (not notebooks/<dir>), takes the preset's hard tail 7-12 as gdro-report does without --tail-levels, and
    shows gdro-report's table, and its compute.md rows and threshold, to the character."""
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    sweep = make_sweep(tmp_path / "outputs" / "paper")
    assert report_main([str(sweep), "--out", str(tmp_path / "report")]) == 0
    assert "--tail-levels 7-12: not given" in capsys.readouterr().err
    proc = _jupyter_execute(tmp_path, "outputs/paper", tmp_path / "executed")
    assert proc.returncode == 0, proc.stderr[-3000:]

    nb = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"6 runs under {sweep}" in text, text
    assert ("hard tail: GDRO_TAIL_LEVELS 7-12: not given, the hard tail of experiment=toy-paper-regime's protocol"
            in text), text
    tables = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert (tmp_path / "report" / "table.md").read_text(encoding="utf-8") == tables[0]
    compute = (tmp_path / "report" / "compute.md").read_text(encoding="utf-8")
    shown = next(t for t in tables if "Axis: **generated tokens" in t)
    assert compute.endswith("\n\n" + shown), (compute, shown)  # compute.md: one header paragraph, then the same
    assert "levels_7-12" in shown and _threshold(shown) == _threshold(compute)
    assert "skipped: the compute comparison" not in text and any("image/png" in o.get("data", {}) for o in outputs)


@pytest.mark.slow
def test_headless_notebook_fails_on_a_missing_or_empty_sweep_dir(tmp_path: Path):
    """Not "0 runs" and every figure skipped with status 0: a non-zero status and the dir named."""
    proc = _jupyter_execute(tmp_path, "outputs/nope")
    assert proc.returncode != 0
    assert "SweepDirError" in proc.stderr and f"no such directory: {tmp_path / 'outputs' / 'nope'}" in proc.stderr
    (tmp_path / "outputs" / "empty").mkdir(parents=True)
    proc = _jupyter_execute(tmp_path, "outputs/empty")
    assert proc.returncode != 0
    assert f"no completed runs (dirs with run.json + metrics.jsonl) under {tmp_path / 'outputs' / 'empty'}" in proc.stderr
