"""rms_norm on Triton: y = (x * rstd) * weight per row, rstd = 1 / sqrt(mean(x^2) + eps).

Shapes: x [T, H] FP32 (residual stream) or BF16, weight [H] BF16 -> y [T, H] BF16, rstd [T] FP32.
Backward: dx [T, H] FP32 per row; dweight [H] FP32 summed over rows in canonical order.

Invariance: one program per token holds the whole row (H <= BLOCK_H) and reduces it with one
fixed tree that depends on BLOCK_H alone — no other row is in the program, so batch size, row
position and padding cannot reach the result. sqrt and the divides are IEEE (``sqrt_rn``,
``div_rn``), y is rounded once to BF16 (RNE). dweight: the rows in canonical order in fixed chunks
of DW_CHUNK = 256 aligned to canonical row 0, each chunk BR rows per step (a fixed tree inside the
step, steps ascending from the chunk's first row, from 0), chunks and columns in parallel; then the
chunk partials added per column in ascending chunk order from 0. A row's chunk is a function of its
canonical index (a fixed tiling of the row axis), never of the row count. (Before: one program per
BC columns walked every row — qk_norm's 128 columns were 4 programs over T * heads rows.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check_device, counted, index_on, next_pow2, rne_bf16

DW_BR, DW_BC, DW_CHUNK = 64, 32, 256  # dweight: canonical rows per step, columns per program, rows per chunk


@triton.jit
def norm_fwd_rows(x, w, Hf, eps):
    """x [R, B] FP32 (masked columns 0), w [B] FP32 -> (y [R, B] FP32 unrounded, rstd [R]).

    The reduction runs along axis 1 only: each row's sum of squares sees that row alone."""
    ss = tl.sum(x * x, 1)
    rstd = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, Hf) + eps))
    y = (x * rstd[:, None]) * w[None, :]
    return y, rstd


@triton.jit
def norm_bwd_rows(dy, x, w, rstd, Hf):
    """dx of one row block: g = dy * w, c = (sum(g * x) / H) * rstd^3, dx = g * rstd - x * c."""
    g = dy * w[None, :]
    s = tl.sum(g * x, 1)
    c = tl.div_rn(s, Hf) * ((rstd * rstd) * rstd)
    return tl.fma(-x, c[:, None], g * rstd[:, None])


@counted
@triton.jit(do_not_specialize=["T"])
def rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, T, H, Hf, eps, BLOCK_H: tl.constexpr):
    """One token per program: y[t] = bf16_rne((x[t] * rstd[t]) * w)."""
    t = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    x = tl.load(x_ptr + t * H + cols, mask=ok, other=0.0).to(tl.float32)[None, :]
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    y, rstd = norm_fwd_rows(x, w, Hf, eps)
    tl.store(y_ptr + t * H + cols[None, :], rne_bf16(y), mask=ok[None, :])
    tl.store(rstd_ptr + t + tl.arange(0, 1), rstd)


@counted
@triton.jit(do_not_specialize=["T"])
def rms_norm_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, T, H, Hf, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    dy = tl.load(dy_ptr + t * H + cols, mask=ok, other=0.0).to(tl.float32)[None, :]
    x = tl.load(x_ptr + t * H + cols, mask=ok, other=0.0).to(tl.float32)[None, :]
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + t + tl.arange(0, 1))
    dx = norm_bwd_rows(dy, x, w, rstd, Hf)
    tl.store(dx_ptr + t * H + cols[None, :], dx, mask=ok[None, :])


@counted
@triton.jit(do_not_specialize=["R"])
def norm_dw_kernel(
    dy_ptr, x_ptr, rstd_ptr, perm_ptr, part_ptr, R, H, BR: tl.constexpr, BC: tl.constexpr, CHUNK: tl.constexpr
):
    """part[c, h] = sum over the canonical rows r of chunk c (CHUNK rows from c * CHUNK) of
    dy[perm[r], h] * (x[perm[r], h] * rstd[perm[r]]): BR rows per step (a fixed tree within the step,
    steps ascending), from 0. One program per (chunk, BC columns)."""
    c = tl.program_id(0)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    c_ok = cols < H
    acc = tl.zeros((BC,), dtype=tl.float32)
    for r0 in range(0, CHUNK, BR):
        r = c * CHUNK + r0 + tl.arange(0, BR)
        r_ok = r < R
        rows = tl.load(perm_ptr + r, mask=r_ok, other=0).to(tl.int64)
        m = r_ok[:, None] & c_ok[None, :]
        dy = tl.load(dy_ptr + rows[:, None] * H + cols[None, :], mask=m, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + rows[:, None] * H + cols[None, :], mask=m, other=0.0).to(tl.float32)
        rs = tl.load(rstd_ptr + rows, mask=r_ok, other=0.0)
        acc += tl.sum(dy * (x * rs[:, None]), 0)
    tl.store(part_ptr + c.to(tl.int64) * H + cols, acc, mask=c_ok)


@counted
@triton.jit(do_not_specialize=["NCH"])
def norm_dw_sum_kernel(part_ptr, dw_ptr, NCH, H, BC: tl.constexpr):
    """dw[h] = sum of part[c, h] over the chunks c ascending, from 0 (no chunk: 0)."""
    cols = tl.program_id(0) * BC + tl.arange(0, BC)
    c_ok = cols < H
    acc = tl.zeros((BC,), dtype=tl.float32)
    for c in range(0, NCH):
        acc += tl.load(part_ptr + c * H + cols, mask=c_ok, other=0.0)  # < 2^31 elements (host check)
    tl.store(dw_ptr + cols, acc, mask=c_ok)


def _rows(op: str, x: torch.Tensor, w: torch.Tensor) -> tuple[int, int]:
    check_device(op, x, w)
    H = x.shape[-1]
    if w.shape != (H,):
        raise ValueError(f"triton {op}: weight must be [{H}], got {tuple(w.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"triton {op}: x must be contiguous")
    return x.numel() // max(H, 1), H


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, H] FP32/BF16, w [H] -> (y [T, H] BF16, rstd [T] FP32)."""
    T, H = _rows("rms_norm", x, w)
    y = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if T and H:
        rms_norm_fwd_kernel[(T,)](
            x,
            w.contiguous(),
            y,
            rstd,
            T,
            H,
            float(H),
            float(eps),
            BLOCK_H=next_pow2(H),
            num_warps=8 if H >= 2048 else 4,
        )
    return y, rstd


def norm_dw(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """dweight over rows [R, H] (rstd [R]) in ``perm`` order -> [H] FP32."""
    (perm,) = index_on(x, perm.to(torch.int64))
    check_device("norm_dw", dy, x, rstd, perm)
    H = x.shape[-1]
    dy, x, rstd = dy.reshape(-1, H).contiguous(), x.reshape(-1, H).contiguous(), rstd.reshape(-1).contiguous()
    dw = torch.empty(H, dtype=torch.float32, device=x.device)
    if H:
        R = perm.numel()
        nch = triton.cdiv(R, DW_CHUNK)
        if nch * H >= 2**31:
            raise ValueError(f"triton norm_dw: {R} rows x {H} columns need {nch * H} chunk partials (at most 2^31 - 1)")
        part = torch.empty(max(nch, 1) * H, dtype=torch.float32, device=x.device)
        if nch:
            norm_dw_kernel[(nch, triton.cdiv(H, DW_BC))](
                dy, x, rstd, perm, part, R, H, BR=DW_BR, BC=DW_BC, CHUNK=DW_CHUNK, num_warps=4
            )
        norm_dw_sum_kernel[(triton.cdiv(H, DW_BC),)](part, dw, nch, H, BC=DW_BC, num_warps=4)
    return dw


def rms_norm_bwd(
    dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx [T, H] FP32, dweight [H] FP32 over the rows in the given order), as ws1_cpu::rms_norm_bwd."""
    T, H = _rows("rms_norm_bwd", x, w)
    dy = dy.contiguous()
    dx = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    if T and H:
        rms_norm_bwd_kernel[(T,)](
            dy,
            x,
            w.contiguous(),
            rstd.contiguous(),
            dx,
            T,
            H,
            float(H),
            BLOCK_H=next_pow2(H),
            num_warps=8 if H >= 2048 else 4,
        )
    return dx, norm_dw(dy, x, rstd, torch.arange(T, device=x.device))


def rms_dw(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """param_grad: dweight over the rows in canonical order ``perm``."""
    return norm_dw(dy, x, rstd, perm)
