#!/usr/bin/env bash
# The device checks as one call (docs/gpu.md): scripts/gpu_check.py (one GRPO step at Qwen3-1.7B's size, HF engine),
# then the paper's rehearsal on CUDA (scripts/rehearse_paper.py, HF engine, 1 process; vLLM has no wheel there).
# Python packages the GPU image lacks travel as wheels in .whl/ (pip download, see the device notes); the real data
# copies travel in .gpu/realdata. Logs and the rehearsal's summary land in $OUT (default outputs/gpu).
#   GPU_CHECK_S=150 REHEARSAL_S=210 bash scripts/gpu_session.sh
# DEVICE (cuda), MODEL (qwen3-1.7b-random), REHEARSAL_ARGS (more rehearse_paper.py flags) and REH (the rehearsal's dir,
# /tmp/gdro-rehearsal) change the rehearsal; GPU_CHECK_ARGS adds gpu_check.py flags. The same script on the CPU at a
# tiny size (CI's short form, tests/test_documented_scripts.py, names no real data: the rehearsal stops after its
# set-up; --prompts stays >= 2, the rehearsal's runs having 2 shards):
#   DEVICE=cpu MODEL=qwen3-rehearsal GPU_CHECK_ARGS="--cpu --layers 1 --rollouts 4 --per-prompt 2 --new-tokens 8" \
#     REHEARSAL_ARGS="--steps 1 --prompts 2 --new-tokens 8 --threads 1 --no-eval" REALDATA=../shared/realdata \
#     OUT=/tmp/gpu-short REH=/tmp/gpu-short/rehearsal bash scripts/gpu_session.sh
set -u
OUT=${OUT:-outputs/gpu}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_session: installing .whl failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
} 2>&1 | tee "$OUT/env.txt"
start=$(date +%s)
if [ "${GPU_CHECK_S:-150}" != 0 ]; then
  timeout "${GPU_CHECK_S:-150}" python3 scripts/gpu_check.py ${GPU_CHECK_ARGS:-} 2>&1 | tee "$OUT/gpu_check.log"
  echo "gpu_check: exit ${PIPESTATUS[0]}, $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu_check.log"
fi
start=$(date +%s)
REH=${REH:-/tmp/gdro-rehearsal}
timeout "${REHEARSAL_S:-210}" python3 scripts/rehearse_paper.py --device "${DEVICE:-cuda}" --model "${MODEL:-qwen3-1.7b-random}" \
  --engines hf --procs 1 --threads 8 --realdata "${REALDATA:-.gpu/realdata}" --out "$REH" ${REHEARSAL_ARGS:-} 2>&1 \
  | tee "$OUT/rehearsal.log"
echo "rehearsal: exit ${PIPESTATUS[0]}, $(( $(date +%s) - start )) s" | tee -a "$OUT/rehearsal.log"
cp "$REH/summary.md" "$OUT/" 2>/dev/null
for f in "$REH"/*.log; do [ -f "$f" ] && { echo "=== $(basename "$f")"; tail -c 4000 "$f"; }; done > "$OUT/log-tails.txt" 2>/dev/null
ls "$OUT"
