#!/usr/bin/env bash
# C11 on an Ascend host (CANN + torch_npu installed, e.g. Atlas A2): the WS1 packages into the host's
# Python, the Ascend kernel package when present (its setuptools build drives the CANN compiler),
# then the flow for WS1_PROFILES (default ascend_bf16).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -z "${ASCEND_HOME_PATH:-}" ] && [ -f /usr/local/Ascend/ascend-toolkit/set_env.sh ]; then
  # shellcheck disable=SC1091
  source /usr/local/Ascend/ascend-toolkit/set_env.sh
fi
extra=""
[ -f kernels-ascend/pyproject.toml ] && extra="kernels-ascend"
PYTHON=$PY bash ci/install_host.sh $extra
exec "$PY" -m nox -s c11_ci -- ${WS1_PROFILES:-ascend_bf16} "$@"
