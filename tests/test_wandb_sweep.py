"""Sweeps in W&B as researchers use them: a multirun is one W&B group named after the sweep, each run's name and tags
carry its config choices, and ``gdro-report --wandb`` logs the table and the figures to that group. Offline mode;
the assertions read what the offline run files hold (the ``.wandb`` record log)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def wandb_records(run_dir: Path) -> list:
    """The protobuf records of the offline W&B run under ``run_dir`` (its ``.wandb`` file: a LevelDB-style log of
    32 KiB blocks, each record a 7-byte header -- crc, length, type: full / first / middle / last -- and its bytes)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("offline-run-*/run-*.wandb")
    data, pos, block, buf, out = path.read_bytes(), 7, 32768, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
    return out


def run_record(run_dir: Path):
    return next(r.run for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run")


def test_a_multirun_is_one_wandb_group_and_the_report_joins_it(tmp_path: Path):
    sweep = tmp_path / "pgdro-seeds"
    cmd = [sys.executable, "-m", "gdro.cli.train", "-m", "seed=0,1", "experiment=smoke", "logger=wandb",
           "logger.wandb_mode=offline", "eval.at_end=true", "eval.max_problems=8", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job, seed in (("0", 0), ("1", 1)):
        run = run_record(sweep / job / "wandb")
        assert run.run_group == "pgdro-seeds" and run.project == "gdro"
        tags = set(run.tags)
        assert {f"seed:{seed}", "experiment:smoke", "model:tiny", "data:copy", "sampler:prompt-gdro",
                "allocator:fixed", "rollout:hf"} <= tags
        assert run.display_name == f"smoke-tiny-copy-prompt-gdro-fixed-s{seed}"
        assert json.loads((sweep / job / "run.json").read_text())["status"] == "completed"

    proc = subprocess.run([sys.executable, "-m", "gdro.cli.report", str(sweep), "--wandb"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600, env={**__import__("os").environ, "WANDB_MODE": "offline"}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = wandb_records(sweep / "report" / "wandb")
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.run_group == "pgdro-seeds" and run.job_type == "report"
    logged = {item.key or item.nested_key[0] for r in records if r.WhichOneof("record_type") == "history"
              for item in r.history.item}
    assert {"tables/table", "tables/table_md", "figures/eval_curves"} <= logged
    media = list((sweep / "report" / "wandb").glob("offline-run-*/files/media/**/*"))
    assert any(p.name.endswith(".table.json") for p in media) and any(p.suffix == ".png" for p in media)
