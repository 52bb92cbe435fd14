"""rms_norm: y = x / sqrt(mean(x^2) + eps) * weight, per row; dweight in canonical row order.

Shapes: x [T, H] (FP32 residual stream or BF16), weight [H] -> y [T, H] BF16.
The row's sum of squares uses fixed lanes (h mod 16) and a fixed combine tree, so a row's bits do
not depend on the other rows; dweight[h] sums rows serially in canonical order.
"""

from __future__ import annotations

import torch

from .. import grads
from ..canonical import canonical_order
from ..errors import check, check_float, check_rank
from ._common import backward, exec_dtype, param_grad, start

OP = "rms_norm"


class RMSNorm(torch.autograd.Function):
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
        dy = dy.contiguous()
        dx, _ = backward(ctx.k, dy, x, w, rstd)              # per row
        if not ctx.needs_input_grad[1]:
            return dx, None, None, None
        scope = grads.current()
        if scope is not None:
            scope.stash(ctx.weight, ctx.k, row_keys, dy, x, rstd, extra=(w,))
            return dx, None, None, None
        return dx, param_grad(ctx.k, dy, x, rstd, w, canonical_order(row_keys, x.shape[0], OP)), None, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, row_keys: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm over the last axis. x [T, H] FP32 or BF16, weight [H] -> [T, H] BF16."""
    check_float(x, OP, "x")
    check_rank(x, 2, OP, "x", "[T, H]")
    check_float(weight, OP, "weight")
    check(weight.shape == (x.shape[1],), OP, f"weight must be [{x.shape[1]}], got {tuple(weight.shape)}")
    check(eps > 0, OP, f"eps must be > 0, got {eps}")
    return RMSNorm.apply(x.contiguous(), weight, float(eps), row_keys)
