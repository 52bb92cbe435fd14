"""silu: y = x * sigmoid(x) in FP32, rounded to BF16 once.

Shapes: x [..., F] BF16 -> [..., F] BF16. Its own entry point (the node reports its own kernel)
over swiglu's code path with the up operand fixed at 1.0, so silu(x) == swiglu(x, ones) bitwise.
"""

from __future__ import annotations

import torch

from ..errors import check_float
from ._common import backward, start


class SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        k = start("silu", x)
        ctx.k = k
        ctx.save_for_backward(x)
        return k.fwd(x)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return backward(ctx.k, dy.contiguous(), x)


def silu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x). x [..., F] BF16 -> same shape, BF16; bitwise equal to swiglu(x, ones)."""
    check_float(x, "silu", "x", ("bfloat16",))
    return SiLU.apply(x.contiguous())
