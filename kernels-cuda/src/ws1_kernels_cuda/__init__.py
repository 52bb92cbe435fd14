"""WS1 cuda_bf16 kernels. Importing this module registers ``torch.ops.ws1_cuda.*``.

Fails closed: without the compiled library (``_C``, built by ``pip install --no-build-isolation -e
kernels-cuda`` against a CUDA torch) the import raises ImportError naming the fix — there is no
fallback to any other family's kernels. Use the ops through ``ws1_ops`` (which records what ran);
calling the raw ops is for tests and benchmarks.
"""

import torch  # noqa: F401  (the extension links against libtorch)

try:
    from . import _C  # noqa: F401  registers torch.ops.ws1_cuda
except ImportError as exc:
    raise ImportError(
        "ws1_kernels_cuda: the compiled library ws1_kernels_cuda._C is not built or does not load "
        f"({exc}); build it against a CUDA torch: pip install --no-build-isolation --no-deps -e kernels-cuda "
        "(here: bash ci/setup_cuda_build.sh)"
    ) from exc

FAMILY = "cuda"
NAMESPACE = "ws1_cuda"
ARCHS = ("sm_80", "sm_90a")  # the -gencode list of setup.py; no PTX for others
