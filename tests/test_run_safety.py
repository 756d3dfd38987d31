"""Never lose a run (issue #20), with real ``gdro-train`` processes: two processes on one run dir, a second start on a
live run, a kill at each point of the final save, a second Ctrl-C, a full disk and a read-only dir.

All slow (each case starts 2-3 training processes). The bar: a refused start is one line on stderr and touches
nothing; the run that holds the dir gives exactly the non-timing metrics of a run alone; a rerun after any kill
ends with a loadable final checkpoint equal to an uninterrupted run's; run.json says what happened.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gdro.algorithm.tracking import read_metrics
from gdro.cli.app import EXIT_IN_USE
from gdro.common.ioerrors import EXIT_IO_ERROR
from gdro.run.checkpoint import FINAL_MARKER, list_checkpoints
from tests.test_resume import CLI, REPO, _comparable, _env
from tests.test_rundir import _holder

pytestmark = pytest.mark.slow

SHORT = [*CLI, "steps=2", "eval.every=0", "save_final=true"]  # the final-save cases: 2 steps, no evaluation


def _cmd(run_dir: Path, args: list[str] = CLI, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "gdro.cli.train", *args, f"hydra.run.dir={run_dir}", *extra]


def _run(run_dir: Path, args: list[str] = CLI, extra: tuple[str, ...] = (), code: int = 0, env=None):
    out = subprocess.run(_cmd(run_dir, args, extra), cwd=REPO, env=env or _env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == code, out.stderr[-3000:]
    return out


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _status(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def solo(tmp_path_factory) -> list[dict]:
    """The reference: the 6-step run alone."""
    run_dir = tmp_path_factory.mktemp("solo") / "run"
    _run(run_dir)
    return read_metrics(run_dir)


# ----------------------------------------------------------------------------------- two processes, one run dir
@pytest.mark.parametrize("repeat", range(6))
def test_two_processes_started_at_once_one_refuses_the_other_runs_as_if_alone(tmp_path, solo, repeat):
    run_dir = tmp_path / "run"
    procs = [subprocess.Popen(_cmd(run_dir), cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, EXIT_IN_USE], errs
    winner, loser = (0, 1) if procs[0].returncode == 0 else (1, 0)
    lines = _lines(errs[loser])
    assert len(lines) == 1, errs[loser]
    assert lines[0].startswith(f"run dir in use: {run_dir} is held by pid {procs[winner].pid} on host "), lines[0]
    assert _lines(errs[winner]) == []
    assert _comparable(read_metrics(run_dir)) == _comparable(solo)
    assert _status(run_dir)["status"] == "completed" and "resumes" not in _status(run_dir)
    assert not list(run_dir.glob("*.prev-*"))


# Injected into the child: wait before writing checkpoint N until the test opens a gate (the run stays live, and its
# computation is untouched).
PAUSE_BEFORE_CHECKPOINT = """
import sys, time
from pathlib import Path
import gdro.run.lifecycle as lifecycle  # the Lifecycle writes each checkpoint through its save_checkpoint
at, gate = int(sys.argv.pop(1)), Path(sys.argv.pop(1))
save = lifecycle.save_checkpoint
def paused(run_dir, step, *a, **k):
    if step == at:
        gate.with_suffix(".waiting").touch()
        while not gate.exists():
            time.sleep(0.01)
    return save(run_dir, step, *a, **k)
lifecycle.save_checkpoint = paused
from gdro.cli.train import train
sys.argv = ["gdro-train", *sys.argv[1:]]
train()
"""


@pytest.mark.parametrize("checkpoints", [0, 2])
def test_a_second_start_on_a_live_run_refuses_and_the_run_goes_on(tmp_path, solo, checkpoints):
    run_dir, gate = tmp_path / "run", tmp_path / "gate"
    first = subprocess.Popen([sys.executable, "-c", PAUSE_BEFORE_CHECKPOINT, str(checkpoints + 1), str(gate), *CLI,
                              f"hydra.run.dir={run_dir}"], cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not gate.with_suffix(".waiting").exists():  # live: rows logged, `checkpoints` checkpoints written
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
        time.sleep(0.01)
    assert len(list_checkpoints(run_dir)) == checkpoints and read_metrics(run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != "gdro.lock"}
    second = _run(run_dir, code=EXIT_IN_USE)
    assert len(_lines(second.stderr)) == 1 and f"held by pid {first.pid}" in second.stderr
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != "gdro.lock"} == before
    gate.touch()
    assert first.wait(timeout=300) == 0, first.communicate()[1][-3000:]
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and _comparable(rows) == _comparable(solo)
    assert _status(run_dir)["status"] == "completed" and "resumes" not in _status(run_dir)
    assert not list(run_dir.glob("*.prev-*")), "the live run's files were renamed"


def test_a_requeued_job_waits_for_its_dying_predecessor_then_runs_or_refuses(tmp_path, solo):
    """SLURM_RESTART_COUNT > 0: the start waits up to lock.requeue_wait_s for the holder (here a process that
    lets go after 3 s, as a predecessor finishing its last checkpoint would), then runs -- or, when the holder
    outlives the wait, refuses in one line."""
    env = {**_env(), "SLURM_RESTART_COUNT": "1"}
    run_dir = tmp_path / "run"
    dying = _holder(run_dir, 3)
    _run(run_dir, extra=("lock.requeue_wait_s=120",), env=env)
    assert dying.wait(timeout=60) == 0
    assert _comparable(read_metrics(run_dir)) == _comparable(solo)
    alive = _holder(tmp_path / "other", 120)
    try:
        out = _run(tmp_path / "other", extra=("lock.requeue_wait_s=2",), env=env, code=EXIT_IN_USE)
    finally:
        alive.kill()
        alive.wait()
    assert len(_lines(out.stderr)) == 1 and f"held by pid {alive.pid} " in out.stderr and "(waited 2 s)" in out.stderr


# ------------------------------------------------------------------------------ a kill during the final save
# Injected into the child: SIGKILL itself at one point of writing <run_dir>/checkpoint (the final policy).
KILL_IN_FINAL_SAVE = """
import os, shutil, signal, sys
from pathlib import Path
point = sys.argv.pop(1)
def die():
    os.kill(os.getpid(), signal.SIGKILL)
def final(path):
    name = Path(path).name
    return name == "checkpoint" or name.startswith((".tmp-checkpoint-", ".old-checkpoint-"))
if point == "mid-weights":  # the weights file half written
    import transformers.modeling_utils as mu
    save = mu.safe_save_file
    def half(tensors, filename, *a, **k):
        save(tensors, filename, *a, **k)
        if final(Path(filename).parent):
            os.truncate(filename, os.path.getsize(filename) // 2)
            die()
    mu.safe_save_file = half
elif point == "before-tokenizer":  # config and weights written, the tokenizer not
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    save_tok = PreTrainedTokenizerBase.save_pretrained
    def tok(self, path, *a, **k):
        if final(path):
            die()
        return save_tok(self, path, *a, **k)
    PreTrainedTokenizerBase.save_pretrained = tok
elif point == "before-flush":  # every file written, none flushed, nothing renamed
    import gdro.run.checkpoint as ck
    flush = ck._fsync_tree
    ck._fsync_tree = lambda root: die() if final(root) else flush(root)
elif point == "at-rename":  # flushed; an existing final renamed aside, the new one not yet in place
    rename = os.rename
    os.rename = lambda src, dst: die() if Path(src).name.startswith(".tmp-checkpoint-") else rename(src, dst)
elif point == "before-cleanup":  # the new one in place, the old one not yet removed
    rmtree = shutil.rmtree
    shutil.rmtree = lambda p, *a, **k: die() if Path(p).name.startswith(".old-checkpoint-") else rmtree(p, *a, **k)
from gdro.cli.train import train
sys.argv = ["gdro-train", *sys.argv[1:]]
train()
"""


@pytest.fixture(scope="module")
def solo_final(tmp_path_factory) -> dict[int, dict[str, torch.Tensor]]:
    """The final policy's weights of uninterrupted 2- and 3-step runs."""
    out = {}
    for steps in (2, 3):
        run_dir = tmp_path_factory.mktemp(f"final{steps}") / "run"
        _run(run_dir, SHORT, (f"steps={steps}",))
        out[steps] = load_file(run_dir / "checkpoint" / "model.safetensors")
    return out


def _assert_loadable(final: Path, steps: int, expected: dict[str, torch.Tensor]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(final)
    AutoTokenizer.from_pretrained(final)
    assert json.loads((final / FINAL_MARKER).read_text())["step"] == steps
    got = load_file(final / "model.safetensors")
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got)


@pytest.mark.parametrize(("point", "extend"), [
    ("mid-weights", False), ("before-tokenizer", False), ("before-flush", False), ("at-rename", False),
    ("at-rename", True), ("before-cleanup", True),  # extend: a finished 2-step run is extended to 3 steps
])
def test_a_kill_at_any_point_of_the_final_save_then_a_rerun_leaves_a_loadable_final_checkpoint(
        tmp_path, solo_final, point, extend):
    run_dir = tmp_path / "run"
    steps = 3 if extend else 2
    if extend:
        _run(run_dir, SHORT, ("steps=2",))
    out = subprocess.run([sys.executable, "-c", KILL_IN_FINAL_SAVE, point, *SHORT, f"steps={steps}",
                          f"hydra.run.dir={run_dir}"], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    final = run_dir / "checkpoint"
    if final.exists():  # never partial: the previous final, whole (or, after the swap, the new one)
        held = json.loads((final / FINAL_MARKER).read_text())["step"]
        _assert_loadable(final, held, solo_final[held])
    rerun = _run(run_dir, SHORT, (f"steps={steps}",))
    assert _lines(rerun.stderr) == []
    _assert_loadable(final, steps, solo_final[steps])
    assert not list(run_dir.glob(".tmp-checkpoint-*")) and not list(run_dir.glob(".old-checkpoint-*"))
    assert _status(run_dir)["status"] == "completed"


# ----------------------------------------------------------------------------------------- a second Ctrl-C
def test_a_second_ctrl_c_stops_at_once_in_one_line_and_the_run_is_interrupted(tmp_path, solo):
    """Both Ctrl-Cs land mid-run (held before step 2's checkpoint): the first asks for a graceful stop, the second
    stops at once. (A second Ctrl-C after the graceful stop has printed its line ends the exiting process too.)"""
    run_dir, gate = tmp_path / "run", tmp_path / "gate"
    env = {k: v for k, v in _env().items() if k != "WANDB_MODE"}
    wandb = ["logger=wandb", "logger.wandb_mode=offline"]  # W&B's own process sees the Ctrl-C too
    proc = subprocess.Popen([sys.executable, "-c", PAUSE_BEFORE_CHECKPOINT, "2", str(gate), *CLI, *wandb,
                             f"hydra.run.dir={run_dir}"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not gate.with_suffix(".waiting").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    said = ("gdro-train: stopped at once by a second Ctrl-C (the run is marked interrupted); run the same command "
            "again to resume from the last checkpoint")
    assert _lines(err) == [said], err[-3000:]
    record = _status(run_dir)
    assert record["status"] == "interrupted" and "second Ctrl-C" in record["interrupted_by"]
    _run(run_dir, CLI, tuple(wandb), env=env)
    assert _comparable(read_metrics(run_dir)) == _comparable(solo)
    record = _status(run_dir)
    assert record["status"] == "completed" and "interrupted_by" not in record  # kept in the resumes entry
    assert "second Ctrl-C" in record["resumes"][-1]["previous"]["interrupted_by"]


# --------------------------------------------------------------------------- a full disk, a read-only run dir
# Run inside a private mount namespace (unshare -rm) on a small tmpfs; writes one JSON result per case.
FULL_DISK = r"""
import json, os, subprocess, sys
from pathlib import Path
mnt, results, cmd, fill = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
def sh(*args):
    subprocess.run(args, check=True)
def run(name, argv, env=None):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    run_dir = Path(argv[-1].split("=", 1)[1])
    files = {n: (run_dir / n).read_text() for n in ("run.json", "metrics.jsonl") if (run_dir / n).is_file()}
    (results / f"{name}.json").write_text(json.dumps({"rc": out.returncode, "stderr": out.stderr, **files,
                                                      "ckpts": sorted(p.name for p in (run_dir / "checkpoints").glob("*"))
                                                      if (run_dir / "checkpoints").is_dir() else []}))
# 1. the disk fills up while checkpoint 2 is written; removing its partial write frees room for run.json
sh("mount", "-t", "tmpfs", "-o", "size=14m", "tmpfs", str(mnt))
run("allows", [*cmd, f"hydra.run.dir={mnt}/run"])
sh("umount", str(mnt))
# 2. another writer fills the disk just before checkpoint 2: not even run.json can be written
sh("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt))
run("full", [sys.executable, "-c", fill, str(mnt / "ballast"), *cmd[3:], f"hydra.run.dir={mnt}/run"])
os.remove(mnt / "ballast")
run("next_start", [*cmd, f"hydra.run.dir={mnt}/run"])
sh("umount", str(mnt))
# 3. a read-only run dir: a fresh one, and one that holds a finished run
(mnt.parent / "ro").mkdir()
run("finished", [*cmd, f"hydra.run.dir={mnt.parent}/ro/done"])
sh("mount", "--bind", str(mnt.parent / "ro"), str(mnt.parent / "ro"))
sh("mount", "-o", "remount,bind,ro", str(mnt.parent / "ro"))
run("ro_fresh", [*cmd, f"hydra.run.dir={mnt.parent}/ro/new"])
run("ro_finished", [*cmd, "steps=7", f"hydra.run.dir={mnt.parent}/ro/done"])
"""
FILL_BEFORE_STEP_2 = """
import sys
import gdro.run.lifecycle as lifecycle  # the Lifecycle writes each checkpoint through its save_checkpoint
from tests.fill_disk import fill
ballast = sys.argv.pop(1)
save = lifecycle.save_checkpoint
def fill_then_save(run_dir, step, *a, **k):
    if step == 2:
        fill(ballast)
    return save(run_dir, step, *a, **k)
lifecycle.save_checkpoint = fill_then_save
from gdro.cli.train import train
sys.argv = ["gdro-train", *sys.argv[1:]]
train()
"""


def _namespaces_work() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, text=True, check=False)
    return None if probe.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {probe.stderr.strip()}"


def test_a_full_disk_and_a_read_only_dir_are_one_line_and_recorded(tmp_path, solo):
    reason = _namespaces_work()
    if reason:
        pytest.skip(reason)
    (tmp_path / "mnt").mkdir()
    (tmp_path / "results").mkdir()
    cmd = [sys.executable, "-m", "gdro.cli.train", *CLI]
    subprocess.run(["unshare", "-rm", sys.executable, "-c", FULL_DISK, str(tmp_path / "mnt"), str(tmp_path / "results"),
                    json.dumps(cmd), FILL_BEFORE_STEP_2], cwd=REPO, env=_env(), check=True, timeout=900)
    res = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")}
    mnt = tmp_path / "mnt"

    allows = res["allows"]  # ENOSPC in checkpoint 2's optimizer.pt, recorded in run.json (its write was removed)
    lines = _lines(allows["stderr"])
    assert allows["rc"] == EXIT_IO_ERROR and len(lines) == 1, allows["stderr"]
    assert lines[0].startswith(f"error: No space left on device (ENOSPC): {mnt}/run/checkpoints/.tmp-step_000002-")
    record = json.loads(allows["run.json"])
    assert record["status"] == "failed" and "No space left on device" in record["error"]
    assert allows["ckpts"] == ["step_000001"]

    full = res["full"]  # the disk full: run.json still says running; the lock kept the end for the next start
    assert full["rc"] == EXIT_IO_ERROR and len(_lines(full["stderr"])) == 1 and "(ENOSPC)" in full["stderr"]
    assert json.loads(full["run.json"])["status"] == "running"
    nxt = res["next_start"]
    assert nxt["rc"] == 0, nxt["stderr"]
    record = json.loads(nxt["run.json"])
    previous = record["resumes"][-1]["previous"]
    assert record["status"] == "completed" and previous["status"] == "failed"
    assert "No space left on device" in previous["error"] and previous["recorded"].startswith("at the next start")
    rows = [json.loads(line) for line in nxt["metrics.jsonl"].splitlines()]
    assert _comparable(rows) == _comparable(solo)  # the resume from checkpoint 1 is exact

    ro = tmp_path / "ro"
    assert res["ro_fresh"]["rc"] == EXIT_IO_ERROR
    assert _lines(res["ro_fresh"]["stderr"]) == [f"error: Read-only file system (EROFS): {ro}"]
    finished = res["ro_finished"]  # a finished run on a read-only disk: refused in one line, its record unchanged
    assert finished["rc"] == EXIT_IO_ERROR and len(_lines(finished["stderr"])) == 1
    assert "Read-only file system (EROFS)" in finished["stderr"]
    assert json.loads(finished["run.json"]) == json.loads(res["finished"]["run.json"])
