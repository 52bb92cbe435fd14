#!/usr/bin/env bash
# C11 on a CPU host: set up .venv (pinned CPU torch, kernels-cpu built), then the flow for the
# profiles in WS1_PROFILES (default cpu_bf16). Extra arguments go to c11 (e.g. --model tiny).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup_cpu.sh
exec .venv/bin/nox -s c11_ci -- ${WS1_PROFILES:-cpu_bf16} "$@"
