"""The one GEMM main loop of the Triton family (det_gemm, lm_head, and both of their backwards).

    C[i, j] = sum_k A[i, k] * B[k, j]       A, B addressed by strides or TMA descriptors; FP32 accumulator

Per-element order (why a row's bits do not depend on the batch):

* K is never split. One program owns one (BM x BN) output tile and walks K from 0 upward in
  BK-wide steps, ``acc = dot(a_blk, b_blk, acc)``. Triton lowers each ``tl.dot`` of a BK-deep block
  into BK/16 tensor-core MMAs of depth 16 issued in ascending k, each taking the previous result as
  its accumulator (wgmma on sm_90a: ``convertDot`` in Triton's WGMMA.cpp, k innermost per output
  fragment; mma.sync on sm_80: MMAv2.cpp, k outermost). So every output element is the chain

      acc = +0;  for c = 0 .. ceil(K / BK) * BK / 16 - 1:  acc = MMA16(acc, A[i, 16c:16c+16], B[16c:16c+16, j])

  fixed by K and BK alone (k positions >= K are zeros in both operands). No split-K, no stream-K,
  no atomics. (The first MMA may be issued with the accumulator input disabled instead of a +0
  accumulator: Triton's accumulator-init optimization; the same kernel code, so the same choice in
  every configuration below.)
* Tiles are aligned to absolute row / column 0; the M and N edges are masked (zero rows and
  columns that are never stored), the K edge is zero-filled: by the masked pointer loads, or by the
  TMA unit for a block that crosses the tensor's end. A row therefore gets the same MMA chain in
  a batch of 1, 59 or 4096, and wherever it sits in its tile (an MMA computes each output row from
  that row of A alone).
* Row counts are excluded from Triton's integer specialization (``do_not_specialize``).
* The program -> tile mapping is grouped (GROUP_M) for L2 reuse. It decides which program
  computes a tile, not how.

Configurations (fixed constants, no autotuning; docs/triton.md "Configurations"):

* Per arch: the Hopper table (compute capability 9.x: wgmma tiles of 64 rows per warpgroup, TMA
  descriptors for the operands of the BF16 forward and dx) and the sm_80 table (everything else:
  mma.sync, pointer loads). ``_common.arch`` picks the table from the device at launch.
* BF16 operands, Hopper: three tiers chosen by M (:data:`BF16_TIERS`). They differ in BM (64 or
  128), warps and stages only; every tier issues the same instruction, wgmma.m64n128k16, with BK 64,
  the same operand values (TMA or masked zeros) and the same epilogue, and an output element sits in
  the same slot of that instruction's fragment (row i mod 64, column j mod 128). So every element sees
  the chain above, instruction for instruction, in every tier: the proof docs/design.md §7b rule 4
  asks of a configuration chosen by M. The GPU test (tests_triton/test_triton_gemm_tiers.py in device
  mode) compares every tier's rows bitwise. triton-aot checks that every sm_90a configuration of a
  GEMM kernel issues the same wgmma shapes.
* The sm_80 table has one BF16 configuration for every M (the pre-issue-24 one).
* FP32 ``a`` (lm_head's backward, SPLIT_A) and the parameter gradient dW (its reduction runs over
  the batch rows, so its configuration can never depend on them): one configuration per arch.

Parameter gradients use the same loop with the *row* axis as K (``GATHER_K``): dW = dy.T @ x
over the rows in canonical order (``perm``), BK rows at a time, ascending, never split (pointer
loads: the rows are gathered).

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
from triton.tools.tensor_descriptor import TensorDescriptor

from ._common import arch, bf16_round_f32, dot, dot_f32, rne_bf16


@dataclass(frozen=True)
class GemmConfig:
    BM: int
    BN: int
    BK: int
    GROUP_M: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class Tier:
    """``cfg`` serves every M <= ``max_m`` not served by an earlier tier (None: every larger M)."""

    max_m: int | None
    cfg: GemmConfig


# The reduction step of every configuration below. Fixed: on the GPU the k16 MMA chain does not
# depend on BK, but the zero padding at the K edge does (ceil(K / BK) * BK / 16 MMAs), and in the
# interpreter each BK block is one numpy sum; one BK everywhere keeps both out of the question.
BK = 64

# BF16 operands (det_gemm, lm_head, the BF16 dx), chosen by M — one fixed table per arch.
#   Hopper (sm_90a, wgmma, TMA operands): every tier issues the one instruction wgmma.m64n128k16
#   (BF16 x BF16 -> FP32) with an output element (i, j) in the same fragment slot (row i mod 64,
#   column j mod 128: BM is 64 or 128 rows of 64-row fragments, BN 128, tiles aligned to 0), BK 64:
#   the same instruction, the same operands in the same order, the same slot (docs/design.md §7b
#   rule 4), so the tiers give a row the same bits by construction; the GPU test
#   tests_triton/test_triton_gemm_tiers.py checks it.
#   * M <= 64 (decode, small batches; memory-bound): 64 x 128, 4 warps, 8 stages (24 KB each): 128 KB of
#     weight in flight per program, twice the 4 stages that measured 0.51x cuBLAS at N 4096; still
#     N / 128 programs (32 there: the limit of this tile).
#     A 64 x 32 tile (wgmma m64n32k16, N / 32 programs) would stream the weight with 4x the programs,
#     but it is another instruction: whether its per-element result equals m64n128k16's is not
#     documented, so it is not a tier; benchmarks/bench_triton.py measures it beside the fixed one and
#     records whether its bits agree (the evidence to adopt it).
#   * 64 < M < 1024: 64 x 128, 4 warps, 4 stages (the tile that measured 0.68x at M 256, now with TMA).
#   * M >= 1024: 128 x 128 on one warpgroup (4 warps, two m64n128k16 per k16 step), 4 stages: half
#     the operand traffic per MMA of 64 x 128. (128 x 256 / 8 warps, m64n256k16, would be another
#     instruction; and under Triton 3.6, the H200 image's, ptxas serialized the wgmmas (C7515) of
#     128 x 256 with a BF16 epilogue and of 128 x 128 on 8 warps with an FP32 one; triton-aot checks.)
#   sm_80 (and every arch that is not 9.x): one configuration, 64 x 128 x 64, 4 warps, 4 stages.
BF16_TIERS = {
    "sm90": (
        Tier(64, GemmConfig(BM=64, BN=128, BK=BK, GROUP_M=8, num_warps=4, num_stages=8)),
        Tier(1023, GemmConfig(BM=64, BN=128, BK=BK, GROUP_M=8, num_warps=4, num_stages=4)),
        Tier(None, GemmConfig(BM=128, BN=128, BK=BK, GROUP_M=8, num_warps=4, num_stages=4)),
    ),
    "sm80": (Tier(None, GemmConfig(BM=64, BN=128, BK=BK, GROUP_M=8, num_warps=4, num_stages=4)),),
}
# Not a tier (see above): the M <= 64 candidate benchmarks/bench_triton.py measures on a GPU.
SMALL_M_CANDIDATE = GemmConfig(BM=64, BN=32, BK=BK, GROUP_M=8, num_warps=4, num_stages=10)
# An FP32 a operand (lm_head's backward: FP32 logit gradients), split into three BF16 parts
# (SPLIT_A): 64x64 output tiles, BK 64, 8 warps, 3 stages, every arch, every M. The split holds three
# BF16 copies of the a-block in registers; the BF16 tile (64x128, 4 warps) spilled with it (sm_80:
# 255 registers, 276-576 B), and 64x128 tiles with BK 32 spilled 24 B on sm_80 under Triton 3.6
# (the H200 image's) though not under 3.9. This one spills under neither, for sm_90a (wgmma) and
# sm_80 (mma.sync): python -m ws1_matrix triton-aot, with either Triton.
F32_CONFIG = GemmConfig(BM=64, BN=64, BK=BK, GROUP_M=8, num_warps=8, num_stages=3)
# dW = dy[perm].T @ x[perm]: the reduction runs over the batch rows, so its configuration is fixed
# per arch and never looks at them. Hopper: 128 x 128 output tiles on one warpgroup (two m64n128k16
# per k16 step; with 8 warps ptxas under Triton 3.6 serialized the wgmmas, C7515).
DW_BF16 = {
    "sm90": GemmConfig(BM=128, BN=128, BK=BK, GROUP_M=8, num_warps=4, num_stages=3),
    "sm80": BF16_TIERS["sm80"][0].cfg,
}


def bf16_config(arch_: str, M: int, out_bf16: bool = False) -> GemmConfig:
    """The BF16 configuration for ``M`` rows on ``arch_``: its table's first tier with M <= max_m.
    (``out_bf16``: det_gemm's BF16 output; the tables are the same for both outputs today.)"""
    del out_bf16
    for tier in BF16_TIERS[arch_]:
        if tier.max_m is None or M <= tier.max_m:
            return tier.cfg
    raise AssertionError("the last tier serves every M")


def tma_ok(arch_: str, *row_lengths: int) -> bool:
    """Whether a BF16 GEMM reads its operands through TMA descriptors: on Hopper, when every operand
    row is a multiple of 16 bytes (8 BF16: the descriptor's stride rule). The row lengths are the
    weight's dimensions, so this is a property of the weight shape, never of M. The values an MMA
    sees are the same either way (zero-filled edges); only the copy engine differs."""
    return arch_ == "sm90" and all(n % 8 == 0 for n in row_lengths)


def tma_operand(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when it meets TMA's rules (last stride 1, row stride a multiple of 16 bytes,
    16-byte aligned base), else a fresh aligned copy: a view at an odd offset takes the same path."""
    if t.stride(-1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def descriptor(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    """A host-side TMA descriptor over a 2-D row-major tensor (Triton >= 3.4: the same class and
    constructor in 3.6 and 3.9; the launcher encodes the CUtensorMap per launch, no host sync)."""
    return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], block)


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
def gemm_acc(
    a_ptr,
    b_ptr,
    k_idx_ptr,
    M,
    N,
    K,
    s_am,
    s_ak,
    s_bk,
    s_bn,
    pid_m,
    pid_n,
    GATHER_K: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    DOT_F32: tl.constexpr,
    SPLIT_A: tl.constexpr,
    TMA: tl.constexpr = False,
    B_NK: tl.constexpr = True,
):
    """FP32 [BM, BN] accumulator of tile (pid_m, pid_n): K ascending in BK steps, never split.

    ``GATHER_K``: the k-th reduction index addresses row ``k_idx[k]`` (canonical row order).
    ``SPLIT_A``: a is FP32, b BF16: three BF16 dots per block (module docstring).
    ``TMA``: ``a_ptr`` / ``b_ptr`` are TMA descriptors (strides unused): a over A [M, K] with blocks
    [BM, BK]; b over the weight, blocks [BN, BK] of w [N, K] (``B_NK``: B[k, n] = w[n, k], the
    forward) or [BK, BN] of w [K, N] (dx). A block crossing the tensor's end is zero-filled by the
    copy engine: the same values the masked pointer loads give."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if TMA:
        for k0 in range(0, K, BK):
            a = a_ptr.load([pid_m * BM, k0])
            if B_NK:
                b = tl.trans(b_ptr.load([pid_n * BN, k0]))
            else:
                b = b_ptr.load([k0, pid_n * BN])
            if DOT_F32:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = dot(a, b, acc)
    else:
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        m_ok = rm < M
        n_ok = rn < N
        a_rows = a_ptr + rm.to(tl.int64)[:, None] * s_am
        b_cols = b_ptr + rn.to(tl.int64)[None, :] * s_bn
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
                rest = a - hi  # exact (Sterbenz): the low 16 significand bits
                mid = bf16_round_f32(rest)
                lo = rest - mid  # exact, and a BF16 value (at most 8 bits left)
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


@dataclass(frozen=True)
class Launch:
    """What one GEMM launch runs: its configuration, whether its operands go through TMA
    descriptors, and whether a is FP32 (SPLIT_A)."""

    cfg: GemmConfig
    tma: bool = False
    split_a: bool = False

    def grid(self, M: int, N: int) -> tuple[int]:
        return (triton.cdiv(M, self.cfg.BM) * triton.cdiv(N, self.cfg.BN),)

    def kwargs(self, *operands: torch.Tensor) -> dict:
        c = self.cfg
        return dict(
            BM=c.BM,
            BN=c.BN,
            BK=c.BK,
            GROUP_M=c.GROUP_M,
            DOT_F32=dot_f32(*operands),
            TMA=self.tma,
            num_warps=c.num_warps,
            num_stages=c.num_stages,
        )


def plan_fwd(x: torch.Tensor, w: torch.Tensor, out_bf16: bool = False) -> Launch:
    """det_gemm (``out_bf16``) / lm_head forward: x [M, K] BF16, w [N, K] BF16."""
    a = arch(x)
    return Launch(bf16_config(a, x.shape[0], out_bf16), tma=tma_ok(a, w.shape[1]))


def plan_dx(dy: torch.Tensor, w: torch.Tensor) -> Launch:
    """dx = dy @ w: dy [M, N] BF16 (or FP32: lm_head, SPLIT_A, one configuration), w [N, K] BF16."""
    _check_split(dy, w)
    if dy.dtype == torch.float32:
        return Launch(F32_CONFIG, split_a=True)
    a = arch(dy)
    return Launch(bf16_config(a, dy.shape[0]), tma=tma_ok(a, *w.shape))


def plan_dw(dy: torch.Tensor, x: torch.Tensor) -> Launch:
    """dW = dy[perm].T @ x[perm]: one configuration per arch and dtype (never one chosen by the rows)."""
    _check_split(dy, x)
    if dy.dtype == torch.float32:
        return Launch(F32_CONFIG, split_a=True)
    return Launch(DW_BF16[arch(dy)])


def _check_split(a: torch.Tensor, b: torch.Tensor) -> None:
    if b.dtype != torch.bfloat16 or a.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"triton gemm: operands must be (BF16 or FP32, BF16), got {a.dtype} and {b.dtype}")
