#!/usr/bin/env bash
# C11 on an Ascend host (Atlas A2/A3, CANN + torch_npu installed): the WS1 packages into the host's
# Python, then kernels-ascend — its setuptools build runs CANN's `bisheng -x asc --npu-arch=$WS1_NPU_ARCH`
# on csrc/*.asc and links the torch_npu extension (kernels-ascend/setup.py) — then the flow for
# WS1_PROFILES (default ascend_bf16): static gates -> build -> tests -> C2 runtime -> C3/C4/C5 ->
# C6/C7/C9 -> C8 -> C10 (ci/c11.py), evidence under evidence/ascend_bf16/. docs/ascend.md says what to send back.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -z "${ASCEND_HOME_PATH:-}" ] && [ -f /usr/local/Ascend/ascend-toolkit/set_env.sh ]; then
  # shellcheck disable=SC1091
  source /usr/local/Ascend/ascend-toolkit/set_env.sh
fi
if [ -z "${ASCEND_HOME_PATH:-}" ]; then
  echo "run_ws1_ascend_ci: CANN not found (ASCEND_HOME_PATH unset, no /usr/local/Ascend/ascend-toolkit/set_env.sh) — source your CANN set_env.sh first" >&2
  exit 2
fi
export WS1_NPU_ARCH=${WS1_NPU_ARCH:-dav-2201}   # Atlas A2/A3 (910B / 910C); the build records it
PYTHON=$PY bash ci/install_host.sh kernels-ascend
exec "$PY" -m nox -s c11_ci -- ${WS1_PROFILES:-ascend_bf16} "$@"
