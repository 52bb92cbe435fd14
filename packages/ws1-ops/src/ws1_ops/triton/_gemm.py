"""The one GEMM main loop of the Triton family (det_gemm, lm_head, and both of their backwards).

    C[i, j] = sum_k A[i, k] * B[k, j]       A, B addressed by strides; FP32 accumulator

Numerics (why a row's bits do not depend on the batch):

* K is never split. One program owns one (BM x BN) output tile and walks K from 0 upward in
  BK-wide steps, ``acc = dot(a_blk, b_blk, acc)``: every output element sees the same blocks in
  the same order, fixed by K alone. No split-K, no stream-K, no atomics.
* Tiles are aligned to absolute row / column 0; the M and N edges are masked (zero rows and
  columns that are never stored), the K edge is masked with zeros that add nothing. A row
  therefore gets the same instruction sequence in a batch of 1, 59 or 4096, and wherever it sits
  in its tile (an MMA computes each output row from that row of A alone).
* One tile configuration per operand dtype (:data:`BF16_CONFIG`, :data:`F32_CONFIG`), never
  chosen by M; no autotuning. Row counts are excluded from Triton's integer specialization
  (``do_not_specialize``), so every M runs the same compiled binary.
* The program -> tile mapping is grouped (GROUP_M) for L2 reuse. It decides which program
  computes a tile, not how: the tile's arithmetic is the same whichever program runs it.

Parameter gradients use the same loop with the *row* axis as K (``GATHER_K``): dW = dy.T @ x
over the rows in canonical order (``perm``), BK rows at a time, ascending, never split.

An FP32 ``a`` (lm_head's backward: dy is the FP32 logit gradient; b is always BF16) runs on the
tensor cores too (``SPLIT_A``): each a-block is split exactly into three BF16 parts,
a = hi + mid + lo (hi = bf16(a), mid = bf16(a - hi), lo = a - hi - mid: 8 + 8 + 8 significand bits
hold FP32's 24, so the split loses nothing outside BF16's subnormal range), and the block adds
dot(lo, b), dot(mid, b), dot(hi, b) to the FP32 accumulator in that fixed order (small parts
first). Every product of two BF16 values is exact in FP32, so the result has FP32-level accuracy
(judged by the contract's gradient_accuracy rows) at three BF16 MMAs per block instead of an IEEE
FP32 dot on the CUDA cores (which also spilled: 255 registers, 460-812 B of spill stores on sm_80
and sm_90a, ``python -m ws1_matrix triton-aot``). The order is fixed by K alone, as above.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._common import bf16_round_f32, dot, dot_f32, rne_bf16


@dataclass(frozen=True)
class GemmConfig:
    BM: int
    BN: int
    BK: int
    GROUP_M: int
    num_warps: int
    num_stages: int


# BF16 operands (tensor cores, FP32 accumulation). Chosen for sm_90 (H100/H200) as one
# compromise for every M: BM 64 keeps the wasted MMA work of a decode step (M = 1 computes a
# 64-row tile) at half of a 128-row tile's, and 64x128 tiles give 128 programs at M 256, N 4096
# (one wave on 132 SMs) while large M still runs full wgmma tiles. A different M never selects
# another configuration (docs/design.md §7b rule 4): the trade-off is measured by benchmarks/bench_triton.py.
BF16_CONFIG = GemmConfig(BM=64, BN=128, BK=64, GROUP_M=8, num_warps=4, num_stages=4)
# An FP32 a operand (lm_head's backward: FP32 logit gradients), split into three BF16 parts
# (SPLIT_A): 64x64 output tiles, BK 64, 8 warps, 3 stages. The split holds three BF16 copies of the
# a-block in registers; the BF16 tile (64x128, 4 warps) spilled with it (sm_80: 255 registers,
# 276-576 B), and 64x128 tiles with BK 32 spilled 24 B on sm_80 under Triton 3.6 (the H200 image's)
# though not under 3.9. This one spills under neither, for sm_90a (wgmma) and sm_80 (mma.sync):
# python -m ws1_matrix triton-aot, with either Triton.
F32_CONFIG = GemmConfig(BM=64, BN=64, BK=64, GROUP_M=8, num_warps=8, num_stages=3)


def config_for(*operands: torch.Tensor) -> GemmConfig:
    return F32_CONFIG if any(t.dtype == torch.float32 for t in operands) else BF16_CONFIG


@triton.jit
def tile_of_program(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program: tiles grouped GROUP_M rows at a time (L2 reuse only)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    return pid_m, pid_n


@triton.jit
def gemm_acc(a_ptr, b_ptr, k_idx_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, pid_m, pid_n,
             GATHER_K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             DOT_F32: tl.constexpr, SPLIT_A: tl.constexpr):
    """FP32 [BM, BN] accumulator of tile (pid_m, pid_n): K ascending in BK steps, never split.

    ``GATHER_K``: the k-th reduction index addresses row ``k_idx[k]`` (canonical row order).
    ``SPLIT_A``: a is FP32, b BF16: three BF16 dots per block (module docstring)."""
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    m_ok = rm < M
    n_ok = rn < N
    a_rows = a_ptr + rm.to(tl.int64)[:, None] * s_am
    b_cols = b_ptr + rn.to(tl.int64)[None, :] * s_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        k_ok = rk < K
        if GATHER_K:
            kk = tl.load(k_idx_ptr + rk, mask=k_ok, other=0).to(tl.int64)
        else:
            kk = rk.to(tl.int64)
        a = tl.load(a_rows + kk[None, :] * s_ak, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_cols + kk[:, None] * s_bk, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if DOT_F32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if SPLIT_A:
            hi = bf16_round_f32(a)
            rest = a - hi                     # exact (Sterbenz): the low 16 significand bits
            mid = bf16_round_f32(rest)
            lo = rest - mid                   # exact, and a BF16 value (at most 8 bits left)
            acc = dot(_bf16_operand(lo, DOT_F32), b, acc)
            acc = dot(_bf16_operand(mid, DOT_F32), b, acc)
            acc = dot(_bf16_operand(hi, DOT_F32), b, acc)
        else:
            acc = dot(a, b, acc)
    return acc


@triton.jit
def _bf16_operand(x, DOT_F32: tl.constexpr):
    """An FP32 tile holding BF16 values as a dot operand: BF16 on the GPU (exact), FP32 in the
    interpreter (whose BF16 dot is wrong; DOT_F32)."""
    if not DOT_F32:
        x = x.to(tl.bfloat16)
    return x


@triton.jit
def store_tile(c_ptr, acc, M, N, s_cm, pid_m, pid_n, BM: tl.constexpr, BN: tl.constexpr, OUT_BF16: tl.constexpr):
    """Store the tile's valid part: FP32 as is, or rounded once to BF16 (RNE)."""
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    ptrs = c_ptr + rm.to(tl.int64)[:, None] * s_cm + rn[None, :]
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    if OUT_BF16:
        tl.store(ptrs, rne_bf16(acc), mask=mask)
    else:
        tl.store(ptrs, acc, mask=mask)


def grid(M: int, N: int, a: torch.Tensor, b: torch.Tensor) -> tuple[int]:
    cfg = config_for(a, b)
    return (triton.cdiv(M, cfg.BM) * triton.cdiv(N, cfg.BN),)


def launch_kwargs(a: torch.Tensor, b: torch.Tensor) -> dict:
    cfg = config_for(a, b)
    return dict(BM=cfg.BM, BN=cfg.BN, BK=cfg.BK, GROUP_M=cfg.GROUP_M, DOT_F32=dot_f32(a, b),
                num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def split_kwargs(a: torch.Tensor, b: torch.Tensor) -> dict:
    """A kernel whose a operand may be FP32 (the backward's dy): the split flag besides the config."""
    if b.dtype != torch.bfloat16 or a.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"triton gemm: operands must be (BF16 or FP32, BF16), got {a.dtype} and {b.dtype}")
    return dict(launch_kwargs(a, b), SPLIT_A=a.dtype == torch.float32)
