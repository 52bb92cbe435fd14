"""WS1 chain nodes: batch-invariant ops with canonical backward.

    import ws1_ops
    with ws1_ops.use_profile("cpu_bf16"), ws1_ops.record() as rec:
        y = ws1_ops.det_gemm(x, w)            # x [M, K] BF16, w [N, K] -> [M, N] BF16
    rec.summary()                             # {'det_gemm': {'kernel_ids': ['ws1_cpu::det_gemm'], ...}}

Each op lives in ``ws1_ops.ops.<node>``; its FP32 reference, with the same name and arguments,
in :mod:`ws1_ops.reference`. The kernels come from the active profile's family (``cpu``,
``triton``, ``cuda``, ``ascend``); a missing kernel package is an error, never a fallback.
"""

from . import reference
from .canonical import canonical_order, expand_rows, logical_keys
from .errors import OpInputError
from .grads import CanonicalGrads, canonical_grads
from .ops.attention import attention
from .ops.batch_invariant_logp import batch_invariant_logp
from .ops.det_gemm import det_gemm
from .ops.embedding import embedding
from .ops.lm_head import lm_head
from .ops.logprob import logprob
from .ops.pack import cu_seqlens_from_lengths, pack, padded_segments, unpack
from .ops.qk_norm import qk_norm
from .ops.rms_norm import rms_norm
from .ops.rope import rope
from .ops.silu import silu
from .ops.swiglu import swiglu
from .registry import (
    Kernel,
    KernelUnavailable,
    NoProfile,
    Recorder,
    active,
    family_available,
    kernels_for,
    record,
    use_candidate,
    use_profile,
)


def __getattr__(name: str):
    # derived from the manifest's node table (read on first use), never written out here
    if name == "REQUIRED_NODES":
        from ws1_contract.manifest import load_manifest

        value = tuple(load_manifest().required_nodes)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "REQUIRED_NODES", "CanonicalGrads", "canonical_grads",
    "Kernel", "KernelUnavailable", "NoProfile", "OpInputError", "Recorder", "active", "attention",
    "batch_invariant_logp", "canonical_order", "cu_seqlens_from_lengths", "det_gemm", "embedding", "expand_rows",
    "family_available", "kernels_for", "lm_head", "logical_keys", "logprob", "pack", "padded_segments", "qk_norm", "record", "reference",
    "rms_norm", "rope", "silu", "swiglu", "unpack", "use_candidate", "use_profile",
]
