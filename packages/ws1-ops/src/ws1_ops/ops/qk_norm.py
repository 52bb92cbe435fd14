"""qk_norm: per-head RMSNorm of q or k over head_dim (Qwen3 normalizes q and k before RoPE).

Shapes: x [T, n_heads, D] BF16, weight [D] -> [T, n_heads, D] BF16. Its own entry point (a node
reports its own kernel), the same arithmetic as rms_norm on [T * n_heads, D] rows.
"""

from __future__ import annotations

import torch

from ..canonical import canonical_order, expand_rows
from ..errors import check, check_float, check_rank
from ._common import backward, exec_dtype, start

OP = "qk_norm"


class QKNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, row_keys):
        w = exec_dtype(weight)
        k = start(OP, x, w)
        y, rstd = k.fwd(x, w, eps)
        ctx.k = k
        ctx.save_for_backward(x, w, rstd, row_keys)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd, row_keys = ctx.saved_tensors
        T, nh, D = x.shape
        perm = canonical_order(row_keys, T)
        # rows = (token in canonical order, head ascending); rstd is [T, n_heads]
        dxp, dw = backward(ctx.k, dy.index_select(0, perm).contiguous(), x.index_select(0, perm), w,
                           rstd.reshape(T, nh).index_select(0, perm).contiguous())
        dx = torch.zeros(x.shape, dtype=dxp.dtype)
        dx.index_copy_(0, perm, dxp.reshape(-1, nh, D))
        return dx, dw, None, None


def qk_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, row_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head RMSNorm. x [T, n_heads, D] BF16, weight [D] -> [T, n_heads, D] BF16.

    Gradient order: tokens in canonical order, heads ascending within a token."""
    check_float(x, OP, "x", ("bfloat16",))
    check_rank(x, 3, OP, "x", "[T, n_heads, D]")
    check_float(weight, OP, "weight")
    check(weight.shape == (x.shape[2],), OP, f"weight must be [{x.shape[2]}], got {tuple(weight.shape)}")
    return QKNorm.apply(x.contiguous(), weight, float(eps), row_keys)


__all__ = ["qk_norm", "expand_rows"]
