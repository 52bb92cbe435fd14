#!/usr/bin/env bash
# Set up (or refresh) the CPU environment in .venv: the pinned CPU torch, nox, and every WS1 package installed
# editable. Idempotent and fast on a second run: a package is reinstalled only when its sources change (stamp =
# hash of its files), and kernels-cpu's C++ build keeps its objects (kernels-cpu/build/), so only changed units
# recompile. Each step prints its time.
#
#   bash ci/setup_cpu.sh        the cpu_bf16 main job's environment (README's first command)
#   bash ci/setup_cpu.sh --ci   ...plus what CI's full test run needs for the other profiles' CPU-side checks:
#                               the Ascend emulator build (kernels-ascend/emu) and the CUTLASS headers (kernels-cuda's
#                               compile check), and .venv-vllm (ci/setup_vllm.sh: vLLM's CPU build, the ws1-vllm
#                               plugin) -- README's test command and .ci/run
set -euo pipefail
cd "$(dirname "$0")/.."
CI_EXTRAS=0
for a in "$@"; do
  case "$a" in
    --ci) CI_EXTRAS=1 ;;
    *) echo "ci/setup_cpu.sh: unknown argument '$a' (expected --ci or nothing)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

STEP_TAG=setup
# shellcheck source=ci/steps.sh
. ci/steps.sh
pip_q() { .venv/bin/python -m pip install -q --disable-pip-version-check "$@"; }

if [ ! -x .venv/bin/python ]; then
  step venv "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp_dir=.venv/.ws1-stamps
mkdir -p "$stamp_dir"
req_hash=$(sha256sum requirements/cpu.txt | cut -c1-16)
if [ "$(cat "$stamp_dir/requirements" 2>/dev/null)" != "$req_hash" ]; then
  step requirements "installing requirements/cpu.txt (torch 2.13.0 CPU build, nox, pytest, ...)"
  pip_q -r requirements/cpu.txt
  echo "$req_hash" > "$stamp_dir/requirements"
fi
if [ "$CI_EXTRAS" = 1 ]; then
  cut_hash=$(sha256sum requirements/cutlass.txt | cut -c1-16)
  if [ "$(cat "$stamp_dir/cutlass" 2>/dev/null)" != "$cut_hash" ]; then
    step cutlass "installing requirements/cutlass.txt --no-deps (CUTLASS headers for kernels-cuda's sm_90a GEMM compile check)"
    pip_q --no-deps -r requirements/cutlass.txt
    echo "$cut_hash" > "$stamp_dir/cutlass"
  fi
fi

# Dependency order: ws1-accel <- ws1-contract <- ws1-ops <- ws1-kv <- ws1-qwen3 <- ws1-dist <- ws1-vllm (imports without vLLM);
# ws1-matrix; kernels.
PKGS="packages/ws1-accel packages/ws1-contract kernels-cpu packages/ws1-ops packages/ws1-kv packages/ws1-qwen3 packages/ws1-dist packages/ws1-vllm packages/ws1-matrix"
[ "$CI_EXTRAS" = 1 ] && PKGS="$PKGS kernels-ascend/emu"
stale=()
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
      kernels-cpu|kernels-ascend-emu)
        [ "$name" = kernels-cpu ] && what="C++ torch extension, ninja on $(nproc) cores" || what="the Ascend C kernels on the host emulator, for CI"
        step "$name" "building $name ($what)"
        # --no-build-isolation: the build must see this venv's torch, not download another one.
        pip_q --no-build-isolation --no-deps -e "$pkg"
        echo "$h" > "$stamp_dir/$name" ;;
      *) stale+=("$pkg:$name:$h") ;;
    esac
  fi
done
# The pure-Python packages in one pip call (one resolver start instead of five).
if [ "${#stale[@]}" -gt 0 ]; then
  names=$(printf '%s\n' "${stale[@]}" | cut -d: -f2 | paste -sd' ')
  step packages "installing $names (editable)"
  args=()
  for s in "${stale[@]}"; do args+=(-e "${s%%:*}"); done
  pip_q --no-build-isolation --no-deps "${args[@]}"
  for s in "${stale[@]}"; do IFS=: read -r _ name h <<< "$s"; echo "$h" > "$stamp_dir/$name"; done
fi
done_step
# CI's vLLM suite and gate (noxfile.SUITES["vllm"]): vLLM's CPU build in .venv-vllm, beside this venv
if [ "$CI_EXTRAS" = 1 ]; then
  bash ci/setup_vllm.sh
fi
printf '\033[1m[setup]\033[0m ready in %ds: %s, nox at .venv/bin/nox%s\n' "$((SECONDS - T0))" \
  "$(.venv/bin/python -c 'import torch; print("torch", torch.__version__)')" \
  "$([ "$CI_EXTRAS" = 1 ] && echo ' (with CI'"'"'s extras)' || echo '')"
