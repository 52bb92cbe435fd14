"""rope on Triton: rotary embedding (rotate-half, HF Qwen3), cos/sin from each token's own position.

Shapes: x [T, n_heads, D] BF16, positions [T] int64 -> [T, n_heads, D] BF16; backward (the
inverse rotation) dy [T, n_heads, D] -> FP32.

For token t at position p and pair i < D/2 (x1 = x[i], x2 = x[i + D/2]):
    inv_freq_i = fp32(1 / theta^(2i/D))              (host, double -> fp32; depends on theta, D only)
    angle      = fp32(p) * inv_freq_i                (one fp32 multiply, in the kernel)
    c, s       = cos(angle), sin(angle)              (in the kernel, :func:`sincos`)
    forward:  out1 = x1*c - x2*s, out2 = x2*c + x1*s;  inverse: out1 = x1*c + x2*s, out2 = x2*c - x1*s
cos/sin are computed in the kernel from (p, i) alone, never read from a table laid out like the
batch, so prefill, chunked prefill and decode rotate a token identically. :func:`sincos` uses only
IEEE FP64 +, -, *, floor-by-conversion: no hardware approximation (``cos.approx`` loses accuracy
at angles of ~4e4 rad) and no libdevice (absent from the interpreter), so the interpreter and the
GPU compute the same correctly-rounded-in-practice FP32 values. That holds because the kernels are
compiled with ``enable_fp_fusion=False`` (``_common.FP_FUSION``): under Triton's default, LLVM
contracted the polynomial into 168-336 ``fma.rn.f64`` per kernel; ``nox -s triton_aot`` checks the
PTX has none.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal, getcontext

import torch
import triton
import triton.language as tl

from ._common import check_device, counted, index_on, next_pow2, rne_bf16

# pi/2 split for Cody-Waite reduction: PIO2_HI keeps 32 significant bits, so k * PIO2_HI is exact
# for quadrant counts k < 2^21 (angles up to ~3e6 rad; Qwen3's 40960 positions need ~4.1e4).
getcontext().prec = 50
_PIO2 = Decimal("1.57079632679489661923132169163975144209858469968755291")
_HI = struct.unpack(
    ">d", (struct.unpack(">Q", struct.pack(">d", float(_PIO2)))[0] & ~((1 << 21) - 1)).to_bytes(8, "big")
)[0]
PIO2_HI = tl.constexpr(_HI)
PIO2_LO = tl.constexpr(float(_PIO2 - Decimal(_HI)))
TWO_OVER_PI = tl.constexpr(float(1 / _PIO2))
# Taylor coefficients on |r| <= pi/4; the first omitted terms are < 1e-19 (below FP64 rounding).
S1, S2, S3, S4, S5, S6, S7, S8, S9 = (tl.constexpr((-1) ** n / math.factorial(2 * n + 1)) for n in range(1, 10))
C1, C2, C3, C4, C5, C6, C7, C8, C9 = (tl.constexpr((-1) ** n / math.factorial(2 * n)) for n in range(1, 10))


@triton.jit
def f64(c):
    """An FP64 constant built as FP64 (a bare Python float could be rounded to FP32 first)."""
    return tl.full((), c, tl.float64)


@triton.jit
def sincos(angle):
    """(cos, sin) of an FP32 angle >= 0, evaluated in FP64 and rounded once to FP32."""
    x = angle.to(tl.float64)
    k = (x * f64(TWO_OVER_PI) + f64(0.5)).to(tl.int64)  # nearest quadrant count (x >= 0)
    kf = k.to(tl.float64)
    r = (x - kf * f64(PIO2_HI)) - kf * f64(PIO2_LO)  # |r| <= pi/4
    z = r * r
    ps = f64(S8) + z * f64(S9)
    ps = f64(S7) + z * ps
    ps = f64(S6) + z * ps
    ps = f64(S5) + z * ps
    ps = f64(S4) + z * ps
    ps = f64(S3) + z * ps
    ps = f64(S2) + z * ps
    ps = f64(S1) + z * ps
    sin_r = r + (r * z) * ps
    pc = f64(C8) + z * f64(C9)
    pc = f64(C7) + z * pc
    pc = f64(C6) + z * pc
    pc = f64(C5) + z * pc
    pc = f64(C4) + z * pc
    pc = f64(C3) + z * pc
    pc = f64(C2) + z * pc
    pc = f64(C1) + z * pc
    cos_r = f64(1.0) + z * pc
    q = k & 3  # angle = k*pi/2 + r
    c = tl.where(q == 0, cos_r, tl.where(q == 1, -sin_r, tl.where(q == 2, -cos_r, sin_r)))
    s = tl.where(q == 0, sin_r, tl.where(q == 1, cos_r, tl.where(q == 2, -sin_r, -cos_r)))
    return c.to(tl.float32), s.to(tl.float32)


@triton.jit
def rotate_rows(
    x_ptr,
    pos_ptr,
    invf_ptr,
    y_ptr,
    R,
    NH,
    HALF,
    INVERSE: tl.constexpr,
    OUT_BF16: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """Rows r = token * NH + head, BLOCK_R per program; each row's cos/sin from its token's position.

    Elementwise: no value depends on which rows share a program."""
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    i = tl.arange(0, BLOCK_HALF)
    r_ok = r < R
    i_ok = i < HALF
    p = tl.load(pos_ptr + r // NH, mask=r_ok, other=0).to(tl.float32)
    inv = tl.load(invf_ptr + i, mask=i_ok, other=0.0)
    c, s = sincos(p[:, None] * inv[None, :])
    ok = r_ok[:, None] & i_ok[None, :]
    offs = r[:, None] * (2 * HALF) + i[None, :]
    x1 = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + offs + HALF, mask=ok, other=0.0).to(tl.float32)
    a = x1 * c
    b = x2 * s
    cc = x2 * c
    d = x1 * s
    if INVERSE:
        o1 = a + b
        o2 = cc - d
    else:
        o1 = a - b
        o2 = cc + d
    if OUT_BF16:
        tl.store(y_ptr + offs, rne_bf16(o1), mask=ok)
        tl.store(y_ptr + offs + HALF, rne_bf16(o2), mask=ok)
    else:
        tl.store(y_ptr + offs, o1, mask=ok)
        tl.store(y_ptr + offs + HALF, o2, mask=ok)


@counted
@triton.jit(do_not_specialize=["R"])
def rope_fwd_kernel(x_ptr, pos_ptr, invf_ptr, y_ptr, R, NH, HALF, BLOCK_R: tl.constexpr, BLOCK_HALF: tl.constexpr):
    rotate_rows(x_ptr, pos_ptr, invf_ptr, y_ptr, R, NH, HALF, False, True, BLOCK_R, BLOCK_HALF)


@counted
@triton.jit(do_not_specialize=["R"])
def rope_bwd_kernel(dy_ptr, pos_ptr, invf_ptr, dx_ptr, R, NH, HALF, BLOCK_R: tl.constexpr, BLOCK_HALF: tl.constexpr):
    rotate_rows(dy_ptr, pos_ptr, invf_ptr, dx_ptr, R, NH, HALF, True, False, BLOCK_R, BLOCK_HALF)


BLOCK_R = 32  # (token, head) rows per program
_INV_FREQ: dict[tuple, torch.Tensor] = {}


def inv_freq(D: int, theta: float, device) -> torch.Tensor:
    """fp32(1 / theta^(2i/D)) for i < D/2, computed in double on the host (as ws1_cpu does)."""
    key = (D, float(theta), str(device))
    if key not in _INV_FREQ:
        vals = [1.0 / math.pow(theta, (2 * i) / D) for i in range(D // 2)]
        _INV_FREQ[key] = torch.tensor(vals, dtype=torch.float64, device="cpu").to(torch.float32).to(device)
    return _INV_FREQ[key]


def _run(kernel, op: str, x: torch.Tensor, pos: torch.Tensor, theta: float, out_dtype) -> torch.Tensor:
    (pos,) = index_on(x, pos)
    check_device(op, x, pos)
    if x.dim() != 3 or x.shape[2] % 2 or pos.shape != (x.shape[0],):
        raise ValueError(
            f"triton {op}: need x [T, n_heads, D] (D even) and positions [T], got {tuple(x.shape)}, {tuple(pos.shape)}"
        )
    x, pos = x.contiguous(), pos.contiguous()
    T, NH, D = x.shape
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    if T and NH and D:
        R = T * NH
        kernel[(triton.cdiv(R, BLOCK_R),)](
            x,
            pos,
            inv_freq(D, theta, x.device),
            y,
            R,
            NH,
            D // 2,
            BLOCK_R=BLOCK_R,
            BLOCK_HALF=next_pow2(D // 2),
            num_warps=4,
        )
    return y


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """x [T, NH, D] BF16, positions [T] int64 -> rotated, BF16."""
    return _run(rope_fwd_kernel, "rope", x, pos, theta, torch.bfloat16)


def rope_bwd(dy: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """The inverse rotation of dy (the transpose of the forward), FP32 out."""
    return _run(rope_bwd_kernel, "rope_bwd", dy, pos, theta, torch.float32)
