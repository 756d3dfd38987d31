"""Training across processes (gdro.parallel.distributed): FSDP2 on the gloo backend with 2 CPU processes, against 1 process.

A one-process run with ``dist.shards=2`` generates the step's two shards in turn with the shards' own seeds, so it
samples what two processes sample; the two runs must then agree on everything the controllers do (prompts, bins,
allocations: their whole state and the data-order RNG after 3 steps) and, up to float rounding, on the losses and
the parameters.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gdro.common.rollouts import RolloutBatch, concat_rollouts
from gdro.parallel.distributed import DistConfig, shard_groups
from tests.conftest import FAST, REPO

PARAM_ATOL = 1e-6  # measured: 1.2e-7 after 3 steps (the parameters themselves move by ~6e-5)
LOSS_RTOL = 1e-5  # measured: ~1e-7 relative on train/loss


def test_shard_groups_whole_groups_balanced_and_deterministic():
    n = [2, 12, 4, 4, 6, 2, 2, 8]
    parts = shard_groups(n, 2)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(n)))  # every group once, whole
    loads = [sum(n[g] for g in p) for p in parts]
    assert loads == [20, 20]
    assert all(list(p) == sorted(p) for p in parts)  # each shard keeps the sampled order
    assert [p.tolist() for p in shard_groups(n, 2)] == [p.tolist() for p in parts]
    assert [p.tolist() for p in shard_groups(n, 1)] == [list(range(len(n)))]
    assert [len(p) for p in shard_groups([4, 4, 4], 4)] == [1, 1, 1, 0]
    with pytest.raises(ValueError, match="shards must be >= 1"):
        shard_groups(n, 0)


def test_concat_rollouts_shifts_groups():
    def batch(g: int, rows: list[int], tag: str) -> RolloutBatch:
        return RolloutBatch(prompt_token_ids=[[g]] * (max(rows) + 1), group_index=np.asarray(rows),
                            completion_ids=[[1, 2]] * len(rows), logprobs=None,
                            texts=[f"{tag}{i}" for i in range(len(rows))], finish_reasons=["stop"] * len(rows))

    out = concat_rollouts([batch(0, [0, 0, 1], "a"), batch(1, [0, 1, 1, 2], "b")])
    assert out.num_groups == 5 and out.group_index.tolist() == [0, 0, 1, 2, 3, 3, 4]
    assert out.texts == ["a0", "a1", "a2", "b0", "b1", "b2", "b3"] and out.logprobs is None
    with pytest.raises(ValueError, match="at least one"):
        concat_rollouts([])


def test_dist_config_rejects_bad_values():
    with pytest.raises(ValueError, match="backend must be one of"):
        DistConfig(backend="mpi")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="shards must be an integer >= 1"):
            DistConfig(shards=bad)


COMMON = [o for o in FAST if not o.startswith(("steps=", "save_final="))] + [
    "save_final=true", "threads=1", "sampler=prompt-gdro", "allocator=rollout-gdro", "dist.shards=2", "checkpoint.every=1",
]


def _train(run_dir: Path, steps: int, procs: int, cwd: Path) -> subprocess.CompletedProcess:
    launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)]
              if procs > 1 else [sys.executable])
    cmd = [*launch, "-m", "gdro.cli.train", *COMMON, f"steps={steps}", f"hydra.run.dir={run_dir}"]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=cwd, timeout=600)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _ckpt(run_dir: Path, step: int, name: str):
    return torch.load(run_dir / "checkpoints" / f"step_{step:06d}" / f"{name}.pt", weights_only=False)


@pytest.mark.slow
def test_two_gloo_processes_match_one_process(tmp_path: Path):
    two, one = tmp_path / "two", tmp_path / "one"
    proc = _train(two, 3, 2, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc = _train(one, 3, 1, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]

    meta2, meta1 = (json.loads((d / "run.json").read_text()) for d in (two, one))
    assert meta2["world_size"] == 2 and meta1["world_size"] == 1
    assert meta2["status"] == "completed" and meta2["last_step"] == 3
    rows2, rows1 = _rows(two), _rows(one)
    assert [r["step"] for r in rows2] == [1, 2, 3]  # rank 0 alone writes the metrics
    for r2, r1 in zip(rows2, rows1):
        for key in r1:
            if key.startswith(("difficulty/", "gdro/", "rollout/", "data/")) or key in ("reward/mean", "reward/std"):
                assert r2[key] == r1[key], (r1["step"], key)  # same prompts, bins, allocations, rollouts
        for key in ("train/loss", "train/pg_loss", "train/grad_norm", "train/clip_frac"):
            assert r2[key] == pytest.approx(r1[key], rel=LOSS_RTOL, abs=1e-9), (r1["step"], key)
    assert rows1[-1]["rollout/n_per_prompt_mean"] == 4 and rows1[-1]["gdro/multiplier_max"] is not None

    t2, t1 = _ckpt(two, 3, "trainer"), _ckpt(one, 3, "trainer")
    assert t2["world_size"] == 2 and t1["world_size"] == 1
    for part in ("sampler", "classifier", "allocator", "rng"):
        assert repr(t2[part]) == repr(t1[part]), part  # every controller and the data order: identical
    p2, p1 = _ckpt(two, 3, "policy"), _ckpt(one, 3, "policy")
    assert p2.keys() == p1.keys()
    diff = max(float((p2[k].float() - p1[k].float()).abs().max()) for k in p1)
    from safetensors.torch import load_file

    start = load_file(REPO / "gdro" / "assets" / "tiny-copy" / "model.safetensors")
    moved = max(float((p1[k].float() - start[k].float()).abs().max()) for k in p1 if k in start)
    assert diff <= PARAM_ATOL < moved  # equal within rounding, and training did move them
    # the final HF checkpoint (gathered to rank 0) equals the 1-process one within the same tolerance

    f2, f1 = load_file(two / "checkpoint" / "model.safetensors"), load_file(one / "checkpoint" / "model.safetensors")
    assert f2.keys() == f1.keys() and max(float((f2[k] - f1[k]).abs().max()) for k in f1) <= PARAM_ATOL

    # resume under FSDP: the same command with one more step continues the 2-process run from its checkpoint
    proc = _train(two, 4, 2, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    meta2 = json.loads((two / "run.json").read_text())
    assert meta2["last_step"] == 4 and [r["from_step"] for r in meta2["resumes"]] == [3]
    assert [r["step"] for r in _rows(two)] == [1, 2, 3, 4]
    # a 2-process checkpoint resumed by one process: a clear error, nothing touched
    proc = _train(two, 5, 1, tmp_path)
    assert proc.returncode != 0
    assert "written by 2 process(es); resume it with the same number (this run has 1)" in proc.stderr
    assert [r["step"] for r in _rows(two)] == [1, 2, 3, 4]
    assert json.loads((two / "run.json").read_text()) == meta2


def test_the_one_process_strategy_does_nothing():
    """Dist is the one-process form of the strategy: collectives are identities, decisions the plain ones."""
    from gdro.parallel.distributed import Dist

    d, x = Dist(), np.arange(3.0)
    assert d.all_gather_object("a") == ["a"] and d.broadcast_object(1) == 1 and d.sum_array(x) is x
    assert d.max_int(4) == 4 and d.grad_scale == 1.0 and not d.shards_model and d.main
    assert d.filler(torch.nn.Linear(1, 1), 3, np.arange(5)) == []
    pg, kl, totals = np.ones(2), np.zeros(2), {"loss": 1.0}
    assert d.reduce_update(pg, kl, totals) == (pg, kl, totals)
    assert d.stop_requested(True) and not d.stop_requested(False)
    assert d.main_only(lambda: 7, default=0) == 7
    ids, bins, n = np.array([5, 6, 7]), np.array([0, 1, 0]), np.array([4, 4, 4])
    assert d.shard_order(ids, bins, n)[3] == [0, 3]  # one shard: the order as sampled
    two = Dist(shards=2)  # one process sampling in 2 shards, as 2 processes would
    ids2, _, _, bounds = two.shard_order(ids, bins, np.array([2, 8, 2]))
    assert sorted(ids2.tolist()) == [5, 6, 7] and bounds[-1] == 3 and two.my_shards() == [0, 1]
    with pytest.raises(ValueError, match="written by 2 process"):
        d.check_resume(2, "ckpt")
