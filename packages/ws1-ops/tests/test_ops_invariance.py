"""Bitwise row invariance of every per-row op, forward and gradients, over the layouts of
ws1_ops.invariance (M in {1,2,3,7,16,59,128,257}, alone, permuted, random positions, left/right
padding, 1 vs 2 threads) — plus the negative controls that show the check can fail."""

import pytest
import torch
import torch.nn.functional as F
from cases import PER_ROW_OPS, make

import ws1_ops
from ws1_ops import invariance
from ws1_ops.invariance import Layout


@pytest.mark.parametrize("op", PER_ROW_OPS)
def test_forward_invariance(op, cpu):
    c = make(op)
    verdicts = invariance.check(c.call, c.rows, c.params, names=c.names)
    assert all(v.passed for v in verdicts), invariance.summarize(verdicts)
    assert len(verdicts) >= 14


@pytest.mark.parametrize("op", PER_ROW_OPS)
def test_gradient_invariance(op, cpu):
    c = make(op, n=100)
    layouts = [lay for lay in invariance.standard_layouts(100) if not lay.name.startswith("M")] + [
        Layout("M7", torch.arange(7)),
        Layout("M59", torch.arange(59)),
    ]
    verdicts = invariance.check(c.call, c.rows, c.params, layouts=layouts, grad=True, names=c.names)
    assert all(v.passed for v in verdicts), invariance.summarize(verdicts)
    # every differentiable input and every parameter gradient was compared in the full-row layouts
    full = next(v for v in verdicts if v.layout == "permuted")
    want = {n for n, t in zip(c.names, c.rows + c.params) if t.is_floating_point()}
    assert set(full.grads) == want


def test_isa_paths_are_bitwise_equal(cpu, monkeypatch):
    import ws1_kernels_cpu

    for op in PER_ROW_OPS:
        c = make(op, n=33)
        outs = {}
        for isa in ("scalar", "avx2", ws1_kernels_cpu.isa()):
            monkeypatch.setenv("WS1_CPU_ISA", isa)
            xs = [t.detach().requires_grad_(t.is_floating_point()) for t in c.rows + c.params]
            out = c.call(*xs, row_keys=torch.arange(33))
            out.backward(torch.ones_like(out))
            outs[isa] = torch.cat(
                [out.detach().float().reshape(-1)] + [t.grad.float().reshape(-1) for t in xs if t.grad is not None]
            )
        base = outs["scalar"]
        for isa, o in outs.items():
            from ws1_contract import bitwise

            r = bitwise(o, base, f"{op} {isa} vs scalar (outputs and gradients)")
            assert r.passed, r.detail


# ---- negative controls: the same harness must flag ordinary kernels ----------------------------


def test_negative_control_torch_linear_fp32_is_not_batch_invariant():
    """torch's default FP32 F.linear (MKL) picks its blocking by M: row 0 alone differs from row 0
    in a batch of 7 or more. The harness must report it, or it could not fail at all."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4096, generator=g)
    w = torch.randn(4096, 4096, generator=g) * 0.02
    verdicts = invariance.check(
        lambda x, w, row_keys: F.linear(x, w), [x], [w], layouts=[Layout("alone-row0", torch.tensor([0]))]
    )
    assert not verdicts[0].passed, "F.linear FP32 looked batch-invariant: the check cannot fail"
    assert "differ in their bits" in verdicts[0].forward.detail


def test_negative_control_perturbed_kernel_is_caught(cpu):
    """A deliberately perturbed det_gemm whose last bit depends on the batch size turns red."""
    c = make("det_gemm")

    def perturbed(x, w, row_keys):
        y = ws1_ops.det_gemm(x, w, row_keys)
        if x.shape[0] > 8:  # a "large-M path" that rounds differently
            y = torch.nextafter(y, torch.full_like(y, float("inf")))
        return y

    verdicts = invariance.check(perturbed, c.rows, c.params)
    bad = {v.layout for v in verdicts if not v.passed}
    assert {"M1", "M2", "M3", "M7"} <= bad and "M16" not in bad


def test_negative_control_batch_order_weight_grad_is_caught():
    """torch_default reduces dW in batch order (no canonical order): permuting rows changes dW's bits."""
    c = make("det_gemm", n=300)
    with ws1_ops.use_candidate("torch_default"):
        verdicts = invariance.check(
            c.call, c.rows, c.params, layouts=[Layout("permuted", torch.randperm(300))], grad=True, names=c.names
        )
    assert not verdicts[0].grads["weight"].passed


def test_attention_isa_paths_are_bitwise_equal(cpu, monkeypatch):
    import ws1_kernels_cpu
    from ws1_contract import bitwise

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(40, h, 128, generator=g).bfloat16() for h in (32, 8, 8))
    cu, pos = torch.tensor([0, 40]), torch.arange(40)
    outs = {}
    for isa in ("scalar", "avx2", ws1_kernels_cpu.isa()):
        monkeypatch.setenv("WS1_CPU_ISA", isa)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        o = ws1_ops.attention(*leaves, cu, cu, pos)
        o.backward(torch.ones_like(o))
        outs[isa] = torch.cat([o.detach().float().reshape(-1)] + [t.grad.reshape(-1) for t in leaves])
    for isa, o in outs.items():
        assert bitwise(o, outs["scalar"], f"attention {isa} vs scalar").passed
