"""WS1 ascend_bf16 kernels (Atlas A2/A3). Importing this module registers ``torch.ops.ws1_ascend.*``.

It needs torch_npu (which needs CANN) and the extension built by kernels-ascend/setup.py on an NPU host.
Without them the import fails with one clear reason — there is no fallback: the CPU emulator build of the
same sources is a different package (ws1_kernels_ascend_emu, ops ws1_ascend_emu) and never serves this one.
"""

import json

try:
    import torch_npu  # noqa: F401  (registers the NPU device; needs CANN)
except ImportError as e:  # pragma: no cover - depends on the host
    raise ImportError(f"ws1_kernels_ascend needs torch_npu (and CANN) on an Atlas host: {e}") from e

try:
    from . import _C  # noqa: F401  registers torch.ops.ws1_ascend
except ImportError as e:  # pragma: no cover - depends on the host
    raise ImportError(
        "ws1_kernels_ascend is not built: run `bash ci/run_ws1_ascend_ci.sh` (or `pip install --no-build-isolation "
        f"-e kernels-ascend` with CANN's set_env.sh sourced) on the NPU host ({e})"
    ) from e

import torch

FAMILY = "ascend"
NAMESPACE = "ws1_ascend"


def calls() -> dict[str, dict[str, int]]:
    """What the kernels counted of their own calls: {"ws1_ascend::<op>": {"npu": n}}."""
    return json.loads(torch.ops.ws1_ascend.calls())
