"""swiglu / silu (+ backward): bitwise row invariance, ISA/thread invariance, silu == swiglu(x, 1),
accuracy vs an fp32 torch reference, bad inputs, NaN propagation."""

import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_ops_check import OPS, assert_close, assert_same, compare, row_invariance  # noqa: E402

torch.manual_seed(0)


def make(n, f, dtype=torch.bfloat16, scale=3.0):
    g = (torch.randn(n, f) * scale).to(dtype)
    u = (torch.randn(n, f) * scale).to(dtype)
    # sprinkle edge values: zeros, large magnitudes, exp range ends
    g[0, :6] = torch.tensor([0.0, -0.0, 90.0, -90.0, 110.0, -110.0]).to(dtype)
    return g, u


@pytest.mark.parametrize("f", [200, 1024])
def test_swiglu_row_invariance(f):
    g, u = make(300, f)
    row_invariance(OPS.swiglu, (g, u), what="swiglu")
    row_invariance(OPS.silu, (g,), what="silu")


def test_swiglu_bwd_row_invariance():
    g, u = make(260, 200)
    dy = torch.randn(260, 200)
    row_invariance(OPS.swiglu_bwd, (dy, g, u), what="swiglu_bwd")
    row_invariance(OPS.silu_bwd, (dy.bfloat16(), g), what="silu_bwd(bf16 dy)")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_silu_is_swiglu_with_ones(dtype):
    g, _ = make(33, 517, dtype)
    ones = torch.ones_like(g)
    assert_same(OPS.silu(g), OPS.swiglu(g, ones), "silu vs swiglu(x, 1)")
    dy = torch.randn(33, 517)
    dg, _ = OPS.swiglu_bwd(dy, g, ones)
    assert_same(OPS.silu_bwd(dy, g), dg, "silu_bwd vs swiglu_bwd(dy, x, 1).dgate")


def test_swiglu_accuracy_and_grad():
    g, u = make(59, 1000)
    g[0, :6] = 0
    y = OPS.swiglu(g, u)
    assert y.dtype == torch.bfloat16
    gr = g.float().requires_grad_()
    ur = u.float().requires_grad_()
    ref = F.silu(gr) * ur
    assert_close(y, ref, 2e-2, 1.6e-2, "swiglu")
    assert_close(OPS.silu(g), F.silu(g.float()), 2e-2, 1.6e-2, "silu")
    dy = torch.randn(59, 1000)
    ref.backward(dy)
    dg, du = OPS.swiglu_bwd(dy, g, u)
    assert dg.dtype == torch.float32 and du.dtype == torch.float32
    assert_close(dg, gr.grad, 2e-2, 1.6e-2, "swiglu dgate")
    assert_close(du, ur.grad, 2e-2, 1.6e-2, "swiglu dup")
    # fp32 inputs stay fp32 and are tighter
    y32 = OPS.swiglu(g.float(), u.float())
    assert y32.dtype == torch.float32
    assert_close(y32, F.silu(g.double()) * u.double(), 1e-5, 1e-5, "swiglu fp32")


def test_swiglu_bad_inputs():
    g, u = make(4, 32)
    with pytest.raises(RuntimeError, match="swiglu"):
        OPS.swiglu(g, u[:, :16])
    with pytest.raises(RuntimeError, match="swiglu"):
        OPS.swiglu(g, u.float())
    with pytest.raises(RuntimeError, match="silu"):
        OPS.silu(torch.ones(4, 4, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="contiguous"):
        OPS.swiglu(g.t(), u.t())
    with pytest.raises(RuntimeError, match="swiglu_bwd"):
        OPS.swiglu_bwd(torch.randn(4, 31), g, u)
    with pytest.raises(RuntimeError, match="silu_bwd"):
        OPS.silu_bwd(torch.randn(4, 32), g.half())


def test_nan_propagates():
    g, u = make(3, 40)
    g[1, 7] = float("nan")
    u[2, 30] = float("nan")
    y = OPS.swiglu(g, u)
    nan = torch.isnan(y)
    assert nan[1, 7] and nan[2, 30] and int(nan.sum()) == 2
    dg, du = OPS.swiglu_bwd(torch.randn(3, 40), g, u)
    assert torch.isnan(dg[1, 7]) and torch.isnan(du[1, 7])
    assert torch.isnan(dg[2, 30])


def test_compare_detects_difference():
    a = torch.randn(8, 9).bfloat16()
    b = a.clone()
    b[3, 4] = b[3, 4] + 1
    assert compare(a, a.clone()) == "same"
    assert compare(a, b) == "different"
