"""qk_norm: per-head RMSNorm of q or k over head_dim (Qwen3 normalizes q and k before RoPE).

Shapes: x [T, n_heads, D] BF16, weight [D] -> [T, n_heads, D] BF16. Its own entry point (a node
reports its own kernel), the same arithmetic as rms_norm on [T * n_heads, D] rows.
"""

from __future__ import annotations

import torch

from .. import grads
from ..canonical import canonical_order, expand_rows
from ..errors import check, check_float, check_rank
from ._common import backward, exec_dtype, param_grad, start

OP = "qk_norm"


class QKNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, row_keys):
        w = exec_dtype(weight)
        k = start(OP, x, w)
        y, rstd = k.fwd(x, w, eps)
        ctx.k, ctx.weight = k, weight
        ctx.save_for_backward(x, w, rstd, row_keys)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd, row_keys = ctx.saved_tensors
        T, nh, D = x.shape
        dy = dy.contiguous()
        dx, _ = backward(ctx.k, dy, x, w, rstd)              # per (token, head) row
        if not ctx.needs_input_grad[1]:
            return dx, None, None, None
        # dweight rows = (token in canonical order, head ascending); rstd is [T, n_heads]
        rows = (dy.reshape(T * nh, D), x.reshape(T * nh, D), rstd.reshape(T * nh))
        scope = grads.current()
        if scope is not None:
            scope.stash(ctx.weight, ctx.k, row_keys, *rows, inner=nh, extra=(w,))
            return dx, None, None, None
        perm = expand_rows(canonical_order(row_keys, T, OP), nh)
        return dx, param_grad(ctx.k, *rows, w, perm), None, None


def qk_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, row_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head RMSNorm. x [T, n_heads, D] BF16, weight [D] -> [T, n_heads, D] BF16.

    Gradient order: tokens in canonical order, heads ascending within a token."""
    check_float(x, OP, "x", ("bfloat16",))
    check_rank(x, 3, OP, "x", "[T, n_heads, D]")
    check_float(weight, OP, "weight")
    check(weight.shape == (x.shape[2],), OP, f"weight must be [{x.shape[2]}], got {tuple(weight.shape)}")
    return QKNorm.apply(x.contiguous(), weight, float(eps), row_keys)

