#!/usr/bin/env bash
# Set up (or refresh) the CPU environment in .venv: the pinned CPU torch, nox, and every WS1
# package installed editable. Idempotent and fast on a second run: a package is reinstalled only
# when its sources change (stamp = hash of its files), so the C++ kernels compile once.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

step() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp_dir=.venv/.ws1-stamps
mkdir -p "$stamp_dir"
req_hash=$(sha256sum requirements/cpu.txt | cut -c1-16)
if [ "$(cat "$stamp_dir/requirements" 2>/dev/null)" != "$req_hash" ]; then
  step "installing requirements/cpu.txt (torch 2.13.0 CPU build, nox, pytest, ...)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements/cpu.txt
  echo "$req_hash" > "$stamp_dir/requirements"
fi
cut_hash=$(sha256sum requirements/cutlass.txt | cut -c1-16)
if [ "$(cat "$stamp_dir/cutlass" 2>/dev/null)" != "$cut_hash" ]; then
  step "installing requirements/cutlass.txt --no-deps (CUTLASS headers for kernels-cuda's sm_90a GEMM compile check)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements/cutlass.txt
  echo "$cut_hash" > "$stamp_dir/cutlass"
fi

# Dependency order: ws1-accel <- ws1-contract <- ws1-ops <- ws1-kv <- ws1-qwen3; ws1-matrix; kernels.
PKGS="packages/ws1-accel packages/ws1-contract kernels-cpu kernels-ascend/emu packages/ws1-ops packages/ws1-kv packages/ws1-qwen3 packages/ws1-matrix"
for pkg in $PKGS; do
  [ -f "$pkg/pyproject.toml" ] || continue
  name=$(basename "$pkg")
  srcs="$pkg"
  # the Ascend emulator package compiles the .asc kernels of kernels-ascend/csrc (outside its directory)
  [ "$pkg" = kernels-ascend/emu ] && name=kernels-ascend-emu && srcs="$pkg kernels-ascend/csrc"
  # shellcheck disable=SC2086
  h=$(find $srcs -type f \( -name '*.py' -o -name '*.toml' -o -name '*.cpp' -o -name '*.h' -o -name '*.asc' \) \
        -not -path '*/tests/*' -not -path '*/build/*' -not -path '*.egg-info*' -print0 \
      | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  if [ "$(cat "$stamp_dir/$name" 2>/dev/null)" != "$h" ]; then
    case "$name" in
      kernels-cpu) step "building $name (C++ torch extension; ~4-5 min the first time on 2 cores)";;
      kernels-ascend-emu) step "building $name (the Ascend C kernels on the host emulator; ~1.5 min on 2 cores)";;
      *) step "installing $name";;
    esac
    # --no-build-isolation: the build must see this venv's torch, not download another one.
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e "$pkg"
    echo "$h" > "$stamp_dir/$name"
  fi
done
step "ready: $(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'), nox at .venv/bin/nox"
