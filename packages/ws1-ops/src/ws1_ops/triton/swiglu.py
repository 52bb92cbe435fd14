"""swiglu on Triton: y = silu(gate) * up in FP32, rounded once to BF16 (the Qwen3 MLP activation).

Shapes: gate, up [..., F] BF16 -> y [..., F] BF16. Backward: (dgate, dup) FP32.

Elementwise over the flat tensor, BLOCK elements per program: every element runs the same
instruction sequence wherever it sits, so no layout can change a bit. The arithmetic lives in
:func:`swiglu_math` / :func:`swiglu_grad_math`, shared with silu (which passes up = 1.0: x * 1.0
is exact), so silu(x) == swiglu(x, ones) bitwise. The divide is IEEE (``div_rn``). Compiled without
FP contraction (``_common.FP_FUSION``): the only FMA is the one written, ``tl.fma`` in the backward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check_device, counted, rne_bf16

BLOCK = 1024


@triton.jit
def swiglu_math(g, u):
    """(g * sigmoid(g)) * u, sigmoid = 1 / (1 + exp(-g)), all FP32."""
    sig = tl.div_rn(1.0, 1.0 + tl.exp(-g))
    return (g * sig) * u


@triton.jit
def swiglu_grad_math(dy, g, u):
    """dgate = (dy * u) * (sig * (1 + g * (1 - sig))), dup = dy * (g * sig)."""
    sig = tl.div_rn(1.0, 1.0 + tl.exp(-g))
    s = g * sig
    inner = tl.fma(g, 1.0 - sig, 1.0)
    return (dy * u) * (sig * inner), dy * s


@counted
@triton.jit(do_not_specialize=["n"])
def swiglu_fwd_kernel(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    g = tl.load(g_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, rne_bf16(swiglu_math(g, u)), mask=ok)


@counted
@triton.jit(do_not_specialize=["n"])
def swiglu_bwd_kernel(dy_ptr, g_ptr, u_ptr, dg_ptr, du_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    dy = tl.load(dy_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    dg, du = swiglu_grad_math(dy, g, u)
    tl.store(dg_ptr + offs, dg, mask=ok)
    tl.store(du_ptr + offs, du, mask=ok)


def check_same(op: str, *ts: torch.Tensor) -> None:
    check_device(op, *ts)
    if any(t.shape != ts[0].shape for t in ts):
        raise ValueError(f"triton {op}: tensors must have one shape, got {[tuple(t.shape) for t in ts]}")


def swiglu(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    check_same("swiglu", g, u)
    g, u = g.contiguous(), u.contiguous()
    y = torch.empty(g.shape, dtype=torch.bfloat16, device=g.device)
    if g.numel():
        swiglu_fwd_kernel[(triton.cdiv(g.numel(), BLOCK),)](g, u, y, g.numel(), BLOCK=BLOCK, num_warps=4)
    return y


def swiglu_bwd(dy: torch.Tensor, g: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_same("swiglu_bwd", dy, g, u)
    dy, g, u = dy.contiguous(), g.contiguous(), u.contiguous()
    dg = torch.empty(g.shape, dtype=torch.float32, device=g.device)
    du = torch.empty(g.shape, dtype=torch.float32, device=g.device)
    if g.numel():
        swiglu_bwd_kernel[(triton.cdiv(g.numel(), BLOCK),)](dy, g, u, dg, du, g.numel(), BLOCK=BLOCK, num_warps=4)
    return dg, du
