"""WS1 cpu_bf16 kernels. Importing this module registers ``torch.ops.ws1_cpu.*``.

Use through ``ws1_ops`` (which records what ran); calling the raw ops is for tests and benchmarks.
"""

import torch  # noqa: F401  (the extension links against libtorch)

from . import _C  # noqa: F401  registers torch.ops.ws1_cpu

FAMILY = "cpu"
NAMESPACE = "ws1_cpu"


def isa() -> str:
    """The ISA path the kernels dispatch to on this host (default: ``avx512``, ``avx2`` or ``scalar``).

    ``WS1_CPU_ISA=scalar|avx2|avx512|avx512bf16|amx`` forces a path (an unsupported request raises);
    ``avx512bf16`` runs the GEMM's bf16 products on VDPBF16PS, with the same bits as every path;
    ``amx`` runs det_gemm / lm_head on AMX tiles, batch-invariant but with bits of its own."""
    return torch.ops.ws1_cpu.isa()
