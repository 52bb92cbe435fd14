"""Accuracy of every op against its FP32 reference, forward and backward, with the contract's
thresholds (no private atol), and the two cross-node identities."""

import pytest
import torch
from cases import PER_ROW_OPS, forward_accuracy, gradient_accuracy, make

import ws1_ops
from ws1_contract import bitwise


@pytest.mark.parametrize("op", PER_ROW_OPS)
def test_forward_accuracy(op, cpu, contract):
    r = forward_accuracy(make(op, n=64), contract)
    assert r.passed, r.detail


@pytest.mark.parametrize("op", PER_ROW_OPS)
def test_gradient_accuracy(op, cpu, contract):
    results = gradient_accuracy(make(op, n=64), contract)
    assert results, "no gradient was checked"
    for r in results:
        assert r.passed, r.detail


def test_silu_equals_swiglu_with_ones_bitwise(cpu):
    x = (torch.randn(37, 1000) * 4).bfloat16()
    r = bitwise(ws1_ops.silu(x), ws1_ops.swiglu(x, torch.ones_like(x)), "silu vs swiglu(x, 1)")
    assert r.passed, r.detail
    xs, xg = x.clone().requires_grad_(), x.clone().requires_grad_()
    dy = torch.randn(37, 1000).bfloat16()
    ws1_ops.silu(xs).backward(dy)
    ws1_ops.swiglu(xg, torch.ones_like(x)).backward(dy)
    assert bitwise(xs.grad, xg.grad, "dsilu vs dswiglu.dgate").passed


def test_logprob_equals_full_log_softmax_at_target_bitwise(cpu):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(27, 151936, generator=g) * 3
    t = torch.randint(0, 151936, (27,), generator=g)
    sel = ws1_ops.logprob(logits, t)
    full = ws1_ops.batch_invariant_logp(logits)
    r = bitwise(sel, full.gather(1, t[:, None]).squeeze(1), "logprob vs batch_invariant_logp[t]")
    assert r.passed, r.detail


def test_fp32_master_weight_gets_fp32_grad(cpu):
    x = torch.randn(5, 64).bfloat16()
    w32 = (torch.randn(32, 64) * 0.1).requires_grad_()
    y = ws1_ops.det_gemm(x, w32, torch.arange(5))  # a parameter gradient needs row keys
    # the forward executes the BF16 rounding of the master copy
    assert bitwise(y, ws1_ops.det_gemm(x, w32.detach().bfloat16())).passed
    y.float().sum().backward()
    assert w32.grad.dtype == torch.float32
