"""cpu family: the C++ kernels of ws1-kernels-cpu (torch.ops.ws1_cpu.*).

Importing this module imports ws1_kernels_cpu; if that package is missing the import fails and
the registry refuses the cpu_bf16 profile with the reason (no fallback).
"""

from __future__ import annotations

import json

import torch

import ws1_kernels_cpu  # noqa: F401  registers torch.ops.ws1_cpu

from ..canonical import is_identity
from ..registry import Impl

FAMILY = "cpu"
K = torch.ops.ws1_cpu

if not hasattr(K, "calls"):
    # without the self-report the gates could only trust the Python labels: refuse the family
    raise ImportError(
        "the installed ws1_kernels_cpu lacks ws1_cpu::calls (the kernels' self-report); "
        "rebuild it: bash ci/setup_cpu.sh"
    )


def COUNTER() -> dict[str, dict[str, int]]:  # noqa: N802  (the backend shape's name)
    """What the C++ kernels counted of their own calls since load: {"ws1_cpu::<op>": {isa path: calls}}."""
    return json.loads(K.calls())


def _rows(t, perm):
    """t's rows in canonical order: t itself when ``perm`` is the identity (the same values in the same
    order and layout, so the same bits; an lm_head dy is [T, V] FP32, its gather a copy of gigabytes)."""
    return t.contiguous() if is_identity(perm, t.shape[0]) else t.index_select(0, perm)


def _gemm_dx(dy, x, w):
    # dx[m, k] = sum_n dy[m, n] w[n, k]: per row, the same serial-FMA GEMM (b = w.T as a strided view)
    return K.gemm(dy, w.t(), True)


def _gemm_dw(dy, x, perm):
    # dw[n, k] = sum_m dy[m, n] x[m, k], serially over the rows in canonical order (padding dropped)
    return K.gemm(_rows(dy, perm).t(), _rows(x, perm).t(), True)


def _rms_dw(dy, x, rstd, w, perm):
    return K.rms_norm_bwd(_rows(dy, perm), _rows(x, perm), w, _rows(rstd, perm))[1]


def _qk_dw(dy, x, rstd, w, perm):
    # rows are (token, head) pairs [R, D]: the qk_norm kernel on [R, 1, D]
    dy, x, rstd = _rows(dy, perm), _rows(x, perm), _rows(rstd, perm)
    return K.qk_norm_bwd(dy[:, None], x[:, None], w, rstd[:, None])[1]


def _emb_dw(dy, ids, V, perm):
    return K.embedding_bwd(_rows(dy, perm), _rows(ids, perm), V)


def _op(name):
    """torch.ops.ws1_cpu.<name>, or None when this build of the kernel package lacks it (the node
    then has no cpu kernel: missing_required, red — never served by another family)."""
    return getattr(K, name) if hasattr(K, name) else None


def _rope_fwd(x, pos, theta):
    return K.rope(x, pos, theta, False)


def _rope_bwd(dy, pos, theta):
    return K.rope(dy.float(), pos, theta, True)  # the inverse rotation, FP32 out


def _impl(fwd, bwd, raw: tuple[str, ...], param_grad=None) -> Impl:
    """A node's kernel from the raw torch.ops.ws1_cpu ops it runs; a build lacking one marks the node missing."""
    return Impl(
        fwd,
        bwd,
        param_grad,
        runs=tuple(f"ws1_cpu::{r}" for r in raw),
        missing=tuple(r for r in raw if not hasattr(K, r)),
    )


KERNELS = {
    "embedding": _impl(_op("embedding"), None, ("embedding", "embedding_bwd"), _emb_dw),
    "rms_norm": _impl(_op("rms_norm"), _op("rms_norm_bwd"), ("rms_norm", "rms_norm_bwd"), _rms_dw),
    "qk_norm": _impl(_op("qk_norm"), _op("qk_norm_bwd"), ("qk_norm", "qk_norm_bwd"), _qk_dw),
    "det_gemm": _impl(_op("det_gemm"), _gemm_dx, ("det_gemm", "gemm"), _gemm_dw),
    "lm_head": _impl(_op("lm_head"), _gemm_dx, ("lm_head", "gemm"), _gemm_dw),
    "rope": _impl(_rope_fwd, _rope_bwd, ("rope",)),
    "attention": _impl(_op("attention"), _op("attention_bwd"), ("attention", "attention_bwd")),
    "swiglu": _impl(_op("swiglu"), _op("swiglu_bwd"), ("swiglu", "swiglu_bwd")),
    "silu": _impl(_op("silu"), _op("silu_bwd"), ("silu", "silu_bwd")),
    "logprob": _impl(_op("logprob"), _op("logprob_bwd"), ("logprob", "logprob_bwd")),
    "batch_invariant_logp": _impl(
        _op("batch_invariant_logp"),
        _op("batch_invariant_logp_bwd"),
        ("batch_invariant_logp", "batch_invariant_logp_bwd"),
    ),
}
