#!/usr/bin/env bash
# Runs whose non-time metrics must not change under a refactoring (issue 21): record them before, rerun after, and
# compare each pair with scripts/compare_metrics.py. Usage:
#   bash scripts/equivalence_runs.sh OUT [run ...]     runs: main smoke paper rgdro packed kv rows gc fsdp eval
#                                                      (default: all)
# main is the default job (gdro-train, seed 0; ~2.5 min on 2 cores); the others are short variants that cover the
# Rollout-GDRO allocator, the packed layout with old log-probs (2 epochs x 2 mini-batches) and token micro-batches,
# the KV-cache and one-row-per-sequence layouts, gradient checkpointing, 2 gloo processes (FSDP2) against one
# process with dist.shards=2 (the settings of tests/test_distributed.py), and gdro-eval on the toy suite. smoke is
# experiment=smoke; paper is the three paper presets in smoke form (each preset's sampler, allocator, loss, optimiser
# and reward on the tiny default model and task, 3 steps of 8 prompts, with a final evaluation).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: equivalence_runs.sh OUT [run ...]}; shift
RUNS=${*:-main smoke paper rgdro packed kv rows gc fsdp eval}
PY=.venv/bin/python
SHORT=(logger=jsonl progress=false seed=0 eval.every=0 eval.at_start=true eval.at_end=true eval.max_problems=48)
FSDP=(logger=jsonl prompts_per_step=8 rollouts_per_prompt=4 progress=false eval.at_start=false eval.every=0
      eval.at_end=false eval.k=4 eval.max_problems=24 data.train_size=400 data.test_per_level=3 save_final=true
      threads=1 sampler=prompt-gdro allocator=rollout-gdro dist.shards=2 checkpoint.every=1 steps=3)
PAPER=(model=tiny rollout=hf data=copy steps=3 prompts_per_step=8 rollouts_per_prompt=4 logger=jsonl progress=false
       eval.every=0 eval.at_start=false eval.at_end=true eval.k=2 eval.max_problems=16 save_final=false)
train() { local dir=$1; shift; rm -rf "$OUT/$dir"; "$@" "hydra.run.dir=$OUT/$dir" > "$OUT/$dir.log" 2>&1; }
mkdir -p "$OUT"
for r in $RUNS; do
  echo "== $r"
  case $r in
    main)   train main   .venv/bin/gdro-train seed=0 progress=false ;;
    smoke)  train smoke  .venv/bin/gdro-train experiment=smoke progress=false ;;
    paper)  for p in paper paper-prompt-gdro paper-rollout-gdro; do
              train "$p" .venv/bin/gdro-train "experiment=$p" "${PAPER[@]}"
            done ;;
    rgdro)  train rgdro  .venv/bin/gdro-train "${SHORT[@]}" allocator=rollout-gdro steps=40 ;;
    packed) train packed .venv/bin/gdro-train "${SHORT[@]}" optim.pack=true optim.ppo_epochs=2 optim.mini_batches=2 \
              optim.micro_batch_tokens=600 steps=15 ;;
    kv)     train kv     .venv/bin/gdro-train "${SHORT[@]}" optim.pack=false steps=10 ;;
    rows)   train rows   .venv/bin/gdro-train "${SHORT[@]}" optim.shared_prefix=false optim.micro_batch_size=48 steps=10 ;;
    gc)     train gc     .venv/bin/gdro-train "${SHORT[@]}" model.gradient_checkpointing=true optim.pack=false \
              sampler=uniform loss.beta_kl=0 steps=10 ;;
    fsdp)   train fsdp2  $PY -m torch.distributed.run --standalone --nproc_per_node 2 -m gdro.cli.train "${FSDP[@]}"
            train fsdp1  $PY -m gdro.cli.train "${FSDP[@]}" ;;
    eval)   rm -rf "$OUT/eval"; .venv/bin/gdro-eval eval.k=4 eval.max_problems=64 "out=$OUT/eval" \
              "hydra.run.dir=$OUT/eval" > "$OUT/eval.log" 2>&1 ;;
    *) echo "unknown run $r" >&2; exit 2 ;;
  esac
done
