"""det_gemm on Triton: y = x @ weight.T, BF16 in, FP32 accumulation, BF16 out (q/k/v/o/gate/up/down).

Shapes: x [M, K] BF16, weight [N, K] BF16 -> y [M, N] BF16.
Backward: dx = dy @ weight -> [M, K] FP32 (per row: the same main loop with N as the reduction);
dweight = dy[perm].T @ x[perm] -> [N, K] FP32, the reduction running over the rows in canonical
order ``perm`` (padding dropped), BK rows at a time, ascending, never split.

How it is invariant, and the per-element order of every configuration: :mod:`ws1_ops.triton._gemm`
(K never split, BK 64 ascending as a chain of k16 MMAs, tiles aligned to absolute row 0 with
zero-filled edges; fixed configurations per arch, dtype and weight shape, the Hopper BF16 ones in
three tiers by M that share that chain).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check_device, counted, index_on
from ._gemm import descriptor, gemm_acc, plan_dw, plan_dx, plan_fwd, store_tile, tile_of_program, tma_operand


@counted
@triton.jit(do_not_specialize=["M"])
def det_gemm_fwd_kernel(
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
    """y[m, n] = bf16_rne(sum_k x[m, k] w[n, k]); B[k, n] = w[n, k] (stride 1 along k).
    TMA: x_ptr / w_ptr are descriptors with blocks [BM, BK] / [BN, BK] (_gemm.gemm_acc)."""
    pid_m, pid_n = tile_of_program(M, N, BM, BN, GROUP_M)
    acc = gemm_acc(
        x_ptr, w_ptr, x_ptr, M, N, K, s_xm, 1, 1, s_wn, pid_m, pid_n, False, BM, BN, BK, DOT_F32, False, TMA, True
    )
    store_tile(y_ptr, acc, M, N, s_ym, pid_m, pid_n, BM, BN, True)


@counted
@triton.jit(do_not_specialize=["M"])
def det_gemm_bwd_dx_kernel(
    dy_ptr,
    w_ptr,
    dx_ptr,
    M,
    N,
    K,
    s_dym,
    s_wn,
    s_dxm,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_F32: tl.constexpr,
    TMA: tl.constexpr,
    SPLIT_A: tl.constexpr,
):
    """dx[m, k] = sum_n dy[m, n] w[n, k] in FP32 (the reduction axis is N, never split).
    TMA (BF16 dy on Hopper): dy_ptr / w_ptr are descriptors, blocks [BM, BK] / [BK, BN].
    FP32 dy (lm_head): SPLIT_A, three BF16 MMAs per block (_gemm)."""
    pid_m, pid_n = tile_of_program(M, K, BM, BN, GROUP_M)
    acc = gemm_acc(
        dy_ptr, w_ptr, dy_ptr, M, K, N, s_dym, 1, s_wn, 1, pid_m, pid_n, False, BM, BN, BK, DOT_F32, SPLIT_A, TMA, False
    )
    store_tile(dx_ptr, acc, M, K, s_dxm, pid_m, pid_n, BM, BN, False)


@counted
@triton.jit(do_not_specialize=["R"])
def det_gemm_bwd_dw_kernel(
    dy_ptr,
    x_ptr,
    perm_ptr,
    dw_ptr,
    R,
    N,
    K,
    s_dym,
    s_xm,
    s_dwn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_F32: tl.constexpr,
    TMA: tl.constexpr,
    SPLIT_A: tl.constexpr,
):
    """dw[n, k] = sum_r dy[perm[r], n] x[perm[r], k] in FP32, r ascending in canonical order.
    Pointer loads always (the rows are gathered; TMA is False). FP32 dy (lm_head): SPLIT_A."""
    pid_m, pid_n = tile_of_program(N, K, BM, BN, GROUP_M)
    acc = gemm_acc(
        dy_ptr, x_ptr, perm_ptr, N, K, R, 1, s_dym, s_xm, 1, pid_m, pid_n, True, BM, BN, BK, DOT_F32, SPLIT_A
    )
    store_tile(dw_ptr, acc, N, K, s_dwn, pid_m, pid_n, BM, BN, False)


def _rowmajor(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _check_gemm(op: str, x: torch.Tensor, w: torch.Tensor) -> None:
    check_device(op, x, w)
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"triton {op}: need x [M, K] and weight [N, K], got {tuple(x.shape)} and {tuple(w.shape)}")
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        raise ValueError(f"triton {op}: x and weight must be bfloat16, got {x.dtype} and {w.dtype}")


def run_fwd(kernel, op: str, x: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """Launch ``kernel`` (det_gemm or lm_head forward) with its fixed configuration (_gemm.plan_fwd)."""
    _check_gemm(op, x, w)
    x, w = _rowmajor(x), _rowmajor(w)
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty(M, N, dtype=out_dtype, device=x.device)
    if M and N:
        p = plan_fwd(x, w, out_dtype == torch.bfloat16)
        xa, wa = x, w
        if p.tma:
            x, w = tma_operand(x), tma_operand(w)
            xa, wa = descriptor(x, [p.cfg.BM, p.cfg.BK]), descriptor(w, [p.cfg.BN, p.cfg.BK])
        kernel[p.grid(M, N)](xa, wa, y, M, N, K, x.stride(0), w.stride(0), y.stride(0), **p.kwargs(x, w))
    return y


def det_gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M, K] BF16, w [N, K] BF16 -> [M, N] BF16."""
    return run_fwd(det_gemm_fwd_kernel, "det_gemm", x, w, torch.bfloat16)


def gemm_dx(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """dx = dy @ w: dy [M, N] (BF16, or FP32 for lm_head), w [N, K] BF16 -> [M, K] FP32."""
    check_device("gemm_dx", dy, w)
    dy, w = _rowmajor(dy), _rowmajor(w)
    M, N = dy.shape
    K = w.shape[1]
    dx = torch.empty(M, K, dtype=torch.float32, device=dy.device)
    if M and K:
        p = plan_dx(dy, w)
        da, wa = dy, w
        if p.tma:
            dy, w = tma_operand(dy), tma_operand(w)
            da, wa = descriptor(dy, [p.cfg.BM, p.cfg.BK]), descriptor(w, [p.cfg.BK, p.cfg.BN])
        det_gemm_bwd_dx_kernel[p.grid(M, K)](
            da, wa, dx, M, N, K, dy.stride(0), w.stride(0), dx.stride(0), **p.kwargs(dy, w), SPLIT_A=p.split_a
        )
    return dx


def gemm_dw(dy: torch.Tensor, x: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """dw = dy[perm].T @ x[perm]: dy [M, N], x [M, K], perm [R] int64 (canonical rows) -> [N, K] FP32.

    The rows are gathered inside the kernel in ``perm`` order; that order is the reduction order."""
    (perm,) = index_on(dy, perm.to(torch.int64))
    check_device("gemm_dw", dy, x, perm)
    dy, x = _rowmajor(dy), _rowmajor(x)
    N, K = dy.shape[1], x.shape[1]
    dw = torch.empty(N, K, dtype=torch.float32, device=dy.device)
    if N and K:
        p = plan_dw(dy, x)
        det_gemm_bwd_dw_kernel[p.grid(N, K)](
            dy,
            x,
            perm,
            dw,
            perm.numel(),
            N,
            K,
            dy.stride(0),
            x.stride(0),
            dw.stride(0),
            **p.kwargs(dy, x),
            SPLIT_A=p.split_a,
        )
    return dw
