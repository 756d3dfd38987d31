"""Issue #39 (1): a Ctrl-C is one line and status 130 at every moment of every command.

- ``gdro-eval``, ``gdro-report`` and ``gdro-rescore`` printed a 12-110-line KeyboardInterrupt traceback and died by
  SIGINT (12/12). They now start as ``gdro-train`` does (gdro.cli.entry: the handler before the heavy imports).
- ``gdro-train`` in the last ~100 ms of a run: right after the last row it died by SIGINT with no output (in the
  interpreter's teardown, where Python gives SIGINT its default action back); during the final save a Ctrl-C was
  ignored (rc 0, no output); just after it, the line said "before the run began". Each moment is reached here by
  sending the signal from inside the process at that point of the code (the same code, patched to signal itself).

All slow: each case starts real command processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_report import make_run
from tests.test_resume import REPO, _env

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent  # the console scripts, as a user runs them


def _lines(text: str) -> list[str]:
    """stderr's lines, without the progress bars transformers draws while it loads weights."""
    return [x for x in text.splitlines() if x.strip() and "it/s]" not in x and not x.startswith("Loading weights")]


def _ctrl_c_at(argv: list[str], at: float) -> tuple[int, list[str], str]:
    """SIGINT to the process group (a terminal's Ctrl-C) ``at`` s after the start."""
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    time.sleep(at)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, _lines(err), err


def _rescore_input(d: Path) -> list[str]:
    """3,000 completions that math-verify itself must read (no fast path): ~8 s of work on 2 cores."""
    d.mkdir()
    with open(d / "bench.jsonl", "w") as bench, open(d / "gens.jsonl", "w") as gens:
        for i in range(3000):
            bench.write(json.dumps({"problem": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)}) + "\n")
            gens.write(json.dumps({"index": i, "completion": f"So \\boxed{{\\frac{{{2 * (2 * i + 1)}}}{{2}}}}."}) + "\n")
    return [str(d / "gens.jsonl"), "--benchmark", f"math500={d / 'bench.jsonl'}", "--out", str(d / "out.jsonl")]


def _sweep(d: Path) -> Path:
    for m, (sampler, allocator) in enumerate([("uniform", "fixed"), ("prompt-gdro", "fixed"),
                                              ("uniform", "rollout-gdro")]):
        for seed in range(3):
            make_run(d, f"{sampler}-{allocator}-{seed}", sampler, allocator, seed, 40.0 + m + seed, gdro=True,
                     steps=400)
    return d


@pytest.mark.parametrize("prog", ["gdro-eval", "gdro-report", "gdro-rescore"])
def test_a_ctrl_c_at_any_moment_of_eval_report_and_rescore_is_one_line_and_130(tmp_path, prog):
    moments = (0.3, 1.0, 2.5)
    for i, at in enumerate(moments):
        out = tmp_path / f"out{i}"
        args = {"gdro-eval": ["eval.k=8", f"out={out}", f"hydra.run.dir={out}"],
                "gdro-report": [str(_sweep(tmp_path / f"sweep{i}")), "--out", str(out)],
                "gdro-rescore": _rescore_input(out)}[prog]
        code, lines, err = _ctrl_c_at([str(BIN / prog), *args], at)
        assert code == 128 + signal.SIGINT and len(lines) == 1, (at, code, err[-3000:])
        assert lines[0].startswith(f"{prog}: stopped by Ctrl-C before it finished"), (at, lines)


# Injected into a gdro-train process started as the console script starts it (gdro.cli.entry.train): SIGINT to itself at
# one point of the end of the run.
SIGNAL_AT = """
import atexit, os, signal, sys
point = sys.argv.pop(1)
import gdro.cli.train as cli
from gdro.algorithm import trainer as tr
from gdro.cli.entry import train
from gdro.run import lifecycle

def kill():
    os.kill(os.getpid(), signal.SIGINT)

def wrap(owner, name, before=False):
    orig = getattr(owner, name)
    def wrapped(*a, **k):
        if before:
            kill()
        out = orig(*a, **k)
        if not before and (name != "after" or a[1] == a[0].settings.steps):
            kill()
        return out
    setattr(owner, name, wrapped)

if point == "after_the_last_row":
    wrap(lifecycle.Lifecycle, "after")
elif point == "during_the_final_save":
    wrap(tr.Trainer, "save", before=True)
elif point == "after_the_final_save":
    wrap(lifecycle.Lifecycle, "save_final")
elif point == "after_fit":
    wrap(lifecycle.Lifecycle, "fit")
elif point == "after_the_job":
    wrap(cli, "_job")
elif point == "in_the_teardown":
    atexit.register(kill)
sys.argv = ["gdro-train", *sys.argv[1:]]
train()
"""
AT_THE_END = "gdro-train: SIGINT received at the end of the run: it completed (final step 3"


@pytest.mark.parametrize(("point", "says"), [
    ("after_the_last_row", AT_THE_END),
    ("during_the_final_save", AT_THE_END),
    ("after_the_final_save", AT_THE_END),
    ("after_fit", AT_THE_END),
    ("after_the_job", "gdro-train: stopped by Ctrl-C after the run had completed (nothing was lost)"),
    ("in_the_teardown", "gdro-train: stopped by Ctrl-C after the run had ended (nothing was lost)"),
])
def test_a_ctrl_c_in_the_last_moments_of_a_run_is_one_true_line_and_130(tmp_path, point, says):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", SIGNAL_AT, point, "experiment=smoke", "progress=false",
                           "save_final=true", f"hydra.run.dir={run_dir}"], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=300, check=False)
    lines = _lines(proc.stderr)
    assert proc.returncode == 128 + signal.SIGINT and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert lines[0].startswith(says), lines
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed" and record["last_step"] == 3
    assert (run_dir / "checkpoint" / "config.json").is_file()  # the final policy was saved
