#!/usr/bin/env bash
# The wheels a GPU host lacks, as one folder to carry to it (the device machine reaches no registry):
# requirements/gpu-host.txt's projects (nox, cattrs, ...) resolved with their dependencies for the host's Python
# (3.12, manylinux x86-64) and filtered against the host image's inventory (ci/gpu_host_h200.txt) by ci/gpu_wheels.py.
#
#   bash ci/gpu_wheels.sh [DEST]          (default .whl, git-ignored; name it in the device run's carry)
#
# On the host: python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#              && export PYTHONPATH=/tmp/site          (ci/gpu_check.sh does this itself when .whl exists)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
exec "$PY" ci/gpu_wheels.py "${1:-.whl}" --python "${WS1_GPU_PYTHON_VERSION:-3.12}"
