"""qk_norm on Triton: per-head RMSNorm of q or k over head_dim — rms_norm's arithmetic per (token, head).

Shapes: x [T, n_heads, D] BF16, weight [D] -> y [T, n_heads, D] BF16, rstd [T, n_heads] FP32.
Backward: dx FP32 per (token, head); dweight [D] FP32 over the (token, head) rows in canonical
order (tokens canonical, heads ascending: the caller's ``perm``).

Invariance: one program per token holds all of its heads as the rows of a [heads, D] tile; each
head's row is reduced along D alone (the shared :func:`~ws1_ops.triton.rms_norm.norm_fwd_rows`),
and a head always sits at the same row of its token's tile, so no other token can matter.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check_device, counted, next_pow2, rne_bf16
from .rms_norm import norm_bwd_rows, norm_dw, norm_fwd_rows


@counted
@triton.jit(do_not_specialize=["T"])
def qk_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, T, NH, D, Df, eps, BLOCK_NH: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_NH)
    d = tl.arange(0, BLOCK_D)
    ok = (h < NH)[:, None] & (d < D)[None, :]
    offs = t * NH * D + h[:, None] * D + d[None, :]
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + d, mask=d < D, other=0.0).to(tl.float32)
    y, rstd = norm_fwd_rows(x, w, Df, eps)
    tl.store(y_ptr + offs, rne_bf16(y), mask=ok)
    tl.store(rstd_ptr + t * NH + h, rstd, mask=h < NH)


@counted
@triton.jit(do_not_specialize=["T"])
def qk_norm_bwd_kernel(
    dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, T, NH, D, Df, BLOCK_NH: tl.constexpr, BLOCK_D: tl.constexpr
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_NH)
    d = tl.arange(0, BLOCK_D)
    ok = (h < NH)[:, None] & (d < D)[None, :]
    offs = t * NH * D + h[:, None] * D + d[None, :]
    dy = tl.load(dy_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + d, mask=d < D, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + t * NH + h, mask=h < NH, other=0.0)
    tl.store(dx_ptr + offs, norm_bwd_rows(dy, x, w, rstd, Df), mask=ok)


def _shape(op: str, x: torch.Tensor, w: torch.Tensor) -> tuple[int, int, int]:
    check_device(op, x, w)
    if x.dim() != 3 or w.shape != (x.shape[2],):
        raise ValueError(
            f"triton {op}: need x [T, n_heads, D] and weight [D], got {tuple(x.shape)} and {tuple(w.shape)}"
        )
    if not x.is_contiguous():
        raise ValueError(f"triton {op}: x must be contiguous")
    return x.shape


def _launch_args(NH: int, D: int) -> dict:
    return dict(BLOCK_NH=next_pow2(NH), BLOCK_D=next_pow2(D), num_warps=4)


def qk_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, NH, D] BF16, w [D] -> (y [T, NH, D] BF16, rstd [T, NH] FP32)."""
    T, NH, D = _shape("qk_norm", x, w)
    y = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    rstd = torch.empty(T, NH, dtype=torch.float32, device=x.device)
    if T and NH and D:
        qk_norm_fwd_kernel[(T,)](x, w.contiguous(), y, rstd, T, NH, D, float(D), float(eps), **_launch_args(NH, D))
    return y, rstd


def qk_norm_bwd(
    dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx [T, NH, D] FP32, dweight [D] FP32 over the (token, head) rows in the given order)."""
    T, NH, D = _shape("qk_norm_bwd", x, w)
    dy = dy.contiguous()
    dx = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    if T and NH and D:
        qk_norm_bwd_kernel[(T,)](
            dy, x, w.contiguous(), rstd.contiguous(), dx, T, NH, D, float(D), **_launch_args(NH, D)
        )
    return dx, norm_dw(dy, x, rstd, torch.arange(T * NH, device=x.device))


def qk_dw(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """param_grad: rows are (token, head) pairs [R, D] (rstd [R]) in canonical order ``perm``."""
    return norm_dw(dy, x, rstd, perm)
