"""Accuracy of the Triton kernels (interpreter) against the FP32 reference with the contract's
BF16 thresholds, forward and backward, and the two cross-node identities. The BF16 roundings are
RNE by integer ops in the kernels, so these are the GPU's rounding points; the interpreter's dot
sums in numpy's order, not the tensor cores' (docs/triton.md)."""

import pytest
import torch
import triton
import triton.language as tl
from cases import PER_ROW_OPS, forward_accuracy, gradient_accuracy, make

import ws1_ops
from ws1_contract import bitwise, within_tolerance
from ws1_ops import reference
from ws1_ops.triton._common import rne_bf16


@triton.jit
def _round(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(y_ptr + offs, rne_bf16(tl.load(x_ptr + offs, mask=ok, other=0.0)), mask=ok)


@pytest.mark.parametrize("op", PER_ROW_OPS)
def test_forward_accuracy(op, tri, contract):
    r = forward_accuracy(make(op, n=48), contract)
    assert r.passed, r.detail


@pytest.mark.parametrize("op", PER_ROW_OPS)
def test_gradient_accuracy(op, tri, contract):
    results = gradient_accuracy(make(op, n=48), contract)
    assert results, "no gradient was checked"
    for r in results:
        assert r.passed, r.detail


def test_rope_matches_the_cpu_kernel_formula_at_large_positions(tri, contract):
    """cos/sin come from the kernel's own FP64 routine, not cos.approx: accurate at 4e4 rad."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 2, 128, generator=g).bfloat16()
    pos = torch.cat([torch.arange(32), torch.randint(30000, 40960, (32,), generator=g)])
    got = ws1_ops.rope(x, pos, 1e6)
    th = contract.resolve("forward_accuracy", "rope", "bfloat16")
    r = within_tolerance(got, reference.rope(x, pos, 1e6), th.atol, th.rtol, "rope")
    assert r.passed, r.detail
    # the FP32 cos/sin themselves: within 1 ulp of FP64 cos/sin of the same FP32 angle
    from ws1_ops.triton import rope as tr

    ang = pos.float()[:, None] * tr.inv_freq(128, 1e6, "cpu")[None, :]
    want_c, want_s = torch.cos(ang.double()).float(), torch.sin(ang.double()).float()
    c = ws1_ops.rope(torch.cat([torch.ones(64, 1, 64), torch.zeros(64, 1, 64)], -1).bfloat16(), pos, 1e6)
    assert (c[:, 0, :64].float() - want_c.bfloat16().float()).abs().max() == 0
    assert (c[:, 0, 64:].float() - want_s.bfloat16().float()).abs().max() == 0


def test_logprob_multi_chunk_vocab(tri, contract):
    """V larger than the lse lane block (4096): the chunk loop and its tail mask."""
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(6, 9001, generator=g) * 4
    t = torch.randint(0, 9001, (6,), generator=g)
    th = contract.resolve("forward_accuracy", "logprob", "bfloat16")
    assert within_tolerance(
        ws1_ops.logprob(logits, t), reference.logprob(logits, t), th.atol, th.rtol, "logprob"
    ).passed
    full = ws1_ops.batch_invariant_logp(logits)
    r = bitwise(ws1_ops.logprob(logits, t), full.gather(1, t[:, None]).squeeze(1), "logprob vs batch_invariant_logp[t]")
    assert r.passed, r.detail


def test_silu_equals_swiglu_with_ones_bitwise(tri):
    x = (torch.randn(37, 1000) * 4).bfloat16()
    r = bitwise(ws1_ops.silu(x), ws1_ops.swiglu(x, torch.ones_like(x)), "silu vs swiglu(x, 1)")
    assert r.passed, r.detail
    xs, xg = x.clone().requires_grad_(), x.clone().requires_grad_()
    dy = torch.randn(37, 1000).bfloat16()
    ws1_ops.silu(xs).backward(dy)
    ws1_ops.swiglu(xg, torch.ones_like(x)).backward(dy)
    assert bitwise(xs.grad, xg.grad, "dsilu vs dswiglu.dgate").passed


def test_logprob_equals_full_log_softmax_at_target_bitwise(tri):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(27, 5000, generator=g) * 3
    t = torch.randint(0, 5000, (27,), generator=g)
    r = bitwise(
        ws1_ops.logprob(logits, t),
        ws1_ops.batch_invariant_logp(logits).gather(1, t[:, None]).squeeze(1),
        "logprob vs batch_invariant_logp[t]",
    )
    assert r.passed, r.detail


def test_nan_propagates_to_its_row_only(tri):
    x = torch.randn(4, 64).bfloat16()
    x[2, 5] = float("nan")
    y = ws1_ops.det_gemm(x, torch.randn(8, 64).bfloat16())
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3]]).all()
    z = ws1_ops.rms_norm(x.float(), torch.ones(64, dtype=torch.bfloat16))
    assert torch.isnan(z[2]).all() and torch.isfinite(z[[0, 1, 3]]).all()


def test_bf16_rounding_is_round_to_nearest_even():
    """The kernels' FP32 -> BF16 rounding (integer ops) equals torch's RNE on ties, near-overflow,
    Inf, signed zeros and subnormals, and keeps NaN a quiet NaN; the interpreter's own cast would
    truncate."""
    import triton
    import triton.language as tl

    from ws1_ops.triton._common import rne_bf16

    @triton.jit
    def _round(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        ok = offs < n
        tl.store(y_ptr + offs, rne_bf16(tl.load(x_ptr + offs, mask=ok, other=0.0)), mask=ok)

    special = [
        1.0 + 2**-8,
        1.0 + 3 * 2**-8,
        1.0 + 2**-8 + 2**-20,
        -(1.0 + 2**-8),
        3.3961e38,
        -3.3961e38,
        float("inf"),
        float("-inf"),
        0.0,
        -0.0,
        1e-40,
        -3e-39,
        float("nan"),
    ]
    x = torch.cat([torch.tensor(special), torch.randn(1011, generator=torch.Generator().manual_seed(0)) * 100])
    from tdev import DEV

    y = torch.empty(1024, dtype=torch.bfloat16, device=DEV)
    _round[(1,)](x.to(DEV), y, 1024, BLOCK=1024)
    y = y.cpu()
    assert torch.equal(y[:12].view(torch.int16), x[:12].bfloat16().view(torch.int16))
    assert torch.equal(y[13:].view(torch.int16), x[13:].bfloat16().view(torch.int16))
    # NaN: quiet, sign and high payload kept — the cpu kernels' rule (f32_to_bf16_bits): 0x7FC00000 -> 0x7FC0
    assert int(y[12:13].view(torch.int16)) == 0x7FC0


def test_det_gemm_fp32_master_weight(tri):
    x = torch.randn(5, 64).bfloat16()
    w32 = (torch.randn(32, 64) * 0.1).requires_grad_()
    y = ws1_ops.det_gemm(x, w32, torch.arange(5))  # a parameter gradient needs row keys
    assert bitwise(y, ws1_ops.det_gemm(x, w32.detach().bfloat16())).passed
    y.float().sum().backward()
    assert w32.grad.dtype == torch.float32


def test_fp32_dy_gemms_keep_fp32_accuracy(tri):
    """lm_head's backward GEMMs with an FP32 dy split it into three BF16 parts (``_gemm``, SPLIT_A):
    error vs float64, relative to sum |dy| |w|, at FP32 level (measured 5e-8 dx, 1.7e-7 dW; torch's FP32
    matmul: 8e-8). The bound fails for dy rounded to BF16 first, i.e. one BF16 MMA (3.5e-4, 1.5e-3)."""
    from ws1_ops.triton.det_gemm import gemm_dw, gemm_dx

    g = torch.Generator().manual_seed(0)
    dy = torch.randn(70, 1000, generator=g) * 1e-3
    w = (torch.randn(1000, 128, generator=g) * 0.1).bfloat16()
    x = torch.randn(70, 128, generator=g).bfloat16()
    perm = torch.arange(70)

    def err(got, a, b):
        exact, scale = a.double() @ b.double(), a.double().abs() @ b.double().abs()
        return float(((got.double() - exact).abs() / scale).max())

    from tdev import to_dev

    dx = lambda a: gemm_dx(*to_dev((a, None, w))).cpu()  # noqa: E731
    dw = lambda a: gemm_dw(*to_dev((a, x, perm))).cpu()  # noqa: E731
    assert err(dx(dy), dy, w) < 1e-6
    assert err(dw(dy), dy.T, x) < 1e-6
    one_mma = dy.bfloat16().float()
    assert err(dx(one_mma), dy, w) > 1e-4
    assert err(dw(one_mma), dy.T, x) > 1e-4


def test_norm_dweight_sums_chunks_of_canonical_rows_in_order(tri):
    """norm_dw's order (rms_norm.py): chunks of DW_CHUNK canonical rows, each summed from 0 step by step, then the
    chunk partials added in ascending order. Column 0 holds 2^24 in row 0 and 1.0 in rows 256, 320, 384, 448 (four
    steps of chunk 1), rstd = 1, dy = 1: chunk 1's partial is 4 and dw[0] = 2^24 + 4 exactly, where one chain over
    every row (the previous kernel) rounds each + 1 back to 2^24 (a tie, to even). Rows reach the kernel through
    ``perm``: reversed storage, the canonical order given by perm, the same bits."""
    from tdev import to_cpu, to_dev

    from ws1_ops.triton import rms_norm as trn

    R, H = 600, 40
    x = torch.zeros(R, H)
    x[0, 0] = 2.0**24
    x[[256, 320, 384, 448], 0] = 1.0
    dy, rstd = torch.ones(R, H), torch.ones(R)
    dw = to_cpu(trn.norm_dw(*to_dev((dy, x, rstd, torch.arange(R)))))
    assert float(dw[0]) == 2.0**24 + 4 and bool((dw[1:] == 0).all()), float(dw[0])
    flip = torch.arange(R - 1, -1, -1)
    again = to_cpu(trn.norm_dw(*to_dev((dy[flip], x[flip], rstd[flip], flip))))
    assert bitwise(again, dw, "rows stored reversed, canonical order by perm").passed
