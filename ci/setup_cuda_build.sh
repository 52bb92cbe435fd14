#!/usr/bin/env bash
# The full torch-linked build of kernels-cuda on a host WITHOUT a GPU: .venv-cuda (git-ignored) gets the CUDA 13
# build of torch 2.14.1 (~5.4 GB, from the local package index) + setuptools/ninja, then ws1-kernels-cuda is
# built editable against it for sm_80 and sm_90a (CUDA_HOME: the toolkit, default the newest /usr/local/cuda-*),
# then kernels-cuda/tools/link_check.py loads the library there (schemas, Meta shapes; no kernel executed).
# Idempotent: torch is installed once; the extension rebuilds only when csrc/ or setup.py change (stamp).
# First run ~25 min on 2 cores (each .cu compiles torch's headers twice, once per arch); exit 2: no toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
step() { printf '\033[1m[setup-cuda]\033[0m %s\n' "$*"; }

if [ -z "${CUDA_HOME:-}" ]; then
  CUDA_HOME=$(ls -d /usr/local/cuda-* 2>/dev/null | sort -V | tail -1 || true)
fi
if [ -z "${CUDA_HOME:-}" ] || [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "setup_cuda_build: no CUDA toolkit (set CUDA_HOME; /usr/local/cuda-* has no nvcc): kernels-cuda cannot be built here"
  exit 2
fi
export CUDA_HOME

if [ ! -x .venv-cuda/bin/python ]; then
  step "creating .venv-cuda with $($PY --version)"
  "$PY" -m venv .venv-cuda
fi
if ! .venv-cuda/bin/python -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
  step "installing torch==2.14.1 (CUDA 13 build, ~5.4 GB) + setuptools, wheel, ninja"
  .venv-cuda/bin/python -m pip install -q --disable-pip-version-check torch==2.14.1 setuptools wheel ninja
fi
if ! .venv-cuda/bin/python -c 'import importlib.metadata as m, sys; sys.exit(m.version("nvidia-cutlass") != "4.2.0.0")' 2>/dev/null; then
  step "installing requirements/cutlass.txt --no-deps (CUTLASS headers for the sm_90a GEMM)"
  .venv-cuda/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements/cutlass.txt
fi
stamp=.venv-cuda/.ws1-kernels-cuda
h=$(find kernels-cuda/csrc kernels-cuda/setup.py kernels-cuda/pyproject.toml kernels-cuda/src -type f \
      \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.cpp' -o -name '*.py' -o -name '*.toml' \) -print0 \
    | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$h" ]; then
  step "building kernels-cuda against $(.venv-cuda/bin/python -c 'import torch; print(torch.__version__)') with $CUDA_HOME (sm_80, sm_90a)"
  t0=$(date +%s)
  MAX_JOBS=${MAX_JOBS:-2} .venv-cuda/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e kernels-cuda
  step "built in $(( $(date +%s) - t0 )) s"
  echo "$h" > "$stamp"
fi
exec .venv-cuda/bin/python kernels-cuda/tools/link_check.py --out evidence/build
