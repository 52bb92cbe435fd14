"""ascend family: the Ascend C kernels of ws1-kernels-ascend (torch.ops.ws1_ascend.*, Atlas A2/A3 NPU),
profile ``ascend_bf16``.

Importing this module imports ws1_kernels_ascend, which imports torch_npu (and so needs CANN): on a host
without them the import fails with that reason and the registry refuses the profile — a requested backend
never falls back. The CPU emulator build of the same .asc sources (ws1_kernels_ascend_emu, ops
``ws1_ascend_emu``) is NOT this family and is never loaded here: emulated runs are not ascend_bf16 evidence.

Same function names and signatures as backends/cpu.py; the manifest's kernel ids (``ws1_ascend::<node>``) are
the .asc entry points (``extern "C" __global__ __aicore__ void <node>(...)`` in kernels-ascend/csrc/<node>.asc).
A build of the package that lacks one of a node's raw kernels makes that node missing_required (red) —
never served by another family.
"""

from __future__ import annotations

import json
import os

import torch
import ws1_kernels_ascend  # noqa: F401  registers torch.ops.ws1_ascend (imports torch_npu; needs CANN)

from ..registry import Impl

FAMILY = "ascend"
K = torch.ops.ws1_ascend

if not hasattr(K, "calls"):
    raise ImportError(
        "the installed ws1_kernels_ascend lacks ws1_ascend::calls (the kernels' self-report); "
        "rebuild it: bash ci/run_ws1_ascend_ci.sh"
    )


def COUNTER() -> dict[str, dict[str, int]]:  # noqa: N802  (the backend shape's name)
    """What the Ascend kernels counted of their own calls since load: {"ws1_ascend::<op>": {"npu": calls}}."""
    return json.loads(K.calls())


def provenance(index: int = 0) -> dict[str, str]:
    """The NPU these kernels run on: torch_npu's device name (the SoC, e.g. Ascend910B3) and the arch the
    kernels were compiled for (WS1_NPU_ARCH at build time; dav-2201 = Atlas A2/A3 by default)."""
    name = str(torch.npu.get_device_name(index))
    return {
        "npu_name": name,
        "soc": name,
        "npu_arch": os.environ.get("WS1_NPU_ARCH", "dav-2201"),
        "kernel_package": "ws1-kernels-ascend",
    }


def _gemm_dx(dy, x, w):
    # dx[m, k] = sum_n dy[m, n] w[n, k]: the FP32-input Cube GEMM with Bᵀ = wᵀ passed
    return K.gemm(dy, w.t(), True)


def _gemm_dw(dy, x, perm):
    # dw[n, k] = sum over canonically ordered rows m of dy[m, n] x[m, k] (padding rows dropped by perm)
    return K.gemm(dy.index_select(0, perm).t(), x.index_select(0, perm).t(), True)


def _rms_dw(dy, x, rstd, w, perm):
    return K.rms_norm_bwd(
        dy.index_select(0, perm).contiguous(),
        x.index_select(0, perm).contiguous(),
        w,
        rstd.index_select(0, perm).contiguous(),
    )[1]


def _qk_dw(dy, x, rstd, w, perm):
    # rows are (token, head) pairs [R, D]: the qk_norm kernel on [R, 1, D]
    dy, x, rstd = dy.index_select(0, perm), x.index_select(0, perm), rstd.index_select(0, perm)
    return K.qk_norm_bwd(dy[:, None].contiguous(), x[:, None].contiguous(), w, rstd[:, None].contiguous())[1]


def _emb_dw(dy, ids, V, perm):
    return K.embedding_bwd(dy.index_select(0, perm).contiguous(), ids.index_select(0, perm).contiguous(), V)


def _op(name):
    """torch.ops.ws1_ascend.<name>, or None when this build lacks it (the node is then missing, red)."""
    return getattr(K, name) if hasattr(K, name) else None


def _rope_fwd(x, pos, theta):
    return K.rope(x, pos, theta, False)


def _rope_bwd(dy, pos, theta):
    return K.rope(dy.float().contiguous(), pos, theta, True)  # the inverse rotation, FP32 out


def _impl(fwd, bwd, raw: tuple[str, ...], param_grad=None) -> Impl:
    return Impl(
        fwd,
        bwd,
        param_grad,
        runs=tuple(f"ws1_ascend::{r}" for r in raw),
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
