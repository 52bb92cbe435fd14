"""cuda family: the CUDA C++ kernels of ws1-kernels-cuda (torch.ops.ws1_cuda.*), profile ``cuda_bf16``.

Importing this module imports ws1_kernels_cuda; if that package is missing or its library is not built,
the import fails and the registry refuses the cuda_bf16 profile with the reason (no fallback). On a host
without a CUDA device ``use_profile("cuda_bf16")`` is refused before this module is even imported, so
every cuda_bf16 cell there is red "not executed on this host".

The signatures are backends/cpu.py's, node for node; the raw ops are kernels-cuda's (kernels-cuda/README.md).
"""

from __future__ import annotations

import json

import torch

import ws1_kernels_cuda  # noqa: F401  registers torch.ops.ws1_cuda

from ..canonical import is_identity
from ..registry import Impl

FAMILY = "cuda"
K = torch.ops.ws1_cuda

if not hasattr(K, "calls"):
    # without the self-report the gates could only trust the Python labels: refuse the family
    raise ImportError(
        "the installed ws1_kernels_cuda lacks ws1_cuda::calls (the kernels' self-report); rebuild it: "
        "pip install --no-build-isolation --no-deps -e kernels-cuda"
    )


def COUNTER() -> dict[str, dict[str, int]]:  # noqa: N802  (the backend shape's name)
    """What the CUDA entry points counted of their own calls since load: {"ws1_cuda::<op>": {"sm_90": calls}}."""
    return json.loads(K.calls())


def _on(data: torch.Tensor, *index: torch.Tensor) -> list[torch.Tensor]:
    """Index tensors (ids, positions, cu_seqlens, row orders) on the data's device, contiguous: a row order
    or cu_seqlens built on the host is a valid input (the CUDA entry points themselves refuse a CPU tensor)."""
    return [t.to(data.device).contiguous() for t in index]


def _rows(t, perm):
    """t's rows in canonical order (``perm`` on t's device): t itself when ``perm`` is the identity (the
    same values, order and layout, so the same bits; an lm_head dy is [T, V] FP32, its gather gigabytes)."""
    if is_identity(perm, t.shape[0]):
        return t.contiguous()
    (perm,) = _on(t, perm)
    return t.index_select(0, perm).contiguous()


def _gemm_dx(dy, x, w):
    # dx[m, k] = sum_n dy[m, n] w[n, k]: one serial FP32 FMA chain per output (b = w.T as a strided view)
    return K.gemm(dy, w.t(), True)


def _gemm_dw(dy, x, perm):
    # dw[n, k] = sum_m dy[m, n] x[m, k], serially over the rows in canonical order (padding dropped)
    return K.gemm(_rows(dy, perm).t(), _rows(x, perm).t(), True)


def _rms_dw(dy, x, rstd, w, perm):
    return K.rms_norm_bwd(_rows(dy, perm), _rows(x, perm), w, _rows(rstd, perm))[1]


def _qk_dw(dy, x, rstd, w, perm):
    # rows are (token, head) pairs [R, D]: the qk_norm kernel on [R, 1, D]
    dy, x, rstd = _rows(dy, perm), _rows(x, perm), _rows(rstd, perm)
    return K.qk_norm_bwd(dy[:, None].contiguous(), x[:, None].contiguous(), w, rstd[:, None].contiguous())[1]


def _emb_dw(dy, ids, V, perm):
    (ids,) = _on(dy, ids)
    return K.embedding_bwd(_rows(dy, perm), _rows(ids, perm), V)


def _emb_fwd(ids, weight):
    return K.embedding(*_on(weight, ids), weight)


def _op(name):
    """torch.ops.ws1_cuda.<name>, or None when this build lacks it (the node is then missing, red)."""
    return getattr(K, name) if hasattr(K, name) else None


def _rope_fwd(x, pos, theta):
    return K.rope(x, *_on(x, pos), theta, False)


def _rope_bwd(dy, pos, theta):
    return K.rope(dy.float(), *_on(dy, pos), theta, True)  # the inverse rotation, FP32 out


def _attn_fwd(q, k, v, cu_q, cu_k, q_pos, scale):
    return K.attention(q, k, v, *_on(q, cu_q, cu_k, q_pos), scale)


def _attn_bwd(dout, q, k, v, out, lse, cu_q, cu_k, q_pos, scale):
    return K.attention_bwd(dout, q, k, v, out, lse, *_on(q, cu_q, cu_k, q_pos), scale)


def _logprob_fwd(logits, targets):
    return K.logprob(logits, *_on(logits, targets))


def _logprob_bwd(g, logits, lse, targets):
    return K.logprob_bwd(g, logits, lse, *_on(logits, targets))


def _impl(fwd, bwd, raw: tuple[str, ...], param_grad=None) -> Impl:
    """A node's kernel from the raw torch.ops.ws1_cuda ops it runs; a build lacking one marks the node missing."""
    return Impl(
        fwd,
        bwd,
        param_grad,
        runs=tuple(f"ws1_cuda::{r}" for r in raw),
        missing=tuple(r for r in raw if not hasattr(K, r)),
    )


KERNELS = {
    "embedding": _impl(_emb_fwd, None, ("embedding", "embedding_bwd"), _emb_dw),
    "rms_norm": _impl(_op("rms_norm"), _op("rms_norm_bwd"), ("rms_norm", "rms_norm_bwd"), _rms_dw),
    "qk_norm": _impl(_op("qk_norm"), _op("qk_norm_bwd"), ("qk_norm", "qk_norm_bwd"), _qk_dw),
    "det_gemm": _impl(_op("det_gemm"), _gemm_dx, ("det_gemm", "gemm"), _gemm_dw),
    "lm_head": _impl(_op("lm_head"), _gemm_dx, ("lm_head", "gemm"), _gemm_dw),
    "rope": _impl(_rope_fwd, _rope_bwd, ("rope",)),
    "attention": _impl(_attn_fwd, _attn_bwd, ("attention", "attention_bwd")),
    "swiglu": _impl(_op("swiglu"), _op("swiglu_bwd"), ("swiglu", "swiglu_bwd")),
    "silu": _impl(_op("silu"), _op("silu_bwd"), ("silu", "silu_bwd")),
    "logprob": _impl(_logprob_fwd, _logprob_bwd, ("logprob", "logprob_bwd")),
    "batch_invariant_logp": _impl(
        _op("batch_invariant_logp"),
        _op("batch_invariant_logp_bwd"),
        ("batch_invariant_logp", "batch_invariant_logp_bwd"),
    ),
}
