"""The GEMM configurations chosen by M (Hopper: M <= 64, 64 < M < 1024, M >= 1024; ``_gemm.BF16_TIERS``)
give every row the same bits, and so do the TMA and pointer-load paths of one configuration.

In the interpreter this checks the logic (each tier's tiling, masking and K loop; BK is the same in
every tier, so numpy's per-element sums agree). In device mode (tests_triton on a GPU) it is the GPU
test that docs/design.md §7b rule 4 asks of a configuration chosen by M: the tiers issue one wgmma
instruction (m64n128k16) with each element in the same fragment slot (``_gemm``'s docstring), and here
lm_head and dx, which store the FP32 accumulator itself, show every bit of the chain."""

import pytest
import torch
from tdev import DEV, to_cpu, to_dev

import ws1_ops
from ws1_contract import bitwise

SIZES = (1, 2, 64, 65, 300, 1023, 1024, 1100)


def _rows_match(fn, x, what):
    full = fn(x)  # 1100 rows: the M >= 1024 tier on Hopper
    g = torch.Generator().manual_seed(7)
    for M in SIZES:
        idx = torch.randperm(x.shape[0], generator=g)[:M]
        r = bitwise(fn(x[idx]), full[idx], f"{what}: {M} rows vs the same rows among {x.shape[0]}")
        assert r.passed, r.detail


def test_the_sizes_cross_every_tier(tri):
    from ws1_ops.triton import _common, _gemm

    table = _common.arch(torch.empty(0, device=DEV))
    tiers = {_gemm.bf16_config(table, M) for M in SIZES}
    assert len(tiers) == len(_gemm.BF16_TIERS[table]), (table, tiers)


def test_lm_head_rows_are_the_same_in_every_tier(tri):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1100, 128, generator=g).bfloat16()
    w = (torch.randn(1000, 128, generator=g) * 0.1).bfloat16()
    _rows_match(lambda a: ws1_ops.lm_head(a, w), x, "lm_head")


def test_dx_rows_are_the_same_in_every_tier(tri):
    from ws1_ops.triton.det_gemm import gemm_dx

    g = torch.Generator().manual_seed(2)
    dy = torch.randn(1100, 384, generator=g).bfloat16()
    w = (torch.randn(384, 256, generator=g) * 0.06).bfloat16()
    _rows_match(lambda a: to_cpu(gemm_dx(*to_dev((a, None, w)))), dy, "dx")


@pytest.mark.parametrize("M", [1, 300, 1100])
def test_tma_and_pointer_loads_give_the_same_bits(M, tri):
    """One configuration, its operands through TMA descriptors (what Hopper launches) and through
    masked pointer loads: the same values reach the same MMAs."""
    from ws1_ops.triton import _gemm
    from ws1_ops.triton import lm_head as tl_

    g = torch.Generator().manual_seed(3)
    x = torch.randn(M, 128, generator=g).bfloat16().to(DEV)
    w = (torch.randn(1000, 128, generator=g) * 0.1).bfloat16().to(DEV)
    p = _gemm.plan_fwd(x, w)
    outs = []
    for tma in (True, False):
        y = torch.empty(M, 1000, dtype=torch.float32, device=DEV)
        xa, wa = (
            (_gemm.descriptor(x, [p.cfg.BM, p.cfg.BK]), _gemm.descriptor(w, [p.cfg.BN, p.cfg.BK])) if tma else (x, w)
        )
        kw = {**_gemm.Launch(p.cfg, tma=tma).kwargs(x, w)}
        tl_.lm_head_fwd_kernel[p.grid(M, 1000)](xa, wa, y, M, 1000, 128, x.stride(0), w.stride(0), y.stride(0), **kw)
        outs.append(y.cpu())
    r = bitwise(outs[0], outs[1], f"TMA vs pointer loads, M={M}")
    assert r.passed, r.detail


@pytest.mark.interpreter_only
def test_the_sm80_table_logic(tri, sm80_table):
    """The sm_80 table (one configuration, pointer loads) in the interpreter: rows invariant, TMA off."""
    from ws1_ops.triton import _gemm

    g = torch.Generator().manual_seed(4)
    x = torch.randn(300, 128, generator=g).bfloat16()
    w = (torch.randn(1000, 128, generator=g) * 0.1).bfloat16()
    assert not _gemm.plan_fwd(x, w).tma and _gemm.plan_fwd(x, w).cfg == _gemm.BF16_TIERS["sm80"][0].cfg
    full = ws1_ops.lm_head(x, w)
    for M in (1, 65, 299):
        assert bitwise(ws1_ops.lm_head(x[:M], w), full[:M]).passed, M
