"""triton family: the Triton kernels of ws1_ops.triton (profile ``triton_cuda_bf16``).

Importing this module imports ``triton``; if it is missing the import fails and the registry
refuses the profile with the reason (no fallback). The kernels run on CUDA tensors; CPU tensors
are accepted only under ``TRITON_INTERPRET=1`` (the interpreter unit tests), and no gate
activates this family on a host without a GPU (``use_profile`` resolves the device first).

Same function names and signatures as the cpu backend; the manifest's kernel ids
(``ws1_ops.triton.<node>:<node>_fwd_kernel``) must be among the kernels each node launches.
"""

from __future__ import annotations

import triton  # noqa: F401  (a missing triton must fail here, at family load)

from ..registry import Impl
from ..triton import attention as _attention
from ..triton import batch_invariant_logp as _bilp
from ..triton import det_gemm as _det_gemm
from ..triton import embedding as _embedding
from ..triton import lm_head as _lm_head
from ..triton import logprob as _logprob
from ..triton import qk_norm as _qk_norm
from ..triton import rms_norm as _rms_norm
from ..triton import rope as _rope
from ..triton import silu as _silu
from ..triton import swiglu as _swiglu
from ..triton._common import INTERPRET, counted, launches

FAMILY = "triton"


# node: (forward, backward, param_grad) — the launchers; signatures as ws1_ops.backends.cpu
_TABLE = {
    "embedding": (_embedding.embedding, None, _embedding.embedding_dw),
    "rms_norm": (_rms_norm.rms_norm, _rms_norm.rms_norm_bwd, _rms_norm.rms_dw),
    "qk_norm": (_qk_norm.qk_norm, _qk_norm.qk_norm_bwd, _qk_norm.qk_dw),
    "det_gemm": (_det_gemm.det_gemm, _det_gemm.gemm_dx, _det_gemm.gemm_dw),
    "lm_head": (_lm_head.lm_head, _det_gemm.gemm_dx, _det_gemm.gemm_dw),
    "rope": (_rope.rope, _rope.rope_bwd, None),
    "attention": (_attention.attention, _attention.attention_bwd, None),
    "swiglu": (_swiglu.swiglu, _swiglu.swiglu_bwd, None),
    "silu": (_silu.silu, _silu.silu_bwd, None),
    "logprob": (_logprob.logprob, _logprob.logprob_bwd, None),
    "batch_invariant_logp": (_bilp.batch_invariant_logp, _bilp.batch_invariant_logp_bwd, None),
}
MODULES = {
    "embedding": _embedding,
    "rms_norm": _rms_norm,
    "qk_norm": _qk_norm,
    "det_gemm": _det_gemm,
    "lm_head": _lm_head,
    "rope": _rope,
    "attention": _attention,
    "swiglu": _swiglu,
    "silu": _silu,
    "logprob": _logprob,
    "batch_invariant_logp": _bilp,
}

# the modules whose kernels a node's launchers launch besides its own (shared dW / dx launchers)
_ALSO = {"qk_norm": (_rms_norm,), "lm_head": (_det_gemm,), "batch_invariant_logp": (_logprob,)}


def _runs(node: str) -> tuple[str, ...]:
    mods = (MODULES[node], *_ALSO.get(node, ()))
    return tuple(sorted({v.kernel_id for m in mods for v in vars(m).values() if isinstance(v, counted)}))


COUNTER = launches  # every launched kernel counts its own launches (triton._common.counted)
KERNELS = {node: Impl(fwd, bwd, pg, runs=_runs(node)) for node, (fwd, bwd, pg) in _TABLE.items()}

__all__ = ["COUNTER", "FAMILY", "INTERPRET", "KERNELS", "MODULES"]
