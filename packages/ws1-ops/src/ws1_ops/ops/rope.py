"""rope: rotary position embedding (rotate-half convention), cos/sin from each token's own position.

Shapes: x [T, n_heads, D] BF16, positions [T] int64 -> [T, n_heads, D] BF16.
cos/sin are computed in the kernel from (position, i) alone — never from a table whose layout
follows the batch — so a token's rotation is the same in prefill, chunked prefill and decode.
The backward is the inverse rotation (the transpose), per row.
"""

from __future__ import annotations

import torch

from ..errors import check, check_float, check_rank, value_checks
from ._common import backward, start

OP = "rope"


class RoPE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, positions, theta):
        k = start(OP, x, positions)
        ctx.k, ctx.theta = k, theta
        ctx.save_for_backward(positions)
        return k.fwd(x, positions, theta)

    @staticmethod
    def backward(ctx, dy):
        (positions,) = ctx.saved_tensors
        return backward(ctx.k, dy.contiguous(), positions, ctx.theta), None, None


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 1e6) -> torch.Tensor:
    """Rotate q or k. x [T, n_heads, D] BF16 (D even), positions [T] int64 >= 0 -> same shape, BF16."""
    check_float(x, OP, "x", ("bfloat16",))
    check_rank(x, 3, OP, "x", "[T, n_heads, D]")
    check(x.shape[2] % 2 == 0, OP, f"head_dim must be even, got {x.shape[2]}")
    check(
        isinstance(positions, torch.Tensor) and positions.dtype == torch.int64, OP, "positions must be an int64 tensor"
    )
    check(positions.shape == (x.shape[0],), OP, f"positions must be [{x.shape[0]}], got {tuple(positions.shape)}")
    if positions.numel() and value_checks(positions):  # a host sync on a device: see ws1_ops.trusted_inputs
        check(int(positions.min()) >= 0, OP, "positions must be >= 0")
    return RoPE.apply(x.contiguous(), positions.contiguous(), float(theta))
