"""Evaluation noise: re-score checkpoints on the held-out split with several sampling seeds.

    python scripts/eval_noise.py --checkpoints tiny outputs/runs/<run>/checkpoint --seeds 0 1 2 3

Prints mean@k / pass@k per seed and their spread (std over seeds). Any other training-config override
can follow ``--`` (e.g. ``-- data.test_per_level=96 device=cpu``); the evaluation settings are those of the
composed config (conf/eval/heldout.yaml) with only the seed changed, on its ``device`` (auto: CUDA when present).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from gdro.algorithm.heldout import evaluate
from gdro.compose.build import build_components
from gdro.models.loading import load_model
from gdro.rollout import make_engine

CONF = Path(__file__).resolve().parent.parent / "conf"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", nargs="+", required=True, help="model dirs or 'tiny'")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("overrides", nargs="*", help="training-config overrides, after --")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=args.overrides)
    comp = build_components(cfg)
    problems = comp.data.test()
    report = {}
    for ckpt in args.checkpoints:
        spec = dataclasses.replace(comp.model, name_or_path=ckpt)
        model, tok = load_model(spec, device=comp.settings.device)
        engine = make_engine(comp.rollout, model, tok, spec)
        rows = []
        for seed in args.seeds:
            ecfg = dataclasses.replace(comp.eval, seed=seed)
            r = evaluate(engine, problems, comp.reward, ecfg, spec.max_new_tokens)
            rows.append(r)
            k = ecfg.k
            print(f"{ckpt}  seed={seed}  mean@{k}={r[f'eval/mean@{k}']:.2f}  pass@{k}={r[f'eval/pass@{k}']:.2f}", flush=True)
        keys = [key for key in rows[0] if key.startswith(("eval/mean@", "eval/pass@"))]
        summary = {key: {"mean": float(np.mean([r[key] for r in rows])), "std": float(np.std([r[key] for r in rows], ddof=1)) if len(rows) > 1 else 0.0} for key in keys}
        k = comp.eval.k
        for key in (f"eval/mean@{k}", f"eval/pass@{k}"):
            print(f"{ckpt}  {key}: {summary[key]['mean']:.2f} ± {summary[key]['std']:.2f} (std over {len(rows)} seeds)")
        report[ckpt] = {"per_seed": rows, "summary": summary, "n_problems": len(problems)}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
