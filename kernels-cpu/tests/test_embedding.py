"""embedding (+ backward): exact gather, row invariance, dE given the same rows in the same canonical
order (inside a bigger padded batch, padding removed), thread/ISA invariance, bad inputs, NaN."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_ops_check import OPS, assert_same, row_invariance, setting, settings  # noqa: E402


def table(v=500, h=200, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(v, h, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_embedding_exact_and_invariant(dtype):
    w = table(dtype=dtype)
    ids = torch.randint(0, 500, (300,), generator=torch.Generator().manual_seed(1))
    y = OPS.embedding(ids, w)
    assert y.dtype == dtype and y.shape == (300, 200)
    assert_same(y, w[ids], "gather")
    row_invariance(lambda i: OPS.embedding(i, w), (ids,), what="embedding")


def test_embedding_bwd_canonical_order():
    g = torch.Generator().manual_seed(2)
    V, H = 50, 136
    ids = torch.randint(0, V, (90,), generator=g)  # many repeats: multi-row sums
    dy = torch.randn(90, H, generator=g)
    ref = OPS.embedding_bwd(dy, ids, V)
    assert ref.dtype == torch.float32 and ref.shape == (V, H)
    untouched = torch.ones(V, dtype=torch.bool)
    untouched[ids] = False
    assert untouched.any() and torch.equal(ref[untouched], torch.zeros_like(ref[untouched]))
    # accuracy: fp64 scatter-add
    exp = torch.zeros(V, H, dtype=torch.float64).index_add_(0, ids, dy.double())
    torch.testing.assert_close(ref.double(), exp, atol=1e-5, rtol=1e-5)
    # serial in the given order: a sequential fp32 loop reproduces the bits
    seq = torch.zeros(V, H)
    for r in range(90):
        seq[ids[r]] = seq[ids[r]] + dy[r]
    assert_same(ref, seq, "serial row order")
    # same canonical rows inside a bigger padded batch, padding removed
    slots = torch.sort(torch.randperm(200, generator=g)[:90]).values
    big_ids = torch.randint(0, V, (200,), generator=g)
    big_dy = torch.randn(200, H, generator=g)
    big_ids[slots], big_dy[slots] = ids, dy
    keep = torch.zeros(200, dtype=torch.bool)
    keep[slots] = True
    for isa_name, nt in settings():
        with setting(isa_name, nt):
            assert_same(OPS.embedding_bwd(big_dy[keep], big_ids[keep], V), ref, f"dE isa={isa_name} threads={nt}")
            assert_same(
                OPS.embedding_bwd(dy.bfloat16(), ids, V), OPS.embedding_bwd(dy.bfloat16().float(), ids, V), "bf16 dy"
            )


def test_embedding_bad_inputs():
    w = table()
    with pytest.raises(RuntimeError, match=r"embedding: .*id 500 .*500"):
        OPS.embedding(torch.tensor([1, 500]), w)
    with pytest.raises(RuntimeError, match=r"embedding: .*id -1"):
        OPS.embedding(torch.tensor([-1]), w)
    with pytest.raises(RuntimeError, match="embedding"):
        OPS.embedding(torch.tensor([1, 2], dtype=torch.int32), w)
    with pytest.raises(RuntimeError, match="embedding"):
        OPS.embedding(torch.tensor([[1, 2]]), w)
    with pytest.raises(RuntimeError, match="embedding"):
        OPS.embedding(torch.tensor([1]), w.half())
    with pytest.raises(RuntimeError, match="embedding_bwd"):
        OPS.embedding_bwd(torch.randn(3, 8), torch.tensor([0, 1]), 10)
    with pytest.raises(RuntimeError, match=r"embedding_bwd: .*id 10"):
        OPS.embedding_bwd(torch.randn(2, 8), torch.tensor([0, 10]), 10)


def test_embedding_nan():
    w = table(10, 16)
    w[3, 5] = float("nan")
    y = OPS.embedding(torch.tensor([3, 4]), w)
    assert torch.isnan(y[0, 5]) and int(torch.isnan(y).sum()) == 1  # gathered as is
    dy = torch.randn(2, 16)
    dy[1, 2] = float("nan")
    dE = OPS.embedding_bwd(dy, torch.tensor([3, 4]), 10)
    assert torch.isnan(dE[4, 2]) and int(torch.isnan(dE).sum()) == 1


def test_embedding_bwd_of_16_mib_and_more_keeps_its_bits():
    """dE >= 16 MiB is allocated through empty_output (huge pages asked for before the zero fill):
    its used rows equal a small table's bitwise and every other row is +0."""
    g = torch.Generator().manual_seed(12)
    ids = torch.randint(0, 100, (40,), generator=g)
    dy = torch.randn(40, 64, generator=g)
    big = torch.ops.ws1_cpu.embedding_bwd(dy, ids, 1 << 16)  # 65536 x 64 fp32 = 16 MiB
    small = torch.ops.ws1_cpu.embedding_bwd(dy, ids, 100)
    assert torch.equal(big[:100].view(torch.int32), small.view(torch.int32))
    assert not big[100:].view(torch.int32).any()
