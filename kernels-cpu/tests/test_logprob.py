"""logprob / batch_invariant_logp (+ backward): bitwise row invariance, logprob == gather of the full
log-softmax bitwise, accuracy vs fp64 log_softmax, gradients vs autograd, bad inputs, NaN, and the
negative control showing the invariance check can fail."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_ops_check import OPS, assert_close, assert_same, compare, row_invariance  # noqa: E402


def make(t, v, seed=0, scale=4.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, v, generator=g) * scale
    return x, torch.randint(0, v, (t,), generator=g)


@pytest.mark.parametrize("v", [1000, 4099])
def test_logprob_row_invariance(v):
    x, t = make(300, v)
    row_invariance(OPS.logprob, (x, t), what="logprob")
    row_invariance(OPS.batch_invariant_logp, (x,), sizes=(1, 3, 16, 59, 257), what="batch_invariant_logp")


def test_logprob_bwd_row_invariance():
    x, t = make(260, 1000)
    lp, lse = OPS.logprob(x, t)
    g = torch.randn(260)
    row_invariance(OPS.logprob_bwd, (g, x, lse, t), sizes=(1, 2, 7, 59, 257), what="logprob_bwd")
    full, _ = OPS.batch_invariant_logp(x)
    gg = torch.randn(260, 1000)
    row_invariance(OPS.batch_invariant_logp_bwd, (gg, full), sizes=(1, 2, 7, 59, 257), what="batch_invariant_logp_bwd")


def test_logprob_equals_full_gather():
    x, t = make(64, 3001)
    lp, lse = OPS.logprob(x, t)
    full, lse2 = OPS.batch_invariant_logp(x)
    assert_same(lse, lse2, "lse shared")
    assert_same(lp, full.gather(1, t[:, None]).squeeze(1), "logprob vs batch_invariant_logp gather")


def test_logprob_accuracy_and_grad():
    x, t = make(27, 5000)
    x[0, :3] = torch.tensor([60.0, -60.0, 0.0])
    lp, lse = OPS.logprob(x, t)
    ref = torch.log_softmax(x.double(), -1)
    assert_close(lp, ref.gather(1, t[:, None]).squeeze(1), 6e-2, 0, "logprob")
    assert_close(lse, torch.logsumexp(x.double(), -1), 1e-4, 0, "lse")
    full, _ = OPS.batch_invariant_logp(x)
    assert_close(full, ref, 6e-2, 0, "batch_invariant_logp")
    # gradients vs autograd
    g = torch.randn(27)
    xr = x.clone().requires_grad_()
    torch.log_softmax(xr, -1).gather(1, t[:, None]).squeeze(1).backward(g)
    assert_close(OPS.logprob_bwd(g, x, lse, t), xr.grad, 6e-2, 0, "logprob_bwd")
    gg = torch.randn(27, 5000)
    xr.grad = None
    torch.log_softmax(xr, -1).backward(gg)
    assert_close(OPS.batch_invariant_logp_bwd(gg, full), xr.grad, 6e-2, 0, "batch_invariant_logp_bwd")


def test_exp_accuracy_over_range():
    # the one explicit exp, seen through log-softmax of [0, x]: logp[1] = x - log(1 + e^x)
    xs = torch.linspace(-100, 80, 4001)
    logits = torch.stack([torch.zeros_like(xs), xs], 1)
    full, _ = OPS.batch_invariant_logp(logits)
    assert_close(full, torch.log_softmax(logits.double(), -1), 1e-5, 1e-6, "exp range")


def test_logprob_bad_inputs():
    x, t = make(4, 10)
    with pytest.raises(RuntimeError, match=r"logprob: .*target.* 10 .*10"):
        OPS.logprob(x, torch.tensor([0, 1, 10, 2]))
    with pytest.raises(RuntimeError, match="logprob"):
        OPS.logprob(x, torch.tensor([0, 1, -1, 2]))
    with pytest.raises(RuntimeError, match="logprob"):
        OPS.logprob(x.bfloat16(), t)
    with pytest.raises(RuntimeError, match="logprob"):
        OPS.logprob(x, t[:3])
    with pytest.raises(RuntimeError, match="logprob"):
        OPS.logprob(x[None], t)
    with pytest.raises(RuntimeError, match="batch_invariant_logp"):
        OPS.batch_invariant_logp(x.view(-1))
    with pytest.raises(RuntimeError, match="logprob_bwd"):
        OPS.logprob_bwd(torch.randn(3), x, torch.randn(4), t)
    with pytest.raises(RuntimeError, match="batch_invariant_logp_bwd"):
        OPS.batch_invariant_logp_bwd(torch.randn(4, 9), x)


def test_logprob_nan_propagates_to_its_row():
    x, t = make(3, 100)
    x[1, 50] = float("nan")
    lp, lse = OPS.logprob(x, t)
    assert torch.isnan(lse[1]) and torch.isnan(lp[1])
    assert not torch.isnan(lse[[0, 2]]).any() and not torch.isnan(lp[[0, 2]]).any()
    full, _ = OPS.batch_invariant_logp(x)
    assert torch.isnan(full[1]).all() and not torch.isnan(full[[0, 2]]).any()


def test_negative_control_order_dependent_reduction_is_detected():
    # the same check (compare / assert_same) must report "different" for an order-dependent computation:
    # logsumexp over a row in one pass vs combined from chunks of 97 gives different bits on some rows.
    x, _ = make(64, 4099)
    one = torch.logsumexp(x, -1)
    chunked = torch.logsumexp(torch.stack([torch.logsumexp(c, -1) for c in x.split(97, dim=1)], -1), -1)
    torch.testing.assert_close(one, chunked)  # same value up to rounding...
    assert compare(one, chunked) == "different"  # ...but the bitwise check sees the order change
    with pytest.raises(AssertionError, match="not bitwise identical"):
        assert_same(one, chunked, "negative control")
