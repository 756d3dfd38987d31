"""notebooks/curriculum.ipynb: committed without outputs, and runs top to bottom on a tiny real sweep of the
curriculum preset (experiment=toy-curriculum: pass@1 bins, levels 1-8, sticky strings)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gdro.build import build_training
from tests.conftest import FAST, REPO, compose_cfg

nbformat = pytest.importorskip("nbformat")

NOTEBOOK = REPO / "notebooks" / "curriculum.ipynb"

# name -> (Hydra overrides, group choices as gdro-train would record them)
RUNS = {
    "grpo": ([], {"sampler": "uniform", "allocator": "fixed"}),
    "pgdro": (["sampler=prompt-gdro", "sampler.signal=frontier"], {"sampler": "prompt-gdro", "allocator": "fixed"}),
    "rgdro": (["allocator=rollout-gdro"], {"sampler": "uniform", "allocator": "rollout-gdro"}),
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
    paper = next(t for t in tables if "Weighted-SE proxy (Eq. 33" in t)
    assert all(f"| {n} | 1 |" in paper for n in ("GRPO", "Prompt-GDRO", "Rollout-GDRO")), paper
    assert "| 0 |" in paper and "High bins: pass-rate lower edge ≥ 0.5" in paper, paper
    assert "skipped wse_ratio.png" not in text and "skipped macro_dynamics.png" not in text, text
    assert len(images) >= 13, text
