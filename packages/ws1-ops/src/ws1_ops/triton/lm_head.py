"""lm_head on Triton: FP32 logits = x @ weight.T — det_gemm's main loop, stored without rounding.

Shapes: x [M, K] BF16, weight [V, K] BF16 -> logits [M, V] FP32.
Backward: det_gemm's dx / dweight kernels with an FP32 dy (their FP32 configuration: dy split
exactly into three BF16 parts, three BF16 MMAs per block; no TF32), dweight over the rows in
canonical order. Configurations and per-element order: :mod:`ws1_ops.triton._gemm` (the forward
uses det_gemm's BF16 tiers).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import counted
from ._gemm import gemm_acc, store_tile, tile_of_program
from .det_gemm import run_fwd


@counted
@triton.jit(do_not_specialize=["M"])
def lm_head_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    K,
    s_xm,
    s_wn,
    s_ym,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_F32: tl.constexpr,
    TMA: tl.constexpr,
):
    """logits[m, v] = sum_k x[m, k] w[v, k], FP32 (the accumulator itself). TMA as det_gemm's."""
    pid_m, pid_n = tile_of_program(M, N, BM, BN, GROUP_M)
    acc = gemm_acc(
        x_ptr, w_ptr, x_ptr, M, N, K, s_xm, 1, 1, s_wn, pid_m, pid_n, False, BM, BN, BK, DOT_F32, False, TMA, True
    )
    store_tile(y_ptr, acc, M, N, s_ym, pid_m, pid_n, BM, BN, False)


def lm_head(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M, K] BF16, w [V, K] BF16 -> [M, V] FP32."""
    return run_fwd(lm_head_fwd_kernel, "lm_head", x, w, torch.float32)
