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
    return [bitwise(a, b, f"{op} d{name}") for a, b, name in zip(split, whole, c.names[len(c.rows) :])]


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


PARAM_CALLS = {  # op -> (inputs, weight, call(x, w, row_keys))
    "det_gemm": lambda r: (r(3, 8), r(4, 8), lambda x, w, k: ws1_ops.det_gemm(x, w, k)),
    "lm_head": lambda r: (r(3, 8), r(5, 8), lambda x, w, k: ws1_ops.lm_head(x, w, k)),
    "rms_norm": lambda r: (r(3, 8, dtype=torch.float32), r(8), lambda x, w, k: ws1_ops.rms_norm(x, w, 1e-6, k)),
    "qk_norm": lambda r: (r(3, 2, 8), r(8), lambda x, w, k: ws1_ops.qk_norm(x, w, 1e-6, k)),
    "embedding": lambda r: (torch.tensor([1, 0, 1]), r(4, 8), lambda x, w, k: ws1_ops.embedding(x, w, k)),
}


@pytest.mark.parametrize("op", sorted(PARAM_CALLS))
def test_parameter_gradient_without_row_keys_is_an_error(cpu, op):
    """Outside canonical_grads(), no row_keys used to mean 'rows as given' — batch order, the one
    order that changes with the layout. Now it is an OpInputError naming the op; a frozen weight
    needs no keys, and with keys the gradient is formed."""
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(dtype)

    x, w, call = PARAM_CALLS[op](r)
    with pytest.raises(ws1_ops.OpInputError, match=f"^{op}: a parameter gradient needs row_keys"):
        call(x, w.clone().requires_grad_(), None).float().sum().backward()
    if x.is_floating_point():  # a frozen weight: the input gradient needs no order
        xx = x.clone().requires_grad_()
        call(xx, w, None).float().sum().backward()
        assert xx.grad is not None
    ww = w.clone().requires_grad_()
    call(x, ww, ws1_ops.logical_keys(torch.zeros(3, dtype=torch.int64), torch.arange(3))).float().sum().backward()
    assert ww.grad is not None


def test_cast_once_casts_a_master_once_per_version_with_the_same_bits():
    """Inside ws1_ops.cast_once() every call executing one FP32 master shares one BF16 copy; an
    in-place update makes a new one; outputs and gradients are bitwise those without the scope."""
    from ws1_ops.ops._common import exec_dtype

    g = torch.Generator().manual_seed(5)
    w = torch.randn(64, 32, generator=g).bfloat16().float().requires_grad_()
    x = torch.randn(6, 32, generator=g).bfloat16()
    with ws1_ops.cast_once():
        a, b = exec_dtype(w), exec_dtype(w)
        assert a is b and a.dtype == torch.bfloat16 and torch.equal(a.float(), w.detach())
        with torch.no_grad():
            w.mul_(2)
        c = exec_dtype(w)
        assert c is not a and torch.equal(c.float(), w.detach())
    assert exec_dtype(w) is not exec_dtype(w)  # no scope: a fresh cast per call
    with torch.inference_mode():
        wi = w.detach().clone()
    with ws1_ops.cast_once():  # inference tensors (no version counter): cast per call
        assert torch.equal(exec_dtype(wi).float(), wi)

    def run(scope):
        p = w.detach().clone().requires_grad_()
        keys = torch.arange(6)
        with ws1_ops.use_profile("cpu_bf16"), scope:
            y = ws1_ops.det_gemm(x[:3], p, keys[:3]).float().sum() + ws1_ops.det_gemm(x[3:], p, keys[3:]).float().sum()
            with ws1_ops.canonical_grads():
                y.backward()
        return y.detach(), p.grad

    import contextlib

    y0, g0 = run(contextlib.nullcontext())
    y1, g1 = run(ws1_ops.cast_once())
    assert bitwise(y1, y0).passed and bitwise(g1, g0).passed
