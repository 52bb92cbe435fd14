#!/usr/bin/env bash
# C11 on a CUDA host: the WS1 packages into the host's Python (its CUDA torch and triton stay), the
# CUDA kernel package when present, then the flow for WS1_PROFILES (default: both CUDA profiles).
# A profile whose kernels are not built here is red at its build step, never served by another.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extra=""
[ -f kernels-cuda/pyproject.toml ] && extra="kernels-cuda"
PYTHON=$PY bash ci/install_host.sh $extra
exec "$PY" -m nox -s c11_ci -- ${WS1_PROFILES:-triton_cuda_bf16 cuda_bf16} "$@"
