"""Bitwise row invariance of the Triton kernels in the interpreter, forward and gradients, over
the cpu tests' transforms (batch sizes crossing the 64-row tile edge, rows alone, permuted,
random positions, left/right padding) — and negative controls showing the check can fail."""

import dataclasses

import pytest
import torch
from cases import PER_ROW_OPS, make
from tcases import N_ROWS, grad_layouts, layouts

import ws1_ops
from ws1_ops import invariance
from ws1_ops.invariance import Layout


@pytest.mark.parametrize("op", PER_ROW_OPS)
def test_forward_invariance(op, tri):
    c = make(op, n=N_ROWS)
    verdicts = invariance.check(c.call, c.rows, c.params, layouts=layouts(), names=c.names)
    assert all(v.passed for v in verdicts), invariance.summarize(verdicts)
    assert len(verdicts) >= 14


@pytest.mark.parametrize("op", PER_ROW_OPS)
def test_gradient_invariance(op, tri):
    c = make(op, n=N_ROWS)
    verdicts = invariance.check(c.call, c.rows, c.params, layouts=grad_layouts(), grad=True, names=c.names)
    assert all(v.passed for v in verdicts), invariance.summarize(verdicts)
    # every differentiable input and every parameter gradient was compared in a full-row layout
    full = next(v for v in verdicts if v.layout == "permuted")
    assert set(full.grads) == {n for n, t in zip(c.names, c.rows + c.params) if t.is_floating_point()}


# ---- negative controls: the same harness flags kernels built the wrong way ---------------------


def _lm_head_with(cfg_for_m, split_k_above=None):
    """lm_head (the GEMM main loop with its FP32 accumulator stored as is, so every bit of the
    reduction is visible) launched through the real kernel (pointer loads), but with a launch config
    chosen by M or a split-K variant above some M: exactly what docs/design.md §7b forbids. (With a
    BF16 output the last FP32 bits rarely survive the rounding on these small shapes: a weaker probe.)"""
    from tdev import DEV

    from ws1_ops.triton import lm_head as tl_
    from ws1_ops.triton._common import dot_f32

    def run(x, w, row_keys):
        x, w = x.contiguous().to(DEV), w.bfloat16().contiguous().to(DEV)
        M, K = x.shape
        N = w.shape[0]
        if split_k_above is not None and M > split_k_above:
            parts = [
                tl_.lm_head(x[:, k : k + K // 4].contiguous(), w[:, k : k + K // 4].contiguous())
                for k in range(0, K, K // 4)
            ]
            return (((parts[0] + parts[1]) + parts[2]) + parts[3]).cpu()
        cfg = cfg_for_m(M)
        y = torch.empty(M, N, dtype=torch.float32, device=DEV)
        tl_.lm_head_fwd_kernel[(-(-M // cfg.BM) * -(-N // cfg.BN),)](
            x,
            w,
            y,
            M,
            N,
            K,
            x.stride(0),
            w.stride(0),
            y.stride(0),
            BM=cfg.BM,
            BN=cfg.BN,
            BK=cfg.BK,
            GROUP_M=cfg.GROUP_M,
            DOT_F32=dot_f32(x),
            TMA=False,
            num_warps=cfg.num_warps,
        )
        return y.cpu()

    return run


def _one_config():
    from ws1_ops.triton._gemm import BF16_TIERS

    return BF16_TIERS["sm80"][0].cfg


def test_the_probe_itself_is_invariant_with_the_fixed_config(tri):
    cfg = _one_config()
    c = make("lm_head", n=N_ROWS)
    verdicts = invariance.check(_lm_head_with(lambda M: cfg), c.rows, c.params, layouts=layouts())
    assert all(v.passed for v in verdicts), invariance.summarize(verdicts)


@pytest.mark.interpreter_only
def test_negative_control_bk_chosen_by_m_is_caught(tri):
    """A 'small-M' BLOCK_K: a row's K loop then depends on the batch size. Red exactly for the
    layouts whose M falls on the other side of the threshold from the canonical batch.

    Interpreter only: there each BK block is one numpy sum, so BK is part of the order. On the GPU
    a BK-deep tl.dot is BK/16 chained k16 MMAs, the same chain for BK 32 and 64 (_gemm's docstring),
    so this variant is not certain to be red there; the split-K control below is."""
    cfg = _one_config()
    run = _lm_head_with(lambda M: cfg if M > 8 else dataclasses.replace(cfg, BK=32))
    c = make("lm_head", n=N_ROWS)
    verdicts = invariance.check(run, c.rows, c.params, layouts=layouts())
    bad = {v.layout for v in verdicts if not v.passed}
    assert {"M1", "M2", "M3", "M7", "alone-row0", "alone-row35", "alone-row69"} == bad, invariance.summarize(verdicts)


def test_negative_control_split_k_is_caught(tri):
    """Split-K = 4 above M = 8 (four K chunks, partials summed afterwards) changes the bits: on the
    GPU each partial is its own FP32 chain, rounded before the sum.

    (In the interpreter a split exactly at BK boundaries would not show: its dot adds the
    accumulator after each block product, which is what such a split does too. Chunks of K/4 = 32
    < BK make the split visible there.)"""
    run = _lm_head_with(lambda M: _one_config(), split_k_above=8)
    c = make("lm_head", n=N_ROWS)
    verdicts = invariance.check(run, c.rows, c.params, layouts=layouts())
    bad = {v.layout for v in verdicts if not v.passed}
    assert {"M1", "M2", "M3", "M7", "alone-row0"} <= bad and "M16" not in bad, invariance.summarize(verdicts)


def test_negative_control_batch_order_weight_grad_is_caught(tri):
    """The real dW kernel fed the rows in batch order instead of canonical order: a permutation
    of the batch changes dW's bits."""
    from tdev import swapped

    c = make("det_gemm", n=N_ROWS)
    lay = [Layout("permuted", torch.randperm(N_ROWS, generator=torch.Generator().manual_seed(3)))]
    batch_order = lambda real: dataclasses.replace(  # noqa: E731
        real, param_grad=lambda dy, x, perm: real.param_grad(dy, x, torch.arange(x.shape[0], device=x.device))
    )
    with swapped("det_gemm", batch_order):
        verdicts = invariance.check(c.call, c.rows, c.params, layouts=lay, grad=True, names=c.names)
    assert verdicts[0].forward.passed and verdicts[0].grads["x"].passed
    assert not verdicts[0].grads["weight"].passed


def test_canonical_grads_split_calls_equal_one_call(tri):
    """B1 (four calls, losses summed, one backward) == BN for every parameter-gradient kernel."""
    n = 40
    keys = torch.randperm(n, generator=torch.Generator().manual_seed(2))
    for op in ("det_gemm", "lm_head", "rms_norm", "qk_norm", "embedding"):
        c = make(op, n=n)
        dy = None

        def grads(parts, c=c):
            nonlocal dy
            ps = [p.detach().clone().requires_grad_() for p in c.params]
            total = 0
            for lo, hi in parts:
                out = c.call(*[r[lo:hi] for r in c.rows], *ps, row_keys=keys[lo:hi])
                if dy is None:
                    dy = torch.randn((n, *out.shape[1:]), generator=torch.Generator().manual_seed(4)).to(out.dtype)
                total = total + (out.float() * dy[lo:hi].float()).sum()
            with ws1_ops.canonical_grads():
                total.backward()
            return ps[0].grad

        from ws1_contract import bitwise

        r = bitwise(grads([(0, 9), (9, 22), (22, 31), (31, n)]), grads([(0, n)]), f"{op} dweight B1 vs BN")
        assert r.passed, r.detail
