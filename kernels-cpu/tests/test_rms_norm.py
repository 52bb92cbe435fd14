"""rms_norm / qk_norm (+ backward): bitwise row invariance (batch size, row position, order, threads,
ISA), dw given the same rows in the same canonical order, qk_norm == rms_norm on the flattened heads,
accuracy vs an fp32/fp64 torch reference, bad inputs, NaN propagation."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_ops_check import OPS, assert_close, assert_same, row_invariance, setting, settings  # noqa: E402

EPS = 1e-6


def make(n, h, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, h, generator=g) * 2).to(dtype)
    w = (1 + 0.2 * torch.randn(h, generator=g)).bfloat16()
    return x, w


def ref_fwd(x, w):
    xd = x.double()
    r = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS)
    return xd * r * w.double(), r.squeeze(-1)


@pytest.mark.parametrize("h,dtype", [(1000, torch.float32), (256, torch.bfloat16)])
def test_rms_norm_row_invariance(h, dtype):
    x, w = make(300, h, dtype)
    row_invariance(lambda xb: OPS.rms_norm(xb, w, EPS), (x,), what="rms_norm")


def test_rms_norm_bwd_dx_row_invariance():
    x, w = make(260, 264)
    _, rstd = OPS.rms_norm(x, w, EPS)
    dy = torch.randn(260, 264)
    row_invariance(lambda d, xb, r: OPS.rms_norm_bwd(d, xb, w, r)[0], (dy, x, rstd), what="rms_norm_bwd dx")


def test_rms_norm_dw_canonical_order():
    # dw is a serial sum over rows in the given order: the same canonical rows, cut out of a bigger padded
    # batch (padding rows removed), give the same bits; thread count and ISA do not matter either.
    g = torch.Generator().manual_seed(1)
    x, w = make(64, 600)
    dy = torch.randn(64, 600, generator=g)
    _, rstd = OPS.rms_norm(x, w, EPS)
    ref = OPS.rms_norm_bwd(dy, x, w, rstd)[1]
    big_x = torch.randn(150, 600, generator=g)
    big_dy = torch.randn(150, 600, generator=g)
    slots = torch.sort(torch.randperm(150, generator=g)[:64]).values  # canonical rows keep their order
    big_x[slots], big_dy[slots] = x, dy
    _, big_rstd = OPS.rms_norm(big_x, w, EPS)
    keep = torch.zeros(150, dtype=torch.bool)
    keep[slots] = True
    for isa_name, nt in settings():
        with setting(isa_name, nt):
            dw = OPS.rms_norm_bwd(big_dy[keep], big_x[keep], w, big_rstd[keep])[1]
            assert_same(dw, ref, f"dw isa={isa_name} threads={nt}")


def test_rms_norm_accuracy_and_grad():
    for dtype in (torch.float32, torch.bfloat16):
        x, w = make(59, 1000, dtype)
        y, rstd = OPS.rms_norm(x, w, EPS)
        assert y.dtype == torch.bfloat16 and rstd.dtype == torch.float32 and rstd.shape == (59,)
        yr, rr = ref_fwd(x, w)
        assert_close(y, yr, 5e-2, 2e-2, "rms_norm y")
        assert_close(rstd, rr, 1e-6, 1e-5, "rms_norm rstd")
        xr = x.float().requires_grad_()
        wr = w.float().requires_grad_()
        out = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + EPS) * wr
        dy = torch.randn(59, 1000)
        out.backward(dy)
        dx, dw = OPS.rms_norm_bwd(dy, x, w, rstd)
        assert dx.dtype == torch.float32 and dw.dtype == torch.float32
        assert_close(dx, xr.grad, 5e-2, 2e-2, "rms_norm dx")
        assert_close(dw, wr.grad, 5e-2, 2e-2, "rms_norm dw")
        dxb, _ = OPS.rms_norm_bwd(dy.bfloat16(), x, w, rstd)  # bf16 dy accepted
        assert_close(dxb, xr.grad, 5e-2, 2e-2, "rms_norm dx (bf16 dy)")


def test_rms_norm_leading_dims():
    x, w = make(12, 64)
    y, r = OPS.rms_norm(x.view(3, 4, 64), w, EPS)
    assert y.shape == (3, 4, 64) and r.shape == (3, 4)
    y2, r2 = OPS.rms_norm(x, w, EPS)
    assert_same(y.view(12, 64), y2)
    assert_same(r.view(12), r2)


def test_qk_norm_matches_rms_core_and_invariance():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(130, 8, 128, generator=g).bfloat16()
    w = (1 + 0.2 * torch.randn(128, generator=g)).bfloat16()
    y, r = OPS.qk_norm(x, w, EPS)
    assert y.shape == x.shape and r.shape == (130, 8)
    y2, r2 = OPS.rms_norm(x.view(-1, 128), w, EPS)
    assert_same(y.view(-1, 128), y2)
    assert_same(r.view(-1), r2)
    row_invariance(lambda xb: OPS.qk_norm(xb, w, EPS), (x,), sizes=(1, 3, 16, 59, 128), what="qk_norm")
    yr, _ = ref_fwd(x, w)
    assert_close(y, yr, 5e-2, 2e-2, "qk_norm y")
    dy = torch.randn(130, 8, 128, generator=g)
    dx, dw = OPS.qk_norm_bwd(dy, x, w, r)
    assert dx.shape == x.shape and dw.shape == (128,)
    dx2, dw2 = OPS.rms_norm_bwd(dy.view(-1, 128), x.view(-1, 128), w, r.view(-1))
    assert_same(dx.view(-1, 128), dx2)
    assert_same(dw, dw2)
    row_invariance(
        lambda d, xb, rb: OPS.qk_norm_bwd(d, xb, w, rb)[0], (dy, x, r), sizes=(1, 7, 59), what="qk_norm_bwd dx"
    )
    xr = x.float().requires_grad_()
    wr = w.float().requires_grad_()
    (xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + EPS) * wr).backward(dy)
    assert_close(dx, xr.grad, 5e-2, 2e-2, "qk_norm dx")
    assert_close(dw, wr.grad, 5e-2, 2e-2, "qk_norm dw")


def test_bad_inputs():
    x, w = make(4, 64)
    with pytest.raises(RuntimeError, match="rms_norm"):
        OPS.rms_norm(x.half(), w, EPS)
    with pytest.raises(RuntimeError, match="rms_norm"):
        OPS.rms_norm(x, w[:32], EPS)
    with pytest.raises(RuntimeError, match="contiguous"):
        OPS.rms_norm(x.t(), w[:4], EPS)
    with pytest.raises(RuntimeError, match="qk_norm"):
        OPS.qk_norm(x.bfloat16(), w, EPS)  # rank 2
    _, r = OPS.rms_norm(x, w, EPS)
    with pytest.raises(RuntimeError, match="rms_norm_bwd"):
        OPS.rms_norm_bwd(torch.randn(4, 32), x, w, r)
    with pytest.raises(RuntimeError, match="rms_norm_bwd"):
        OPS.rms_norm_bwd(torch.randn(4, 64), x, w, r[:3])
    with pytest.raises(RuntimeError, match="qk_norm_bwd"):
        OPS.qk_norm_bwd(torch.randn(4, 64), x, w, r)


def test_nan_propagates_to_its_row_only():
    x, w = make(5, 48)
    x[2, 7] = float("nan")
    y, r = OPS.rms_norm(x, w, EPS)
    assert torch.isnan(r[2]) and torch.isnan(y[2]).all()
    assert not torch.isnan(r[[0, 1, 3, 4]]).any() and not torch.isnan(y[[0, 1, 3, 4]]).any()
    dx, dw = OPS.rms_norm_bwd(torch.randn(5, 48), x, w, r)
    assert torch.isnan(dx[2]).all() and not torch.isnan(dx[[0, 1, 3, 4]]).any()
    assert torch.isnan(dw).all()  # every column sums the NaN row
