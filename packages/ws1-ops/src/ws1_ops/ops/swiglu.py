"""swiglu: y = silu(gate) * up in FP32, rounded to BF16 once (the Qwen3 MLP's activation).

Shapes: gate, up [..., F] BF16 -> [..., F] BF16. The kernel shares one code path with silu, so
silu(x) == swiglu(x, ones) bitwise (x * 1.0f is exact).
"""

from __future__ import annotations

import torch

from ..errors import check, check_float
from ._common import backward, start


class SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        k = start("swiglu", gate, up)
        ctx.k = k
        ctx.save_for_backward(gate, up)
        return k.fwd(gate, up)

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        dg, du = backward(ctx.k, dy.contiguous(), gate, up)
        return dg, du


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up. gate, up [..., F] BF16 of one shape -> same shape, BF16."""
    check_float(gate, "swiglu", "gate", ("bfloat16",))
    check_float(up, "swiglu", "up", ("bfloat16",))
    check(
        gate.shape == up.shape,
        "swiglu",
        f"gate and up must have one shape, got {tuple(gate.shape)} and {tuple(up.shape)}",
    )
    return SwiGLU.apply(gate.contiguous(), up.contiguous())
