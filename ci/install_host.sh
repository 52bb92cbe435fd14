#!/usr/bin/env bash
# Install the WS1 packages into a GPU or NPU host's own Python, keeping its vendor stack (CUDA torch
# + triton, or torch_npu + CANN): editable, --no-deps; then the pure-Python pins of
# requirements/cpu.txt that the host lacks (never torch, triton or torch_npu).
#
#   PYTHON=python3 bash ci/install_host.sh [extra package dirs, e.g. kernels-cuda]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { printf '\033[1m[install]\033[0m %s\n' "$*"; }
say "$($PY -c 'import torch; print("host torch", torch.__version__)')"
missing=""
while read -r pin; do
  name=${pin%%==*}
  case "$name" in torch|triton|ninja|ruff|setuptools*|wheel|"") continue;; esac
  $PY -c "import importlib.metadata as m; m.version('$name')" 2>/dev/null || missing="$missing $pin"
done < <(grep -E '^[A-Za-z0-9_.-]+==' requirements/cpu.txt)
if [ -n "$missing" ]; then
  say "installing what the host lacks:$missing"
  $PY -m pip install -q ${WS1_WHEELS:+--no-index --find-links "$WS1_WHEELS"} $missing
fi
# CUTLASS's headers (kernels-cuda's sm_90a GEMM), --no-deps: only its include directory is used
cut_pin=$(grep -E '^nvidia-cutlass==' requirements/cutlass.txt)
if ! $PY -c "import importlib.metadata as m, sys; sys.exit(m.version('nvidia-cutlass') != '${cut_pin#*==}')" 2>/dev/null; then
  say "installing $cut_pin --no-deps"
  $PY -m pip install -q --no-deps ${WS1_WHEELS:+--no-index --find-links "$WS1_WHEELS"} "$cut_pin"
fi
for pkg in packages/ws1-accel packages/ws1-contract packages/ws1-ops packages/ws1-kv packages/ws1-qwen3 packages/ws1-dist packages/ws1-vllm packages/ws1-matrix "$@"; do
  say "installing $pkg (editable, --no-deps)"
  $PY -m pip install -q --no-deps --no-build-isolation -e "$pkg"
done
