"""The Cube GEMM with double-buffered queues and the A slab kept in L1 across N tiles (csrc/cube_gemm.h) gives every
bit the single-buffered GEMM it replaced gave (emu/csrc/legacy_gemm.h = cube_gemm.h at 68187df): the same baseM /
baseN / baseK, the same K chunks in the same order into one FP32 L0C accumulator — only the copies, their overlap and
the work items changed. Checked for det_gemm (BF16 out), lm_head (FP32 out) and gemm_fp32 (FP32 operands), with M, N
and K crossing the 64 / 128 tiles, an N group of two tiles and the A slab (1024 BF16 / 512 FP32 columns), with small
K panels (a slab straddling a panel boundary), and with several SoC core counts (blockDim)."""

import pytest
import torch
import ws1_kernels_ascend_emu as emu
from emu_cases import E, same_bits

SHAPES = [(1, 150, 200), (7, 260, 136), (70, 390, 1100), (130, 128, 64)]


@pytest.mark.parametrize("M, N, K", SHAPES)
def test_gemm_matches_the_single_buffered_kernel(M, N, K, soc):
    g = torch.Generator().manual_seed(M * 7 + N)
    a, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g) * 0.05
    x, w = a.bfloat16(), b.bfloat16()
    cases = [
        ("det_gemm", lambda: E.det_gemm(x, w), 0),
        ("lm_head", lambda: E.lm_head(x, w), 1),
        ("gemm_fp32", lambda: E.gemm(a, b, True), 2),
    ]
    for aic, aiv in ((20, 40), (1, 1), (7, 3)):
        soc(aic, aiv)
        for name, new, kind in cases:
            old = emu.legacy_gemm(a if kind == 2 else x, b if kind == 2 else w, kind)
            assert same_bits(new(), old), f"{name} M{M} N{N} K{K} on {aic} AIC differs from the single-buffered GEMM"


def test_gemm_k_panels_across_slabs_match_the_single_buffered_kernel():
    # K panels of 192 / 320 columns: A slabs of 1024 (BF16) / 512 (FP32) columns straddle panel boundaries
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(66, 1300, generator=g), torch.randn(140, 1300, generator=g) * 0.05
    try:
        for kp in (192, 320):
            emu.set_gemm_k_panel(kp)
            assert same_bits(E.det_gemm(a.bfloat16(), b.bfloat16()), emu.legacy_gemm(a, b, 0)), kp
            assert same_bits(E.gemm(a, b, True), emu.legacy_gemm(a, b, 2)), kp
    finally:
        emu.set_gemm_k_panel(0)


def test_the_comparison_can_fail():
    # the legacy kernel is a real, independent kernel: a different K (one more column) gives other bits
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(20, 200, generator=g), torch.randn(30, 200, generator=g)
    a2 = a.clone()
    a2[:, -1] += 1.0
    assert not same_bits(E.lm_head(a2.bfloat16(), b.bfloat16()), emu.legacy_gemm(a, b, 1))
