"""silu on Triton: y = x * sigmoid(x) in FP32, rounded once to BF16 — swiglu's code path with up = 1.0.

Shapes: x [..., F] BF16 -> y [..., F] BF16. Backward: dx FP32.

Its own entry point (the node reports its own kernel) over :func:`~ws1_ops.triton.swiglu.swiglu_math`
with the up operand fixed at 1.0: (x * sig) * 1.0 is exact, so silu(x) == swiglu(x, ones) bitwise,
and the backward is swiglu's dgate at up = 1.0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import counted, rne_bf16
from .swiglu import BLOCK, check_same, swiglu_grad_math, swiglu_math


@counted
@triton.jit(do_not_specialize=["n"])
def silu_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, rne_bf16(swiglu_math(x, 1.0)), mask=ok)


@counted
@triton.jit(do_not_specialize=["n"])
def silu_bwd_kernel(dy_ptr, x_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    dy = tl.load(dy_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    dx, _ = swiglu_grad_math(dy, x, 1.0)
    tl.store(dx_ptr + offs, dx, mask=ok)


def silu(x: torch.Tensor) -> torch.Tensor:
    check_same("silu", x)
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    if x.numel():
        silu_fwd_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK, num_warps=4)
    return y


def silu_bwd(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    check_same("silu_bwd", dy, x)
    dy, x = dy.contiguous(), x.contiguous()
    dx = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    if x.numel():
        silu_bwd_kernel[(triton.cdiv(x.numel(), BLOCK),)](dy, x, dx, x.numel(), BLOCK=BLOCK, num_warps=4)
    return dx
