"""WS1 chain nodes: batch-invariant ops with canonical backward.

    import ws1_ops
    with ws1_ops.use_profile("cpu_bf16"), ws1_ops.record() as rec:
        y = ws1_ops.det_gemm(x, w)            # x [M, K] BF16, w [N, K] -> [M, N] BF16
    rec.summary()                             # {'det_gemm': {'kernel_ids': ['ws1_cpu::det_gemm'], ...}}

Each node of the manifest's node table (``REQUIRED_NODES``) is ``ws1_ops.<node>``, the public function
of ``ws1_ops/ops/<node>.py``; its FP32 reference, with the same name and arguments, is in
:mod:`ws1_ops.reference`. The kernels come from the active profile's family (``cpu``, ``triton``,
``cuda``, ``ascend``); a missing kernel package is an error, never a fallback.

The manifest declares the node set; the imports below make each node a real attribute that editors
and type checkers follow, and ``ci/tests/test_public_api.py`` fails when the two disagree.
"""

from ws1_contract.manifest import load_manifest as _load_manifest

from . import reference
from .candidates import candidate_names, use_candidate
from .canonical import canonical_order, expand_rows, logical_keys
from .errors import OpInputError, graph_safe, trusted_inputs
from .grads import TREE_CHUNK, CanonicalGrads, canonical_grads, combine, is_tied, tie, tree_sum
from .ops._common import cast_once
from .ops.attention import attention, attention_bwd_partial, attention_lse
from .ops.batch_invariant_logp import batch_invariant_logp
from .ops.det_gemm import det_gemm, det_gemm_partial
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
    activate,
    active,
    family_available,
    in_force,
    kernels_for,
    record,
    use_profile,
)

# the chain's nodes, in the manifest's order (contracts/ws1_manifest.json's node table)
REQUIRED_NODES: tuple[str, ...] = tuple(_load_manifest().required_nodes)

__all__ = [
    # the chain nodes (one module each under ws1_ops/ops/)
    "attention",
    "batch_invariant_logp",
    "det_gemm",
    "embedding",
    "lm_head",
    "logprob",
    "qk_norm",
    "rms_norm",
    "rope",
    "silu",
    "swiglu",
    "REQUIRED_NODES",
    # kernel selection and the runtime record
    "Kernel",
    "KernelUnavailable",
    "NoProfile",
    "Recorder",
    "activate",
    "active",
    "candidate_names",
    "family_available",
    "in_force",
    "kernels_for",
    "record",
    "use_candidate",
    "use_profile",
    # canonical row order and gradients
    "CanonicalGrads",
    "TREE_CHUNK",
    "canonical_grads",
    "canonical_order",
    "combine",
    "expand_rows",
    "is_tied",
    "logical_keys",
    "tie",
    "tree_sum",
    # chunk partials of the parallel-invariant order (docs/parallel.md)
    "attention_bwd_partial",
    "attention_lse",
    "det_gemm_partial",
    # inputs: checks, casts, packing
    "OpInputError",
    "cast_once",
    "cu_seqlens_from_lengths",
    "graph_safe",
    "pack",
    "padded_segments",
    "trusted_inputs",
    "unpack",
    # the FP32 reference of every node
    "reference",
]
