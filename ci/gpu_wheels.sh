#!/usr/bin/env bash
# Fetch, on a host with registry access, the wheels that ci/gpu_check.sh needs on a GPU host that
# has none (the H100/H200 image has torch, triton, attrs, pytest, numpy, safetensors, transformers
# ... but not nox or cattrs). Versions are the pins of requirements/cpu.txt; the target is the GPU
# image's Python (3.12, x86-64). ~7 MB into .whl/ (add /.whl/ to .git/info/exclude; carry it).
#
#   bash ci/gpu_wheels.sh [DEST]          (default .whl)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.whl}
PY=${PYTHON:-python3}
PYVER=${WS1_GPU_PYTHON_VERSION:-3.12}
pins=$(grep -E '^(nox|cattrs)==' requirements/cpu.txt | tr '\n' ' ')
[ -n "$pins" ] || { echo "gpu_wheels: no nox/cattrs pins in requirements/cpu.txt" >&2; exit 1; }
"$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$DEST" $pins
ls "$DEST"
