"""rope: bitwise row invariance (a token's rotation depends only on its position), fp32/bf16, inverse =
backward (transpose), accuracy vs an fp64 HF rotate-half reference, bad inputs, NaN."""

import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_ops_check import OPS, assert_close, assert_same, row_invariance  # noqa: E402

THETA = 1e6


def ref_rope(x, pos, theta=THETA, inverse=False):
    D = x.shape[-1]
    # angle in fp32, as the contract (and HF) computes it: (float)pos * (float)inv_freq; cos/sin in fp64
    inv = (1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))).float()
    ang = (pos.float()[:, None] * inv[None, :]).double()
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    if inverse:
        s = -s
    xd = x.double()
    x1, x2 = xd[..., : D // 2], xd[..., D // 2 :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def make(t, nh, d, dtype=torch.bfloat16, seed=0, maxpos=4096):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, nh, d, generator=g).to(dtype), torch.randint(0, maxpos, (t,), generator=g)


@pytest.mark.parametrize("d,dtype", [(128, torch.bfloat16), (72, torch.float32)])
def test_rope_row_invariance(d, dtype):
    x, pos = make(300, 4, d, dtype)
    row_invariance(lambda xb, pb: OPS.rope(xb, pb, THETA, False), (x, pos), what="rope")
    row_invariance(
        lambda xb, pb: OPS.rope(xb, pb, THETA, True), (x.float(), pos), sizes=(1, 7, 59), what="rope inverse"
    )


def test_rope_prefill_vs_decode():
    x, _ = make(40, 8, 128)
    pos = torch.arange(40)
    full = OPS.rope(x, pos, THETA, False)
    for t in (0, 17, 39):
        assert_same(OPS.rope(x[t : t + 1], pos[t : t + 1], THETA, False), full[t : t + 1], f"decode token {t}")


def test_rope_accuracy_and_backward():
    x, pos = make(59, 8, 128, maxpos=40000)
    y = OPS.rope(x, pos, THETA, False)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    assert_close(y, ref_rope(x, pos), 2e-2, 1.6e-2, "rope bf16")
    xf = x.float()
    yf = OPS.rope(xf, pos, THETA, False)
    assert yf.dtype == torch.float32
    assert_close(yf, ref_rope(xf, pos), 1e-4, 1e-4, "rope fp32")
    assert_close(OPS.rope(yf, pos, THETA, True), xf, 1e-4, 1e-4, "inverse(rope(x))")
    # backward: d/dx <rope(x), dy> = rope^T(dy) = rope(dy, inverse=True)
    dy = torch.randn(59, 8, 128)
    xr = xf.double().requires_grad_()
    ref_rope(xr, pos).backward(dy.double())
    dx = OPS.rope(dy, pos, THETA, True)
    assert dx.dtype == torch.float32
    assert_close(dx, xr.grad, 2e-2, 1.6e-2, "rope backward")


def test_rope_bad_inputs():
    x, pos = make(4, 2, 16)
    with pytest.raises(RuntimeError, match="rope"):
        OPS.rope(x[..., :15].contiguous(), pos, THETA, False)  # odd head dim
    with pytest.raises(RuntimeError, match="rope"):
        OPS.rope(x.view(4, 32), pos, THETA, False)
    with pytest.raises(RuntimeError, match="rope"):
        OPS.rope(x, pos[:3], THETA, False)
    with pytest.raises(RuntimeError, match="rope"):
        OPS.rope(x, pos.int(), THETA, False)
    with pytest.raises(RuntimeError, match="rope"):
        OPS.rope(x.half(), pos, THETA, False)
    with pytest.raises(RuntimeError, match="rope"):
        OPS.rope(x, torch.tensor([0, 1, -2, 3]), THETA, False)


def test_rope_nan():
    x, pos = make(3, 2, 16)
    x[1, 0, 3] = float("nan")
    y = OPS.rope(x, pos, THETA, False)
    nan = torch.isnan(y)
    assert nan[1, 0, 3] and nan[1, 0, 11] and int(nan.sum()) == 2  # its pair only


def test_rope_is_the_documented_formula_bitwise():
    # cos/sin: fp32 angle = (float)pos * (float)inv_freq, then cos/sin in fp64 rounded to fp32;
    # out1 = x1*c - x2*s, out2 = x2*c + x1*s in fp32 (separate roundings), then one RNE to bf16.
    x, pos = make(37, 3, 40, maxpos=100000)
    D = 40
    inv = (1.0 / (THETA ** (torch.arange(0, D, 2, dtype=torch.float64) / D))).float()
    ang = pos.float()[:, None] * inv[None, :]
    # libm (glibc) cos/sin through Python's math module, as the kernel calls std::cos/std::sin
    c = torch.tensor([[math.cos(a) for a in row] for row in ang.double().tolist()]).float()[:, None, :]
    s = torch.tensor([[math.sin(a) for a in row] for row in ang.double().tolist()]).float()[:, None, :]
    xf = x.float()
    x1, x2 = xf[..., : D // 2], xf[..., D // 2 :]
    fwd = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)
    inv_ = torch.cat((x1 * c + x2 * s, x2 * c - x1 * s), -1)
    assert_same(OPS.rope(x, pos, THETA, False), fwd.bfloat16(), "bf16 forward")
    assert_same(OPS.rope(xf, pos, THETA, False), fwd, "fp32 forward")
    assert_same(OPS.rope(xf, pos, THETA, True), inv_, "fp32 inverse")
