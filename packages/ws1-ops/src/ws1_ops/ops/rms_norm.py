"""rms_norm: y = x / sqrt(mean(x^2) + eps) * weight, per row; dweight in canonical row order.

Shapes: x [T, H] (FP32 residual stream or BF16), weight [H] -> y [T, H] BF16.
The row's sum of squares uses fixed lanes (h mod 16) and a fixed combine tree, so a row's bits do
not depend on the other rows; dweight[h] sums rows serially in canonical order.

:class:`RowNorm` is the one autograd Function of both norm nodes: ``qk_norm`` is the same arithmetic
on [T, n_heads, D] (its rows are (token, head) pairs), with its own entry point and kernel id.
"""

from __future__ import annotations

import torch

from .. import grads
from ..canonical import canonical_order, expand_rows
from ..errors import check, check_float, check_rank
from ._common import backward, exec_dtype, param_grad, start

OP = "rms_norm"


class RowNorm(torch.autograd.Function):
    """RMSNorm over the last axis of x [T, ..., D] for node ``op`` (rms_norm: x [T, D]; qk_norm:
    x [T, n_heads, D]). dx per row; dweight over rows (token in canonical order, then the inner
    axis ascending), through canonical_grads() when it is active."""

    @staticmethod
    def forward(ctx, op, x, weight, eps, row_keys):
        w = exec_dtype(weight)
        k = start(op, x, w)
        y, rstd = k.fwd(x, w, eps)
        ctx.op, ctx.k, ctx.weight = op, k, weight
        ctx.save_for_backward(x, w, rstd, row_keys)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd, row_keys = ctx.saved_tensors
        dy = dy.contiguous()
        dx, _ = backward(ctx.k, dy, x, w, rstd)  # per row
        if not ctx.needs_input_grad[2]:
            return None, dx, None, None, None
        T, D = x.shape[0], x.shape[-1]
        inner = x.numel() // max(T * D, 1) if x.numel() else 1  # 1 for rms_norm, n_heads for qk_norm
        # dweight rows = (token in canonical order, inner index ascending); rstd is [T] or [T, n_heads]
        rows = (dy.reshape(T * inner, D), x.reshape(T * inner, D), rstd.reshape(T * inner))
        scope = grads.current()
        if scope is not None:
            # the kernel takes the weight for its dx half (dweight does not read it): a copy ([H] or [D]), as the
            # weight's own storage may be gone when the scope exits (FSDP2 frees unsharded parameters after backward)
            scope.stash(ctx.weight, ctx.k, row_keys, *rows, inner=inner, extra=(w.detach().clone(),))
            return None, dx, None, None, None
        perm = expand_rows(canonical_order(row_keys, T, ctx.op), inner)
        return None, dx, param_grad(ctx.k, *rows, w, perm), None, None


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, row_keys: torch.Tensor | None = None
) -> torch.Tensor:
    """RMSNorm over the last axis. x [T, H] FP32 or BF16, weight [H] -> [T, H] BF16."""
    check_float(x, OP, "x")
    check_rank(x, 2, OP, "x", "[T, H]")
    check_float(weight, OP, "weight")
    check(weight.shape == (x.shape[1],), OP, f"weight must be [{x.shape[1]}], got {tuple(weight.shape)}")
    check(eps > 0, OP, f"eps must be > 0, got {eps}")
    return RowNorm.apply(OP, x.contiguous(), weight, float(eps), row_keys)
