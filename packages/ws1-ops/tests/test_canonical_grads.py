"""canonical_grads(): a parameter's gradient over rows split across calls (the B1 cell: four
B=1 forwards, losses summed, one backward) equals the single-call gradient bitwise."""

import pytest
import torch
from cases import make

import ws1_ops
from ws1_contract import bitwise


def _split_vs_whole(op, splits, scoped=True, n=60):
    c = make(op, n=n)
    keys = torch.randperm(n, generator=torch.Generator().manual_seed(2))  # logical keys, any order
    dy = None

    def grads(parts):
        nonlocal dy
        ps = [p.detach().clone().requires_grad_() for p in c.params]
        total = 0
        for lo, hi in parts:
            out = c.call(*[r[lo:hi] for r in c.rows], *ps, row_keys=keys[lo:hi])
            if dy is None:
                dy = torch.randn((n, *out.shape[1:]), generator=torch.Generator().manual_seed(4)).to(out.dtype)
            total = total + (out.float() * dy[lo:hi].float()).sum()
        if scoped:
            with ws1_ops.canonical_grads():
                total.backward()
        else:
            total.backward()
        return [p.grad for p in ps]

    whole = grads([(0, n)])
    split = grads(splits)
    return [bitwise(a, b, f"{op} d{name}") for a, b, name in zip(split, whole, c.names[len(c.rows):])]


@pytest.mark.parametrize("op", ["det_gemm", "lm_head", "rms_norm", "qk_norm", "embedding"])
def test_split_calls_equal_one_call(op, cpu):
    res = _split_vs_whole(op, [(0, 11), (11, 27), (27, 40), (40, 60)])
    assert res and all(r.passed for r in res), [r.detail for r in res]


def test_negative_control_without_the_scope_split_calls_differ(cpu):
    """Without canonical_grads(), autograd adds the per-call partial dW's: the bits change."""
    res = _split_vs_whole("det_gemm", [(0, 11), (11, 27), (27, 40), (40, 60)], scoped=False)
    assert not res[0].passed


def test_missing_row_keys_is_an_error(cpu):
    x = torch.randn(3, 8).bfloat16()
    w = torch.randn(4, 8).bfloat16().requires_grad_()
    with pytest.raises(ValueError, match="needs row_keys"):
        with ws1_ops.canonical_grads():
            ws1_ops.det_gemm(x, w).float().sum().backward()
