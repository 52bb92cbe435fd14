"""Tests for the ws1_cpu GEMM family: det_gemm, lm_head, gemm.

The contract under test: every output element is ``acc = +0.0f; for k ascending:
acc = fmaf(a[m,k], b[n,k], acc)``, then (for bf16 output) one RNE rounding. So results are
bitwise independent of M, row position, row order, thread count and ISA path, and equal an exact
reference. For bf16 inputs the reference is exact in plain torch: the product of two bf16 values
has <= 16 significant bits, so it is exact in fp32 and ``fmaf(a, b, acc) == fp32(acc + a*b)``;
a Python loop over k of fp32 ``acc = acc + a[:, k, None] * b[:, k]`` reproduces the kernel's bits.
bf16 x bf16 operands follow the BF16 unit's flush rules (DAZ inputs, FTZ results, tininess before
rounding) on every path, so the avx512bf16 path (VDPBF16PS) gives the same bits as the others; data
that never comes near FLT_MIN is unaffected, and the flush tests below pin the rules.
"""

import os

import pytest
import torch
import torch.nn.functional as F

import ws1_kernels_cpu  # noqa: F401  registers torch.ops.ws1_cpu

ops = torch.ops.ws1_cpu
ISAS = [i for i in ("scalar", "avx2", "avx512", "avx512bf16")]


def _supported_isas():
    out = []
    old = os.environ.get("WS1_CPU_ISA")
    try:
        for isa in ISAS:
            os.environ["WS1_CPU_ISA"] = isa
            try:
                ops.isa()
                out.append(isa)
            except RuntimeError:
                pass
    finally:
        _restore_isa(old)
    return out


def _restore_isa(old):
    if old is None:
        os.environ.pop("WS1_CPU_ISA", None)
    else:
        os.environ["WS1_CPU_ISA"] = old


class use_isa:
    def __init__(self, isa):
        self.isa = isa

    def __enter__(self):
        self.old = os.environ.get("WS1_CPU_ISA")
        if self.isa is None:
            os.environ.pop("WS1_CPU_ISA", None)
        else:
            os.environ["WS1_CPU_ISA"] = self.isa

    def __exit__(self, *exc):
        _restore_isa(self.old)


class num_threads:
    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.old = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.old)


SUPPORTED = _supported_isas()


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)


def same_bits(x, y):
    return x.shape == y.shape and x.dtype == y.dtype and torch.equal(bits(x), bits(y))


def exact_ref_bf16_inputs(a, b):
    """Serial-k fp32 fma chain, exact for bf16 inputs (products are exact in fp32)."""
    assert a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16
    af, bf = a.float(), b.float()
    acc = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float32)
    for k in range(a.shape[1]):
        acc = acc + af[:, k, None] * bf[None, :, k]
    return acc


def rand_bf16(*shape, gen, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).bfloat16()


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def row_invariance_differs(fn, x, w, ms, rows_to_check=(0,)):
    """The invariance helper: is row r of fn(x[:M], w) bit-identical to fn(x[r:r+1], w)?

    Returns the list of (M, row) pairs whose bits differ (empty list == invariant)."""
    diffs = []
    singles = {r: fn(x[r : r + 1], w)[0] for r in rows_to_check}
    for m in ms:
        y = fn(x[:m], w)
        for r in rows_to_check:
            if r < m and not same_bits(y[r], singles[r]):
                diffs.append((m, r))
    return diffs


# --------------------------------------------------------------------------------------------
# Exactness
# --------------------------------------------------------------------------------------------
# (M, K, N): edges in every dimension: K not a multiple of 32 / 256 (K blocking with the fp32
# carry), N not a multiple of the 32-column panel, M not a multiple of the 12/6/4-row tiles, and
# M <= 4 (the AVX-512 streaming small-M path, identical chain), and tall M (A of a row block
# > 1 MiB) that takes the other loop order (A packed per K block), also with several row blocks.
EXACT_SHAPES = [
    (1, 1, 1),
    (1, 7, 3),
    (2, 1100, 45),
    (4, 333, 70),
    (5, 300, 40),
    (13, 513, 70),
    (30, 1000, 33),
    (300, 1100, 45),
    (264, 1100, 45),
    (600, 1400, 70),
]


@pytest.mark.parametrize("isa", SUPPORTED)
@pytest.mark.parametrize("shape", EXACT_SHAPES)
def test_exact_serial_fma_reference(isa, shape):
    m, k, n = shape
    g = gen(m * 1000 + k + n)
    x, w = rand_bf16(m, k, gen=g), rand_bf16(n, k, gen=g)
    ref = exact_ref_bf16_inputs(x, w)
    with use_isa(isa):
        y32 = ops.lm_head(x, w)
        y16 = ops.det_gemm(x, w)
        g32 = ops.gemm(x, w, True)
        g16 = ops.gemm(x, w, False)
    assert same_bits(y32, ref)
    assert same_bits(g32, ref)
    assert same_bits(y16, ref.bfloat16())  # torch's fp32->bf16 is RNE too
    assert same_bits(g16, ref.bfloat16())


def test_tiny_case_against_fp64():
    # Small integers: every partial sum is exact in fp32, so the result equals the fp64 product.
    g = gen(1)
    x = torch.randint(-8, 9, (3, 5), generator=g).bfloat16()
    w = torch.randint(-8, 9, (4, 5), generator=g).bfloat16()
    ref = x.double() @ w.double().T
    for isa in SUPPORTED:
        with use_isa(isa):
            assert torch.equal(ops.lm_head(x, w).double(), ref)
            assert torch.equal(ops.det_gemm(x, w).double(), ref)


@pytest.mark.parametrize("isa", SUPPORTED)
def test_accuracy_vs_fp64(isa):
    g = gen(2)
    x, w = rand_bf16(37, 1024, gen=g), rand_bf16(96, 1024, gen=g, scale=0.05)
    ref = x.double() @ w.double().T
    with use_isa(isa):
        y16 = ops.det_gemm(x, w)
        y32 = ops.lm_head(x, w)
    torch.testing.assert_close(y16.double(), ref, atol=5e-2, rtol=2e-2)
    torch.testing.assert_close(y32.double(), ref, atol=1e-4, rtol=1e-4)
    # and the fp32 logits obey the error bound of recursive (serial) summation, elementwise:
    # |y - ref| <= gamma_K * sum_k |x_k w_k|, gamma_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy
    # and Stability, §3.1). A blocked FP32 matmul (MKL) is typically ~5x more accurate than a serial
    # chain; the bound is what the serial order guarantees, and any reordering bug or lost term breaks it.
    K, u = x.shape[1], 2.0**-24
    gamma = K * u / (1 - K * u)
    bound = gamma * (x.double().abs() @ w.double().abs().T)
    assert ((y32.double() - ref).abs() <= bound).all()
    assert (y32.double() - ref).abs().max() > 0  # FP32, not FP64: the check is not vacuous


def test_fp32_inputs_scalar_vs_fp64_and_vector_paths_bitwise():
    g = gen(3)
    a = torch.randn(19, 700, generator=g)
    b = torch.randn(50, 700, generator=g)
    ref = a.double() @ b.double().T
    with use_isa("scalar"):
        base = ops.gemm(a, b, True)
    torch.testing.assert_close(base.double(), ref, atol=1e-3, rtol=1e-4)
    for isa in SUPPORTED:
        with use_isa(isa):
            assert same_bits(ops.gemm(a, b, True), base), isa
            assert same_bits(ops.gemm(a, b, False), base.bfloat16()), isa


# --------------------------------------------------------------------------------------------
# Invariance: batch size, row position, row order, threads, ISA
# --------------------------------------------------------------------------------------------
INV_MS = [1, 2, 3, 7, 16, 59, 128, 257]


@pytest.mark.parametrize("op", ["det_gemm", "lm_head"])
def test_batch_size_and_row_position_invariance(op):
    fn = getattr(ops, op)
    g = gen(4)
    k, n = 1024, 512
    x, w = rand_bf16(max(INV_MS), k, gen=g), rand_bf16(n, k, gen=g)
    rows = (0, 1, 6, 58, 200, 256)
    assert row_invariance_differs(fn, x, w, INV_MS, rows) == []
    # every row of the largest batch equals the same row computed alone
    full = fn(x, w)
    singles = torch.cat([fn(x[i : i + 1], w) for i in range(0, x.shape[0], 17)])
    assert same_bits(full[::17], singles)


def test_random_row_positions_and_permutation():
    g = gen(5)
    k, n = 768, 320
    w = rand_bf16(n, k, gen=g)
    probe = rand_bf16(1, k, gen=g)
    alone = ops.det_gemm(probe, w)[0]
    for m in INV_MS:
        x = rand_bf16(m, k, gen=g)
        pos = int(torch.randint(0, m, (1,), generator=g))
        x[pos] = probe[0]
        assert same_bits(ops.det_gemm(x, w)[pos], alone), (m, pos)
    x = rand_bf16(59, k, gen=g)
    perm = torch.randperm(59, generator=g)
    assert same_bits(ops.det_gemm(x[perm], w), ops.det_gemm(x, w)[perm])
    assert same_bits(ops.lm_head(x[perm], w), ops.lm_head(x, w)[perm])


def test_padding_invariance():
    # Zero-padded rows / extra weight rows (N) do not change the real outputs.
    g = gen(6)
    x, w = rand_bf16(10, 333, gen=g), rand_bf16(70, 333, gen=g)
    y = ops.lm_head(x, w)
    xp = torch.cat([x, torch.zeros(5, 333, dtype=torch.bfloat16)])
    wp = torch.cat([w, rand_bf16(27, 333, gen=g)])
    assert same_bits(ops.lm_head(xp, wp)[:10, :70], y)
    assert same_bits(ops.lm_head(x, w[:33])[:, :33], y[:, :33])


@pytest.mark.parametrize("m", [1, 7, 59, 257])
def test_thread_count_invariance(m):
    g = gen(7)
    x, w = rand_bf16(m, 1024, gen=g), rand_bf16(1024, 1024, gen=g)
    with num_threads(1):
        y1 = ops.det_gemm(x, w)
        z1 = ops.lm_head(x, w)
    with num_threads(2):
        y2 = ops.det_gemm(x, w)
        z2 = ops.lm_head(x, w)
    assert same_bits(y1, y2) and same_bits(z1, z2)


@pytest.mark.parametrize("m", [1, 3, 59])
def test_isa_paths_bitwise_equal(m):
    g = gen(8)
    x, w = rand_bf16(m, 1024, gen=g), rand_bf16(300, 1024, gen=g)
    with use_isa("scalar"):
        ref16, ref32 = ops.det_gemm(x, w), ops.lm_head(x, w)
    for isa in SUPPORTED:
        with use_isa(isa):
            assert same_bits(ops.det_gemm(x, w), ref16), isa
            assert same_bits(ops.lm_head(x, w), ref32), isa


def test_negative_control_torch_linear_is_not_batch_invariant():
    """The same helper applied to torch's FP32 F.linear (MKL) must report a difference: this shows
    the invariance check above is able to fail."""
    g = gen(9)
    x = torch.randn(64, 4096, generator=g)
    w = torch.randn(4096, 4096, generator=g)
    diffs = row_invariance_differs(F.linear, x, w, [7, 16, 59, 64], rows_to_check=(0,))
    assert diffs != [], "torch F.linear unexpectedly batch-invariant: negative control is void"
    # and ws1 on the same data (as bf16) is invariant
    xb, wb = x.bfloat16(), w.bfloat16()
    assert row_invariance_differs(ops.lm_head, xb, wb, [7, 16, 59, 64], rows_to_check=(0,)) == []


# --------------------------------------------------------------------------------------------
# gemm: strided / transposed / mixed dtype operands (backward passes)
# --------------------------------------------------------------------------------------------
def test_gemm_backward_views_equal_contiguous():
    g = gen(10)
    T, K_in, N_out = 45, 200, 96
    x = rand_bf16(T, K_in, gen=g)
    w = rand_bf16(N_out, K_in, gen=g)
    dy = rand_bf16(T, N_out, gen=g)
    for out_fp32 in (True, False):
        # dX = dY @ W : a = dY, b = W.t()  ([K_in, N_out], strides (1, K_in))
        dx = ops.gemm(dy, w.t(), out_fp32)
        assert same_bits(dx, ops.gemm(dy, w.t().contiguous(), out_fp32))
        assert same_bits(dx, ops.gemm(dy, w.t().float(), out_fp32))  # exact upcast, same values
        # dW = dY.T @ X : a = dY.t() ([N_out, T]), b = X.t() ([K_in, T])
        dw = ops.gemm(dy.t(), x.t(), out_fp32)
        assert same_bits(dw, ops.gemm(dy.t().contiguous(), x.t().contiguous(), out_fp32))
        ref = exact_ref_bf16_inputs(dy.t().contiguous(), x.t().contiguous())
        assert same_bits(dw, ref if out_fp32 else ref.bfloat16())


def test_gemm_arbitrary_strides_and_mixed_dtypes():
    g = gen(11)
    base_a = torch.randn(40, 3 * 130, generator=g)
    base_b = torch.randn(2 * 70, 130 * 2, generator=g)
    a32 = base_a[::2, ::3]  # [20, 130], strides (780, 3)
    b32 = base_b[::2, ::2]  # [70, 130], strides (520, 2)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    a16s = base_a.bfloat16()[::2, ::3]  # strided bf16 with the same values as a16
    b16s = base_b.bfloat16()[::2, ::2]
    for out_fp32 in (True, False):
        ref = ops.gemm(a16.contiguous(), b16.contiguous(), out_fp32)
        assert same_bits(ops.gemm(a16s, b16s, out_fp32), ref)
        assert same_bits(ops.gemm(a16s.float(), b16s, out_fp32), ref)
        assert same_bits(ops.gemm(a16s, b16s.float(), out_fp32), ref)
        # fp32 with strides == fp32 contiguous; mixed fp32 x bf16
        assert same_bits(ops.gemm(a32, b32, out_fp32), ops.gemm(a32.contiguous(), b32.contiguous(), out_fp32))
        assert same_bits(ops.gemm(a32, b16s, out_fp32), ops.gemm(a32.contiguous(), b16.contiguous(), out_fp32))
        assert same_bits(
            ops.gemm(a32.t().contiguous().t(), b32.t().contiguous().t(), out_fp32),
            ops.gemm(a32.contiguous(), b32.contiguous(), out_fp32),
        )
    # the bf16 results match the exact reference and the ISA paths agree on strided fp32 input
    assert same_bits(ops.gemm(a16s, b16s, True), exact_ref_bf16_inputs(a16, b16))
    with use_isa("scalar"):
        ref32 = ops.gemm(a32, b32.t().contiguous().t(), True)
    for isa in SUPPORTED:
        with use_isa(isa):
            assert same_bits(ops.gemm(a32, b32.t().contiguous().t(), True), ref32), isa
            assert same_bits(ops.gemm(a32, b32, True), ref32), isa
            assert same_bits(ops.gemm(a16s.t().contiguous().t(), b16s, True), exact_ref_bf16_inputs(a16, b16)), isa


def test_gemm_matches_det_gemm_and_lm_head():
    g = gen(12)
    x, w = rand_bf16(23, 500, gen=g), rand_bf16(77, 500, gen=g)
    assert same_bits(ops.gemm(x, w, False), ops.det_gemm(x, w))
    assert same_bits(ops.gemm(x, w, True), ops.lm_head(x, w))


# --------------------------------------------------------------------------------------------
# Edge cases, special values, errors
# --------------------------------------------------------------------------------------------
def test_empty_and_k_zero():
    w = torch.randn(8, 16).bfloat16()
    y = ops.det_gemm(torch.empty(0, 16, dtype=torch.bfloat16), w)
    assert y.shape == (0, 8) and y.dtype == torch.bfloat16
    z = ops.lm_head(torch.empty(0, 16, dtype=torch.bfloat16), w)
    assert z.shape == (0, 8) and z.dtype == torch.float32
    e = ops.det_gemm(torch.ones(3, 16, dtype=torch.bfloat16), torch.empty(0, 16, dtype=torch.bfloat16))
    assert e.shape == (3, 0)
    k0 = ops.det_gemm(torch.empty(3, 0, dtype=torch.bfloat16), torch.empty(5, 0, dtype=torch.bfloat16))
    assert k0.shape == (3, 5) and bool((bits(k0) == 0).all())  # +0.0
    k0f = ops.gemm(torch.empty(3, 0), torch.empty(5, 0, dtype=torch.bfloat16), True)
    assert k0f.shape == (3, 5) and bool((bits(k0f) == 0).all())


@pytest.mark.parametrize("isa", SUPPORTED)
def test_nan_inf_propagate(isa):
    g = gen(13)
    x, w = rand_bf16(4, 64, gen=g), rand_bf16(40, 64, gen=g)
    x[1, 5] = float("inf")
    x[2, 7] = float("nan")
    w[3, :] = 0.0  # inf * 0 -> nan in (1, 3)
    w[9, 11] = float("-inf")  # row 0..3 get +-inf (or nan for row 1/2) in column 9
    ref = exact_ref_bf16_inputs(x, w)
    with use_isa(isa):
        y32 = ops.lm_head(x, w)
        y16 = ops.det_gemm(x, w)
    assert torch.equal(torch.isnan(y32), torch.isnan(ref))
    assert torch.equal(torch.isnan(y16), torch.isnan(ref))
    fin = ~torch.isnan(ref)
    assert torch.equal(y32[fin], ref[fin])
    assert torch.equal(y16[fin].float(), ref[fin].bfloat16().float())
    assert bool(torch.isinf(y16[0, 9])) and bool(torch.isnan(y16[1, 3]))


def test_bf16_rounding_ties_and_overflow():
    # 1 + 2^-8 is exactly halfway between bf16 neighbours 1 and 1+2^-7: ties-to-even -> 1.
    x = torch.tensor([[1.0, 2.0**-8]], dtype=torch.bfloat16)
    w = torch.tensor([[1.0, 1.0], [1.0, 3.0]], dtype=torch.bfloat16)
    for isa in SUPPORTED:
        with use_isa(isa):
            y = ops.det_gemm(x, w)
            assert y[0, 0].item() == 1.0  # 1 + 2^-8  -> tie -> even (1.0)
            assert y[0, 1].item() == 1.0 + 2.0**-6  # 1 + 3*2^-8 -> tie -> even (up)
            big = torch.tensor([[3.0e38, 3.0e38]], dtype=torch.bfloat16)
            assert torch.isinf(ops.det_gemm(big, torch.ones(1, 2, dtype=torch.bfloat16)))[0, 0]


def _raises(fn, *names):
    with pytest.raises(RuntimeError) as ei:
        fn()
    msg = str(ei.value)
    for s in names:
        assert s in msg, msg
    return msg


def test_errors():
    xb = torch.randn(3, 8).bfloat16()
    wb = torch.randn(4, 8).bfloat16()
    for name in ("det_gemm", "lm_head"):
        fn = getattr(ops, name)
        _raises(lambda: fn(xb.float(), wb), name, "x", "BFloat16")
        _raises(lambda: fn(xb, wb.half()), name, "weight", "BFloat16")
        _raises(lambda: fn(xb[0], wb), name, "x", "rank")
        _raises(lambda: fn(xb, wb[None]), name, "weight", "rank")
        msg = _raises(lambda: fn(xb, torch.randn(4, 9).bfloat16()), name, "K mismatch")
        assert "K=8" in msg and "K=9" in msg
        _raises(lambda: fn(xb.to("meta"), wb), name, "CPU")
    _raises(lambda: ops.gemm(xb.half(), wb, True), "gemm", "a")
    _raises(lambda: ops.gemm(xb, wb.double(), False), "gemm", "b")
    _raises(lambda: ops.gemm(xb, torch.randn(4, 7), False), "gemm", "K mismatch")
    _raises(lambda: ops.gemm(xb[None], wb, False), "gemm", "rank")


# --------------------------------------------------------------------------------------------
# The BF16 unit decision (docs/numerics.md, "BF16 matrix units"): VDPBF16PS is the portable chain
# with DAZ/FTZ, so every path is bitwise equal; AMX's TDPBF16PS is not, so it has no GEMM path.
# --------------------------------------------------------------------------------------------
def _probe():
    import json

    return json.loads(ops.bf16_unit_probe(1 << 16, 1))


def test_vdpbf16ps_is_the_portable_chain():
    p = _probe()
    if not p["vdpbf16ps"]["available"]:
        pytest.skip("this CPU has no AVX512_BF16 (the avx512bf16 path does not exist here)")
    v = p["vdpbf16ps"]
    assert v["lanes"] >= 1 << 16 and v["differ"] == 0, v
    # the same comparison with the pair packed the other way round must see differences: the
    # probe is able to fail, and the pair order the GEMM packs is the one that matters
    assert v["differ_order_swapped"] > 0, v


def test_mxcsr_flush_is_the_bf16_units_flush():
    p = _probe()
    if not p["fma_mxcsr"]["available"]:
        pytest.skip("no AVX-512 on this CPU: the MXCSR-flushed FMA is checked through the GEMM tests only")
    assert p["fma_mxcsr"]["differ"] == 0, p["fma_mxcsr"]


def test_amx_tdpbf16ps_is_not_the_chain():
    """Pins the other half of the decision: measured, TDPBF16PS (32 k per instruction) does not give
    the chain's bits, so an AMX GEMM could not be bitwise equal to the other paths. If a CPU's AMX
    ever matches, this fails and the decision must be revisited."""
    p = _probe()["tdpbf16ps"]
    if not p["available"]:
        pytest.skip(f"AMX-BF16 not usable here: {p['why_not']}")
    assert p["elements"] > 0 and p["differ"] > 0, p


def _f(v):
    return torch.tensor(v, dtype=torch.float32)


@pytest.mark.parametrize("isa", SUPPORTED)
def test_flush_rules_every_path(isa):
    b = torch.bfloat16
    # FTZ, tininess before rounding: 2^-63 * 2^-63 = FLT_MIN, then FLT_MIN - 2^-150 rounds (tie to
    # even) back to FLT_MIN in IEEE arithmetic, but the exact sum is below FLT_MIN: flushed to +0.
    x = torch.tensor([[2.0**-63, 2.0**-75]], dtype=b)
    w = torch.tensor([[2.0**-63, -(2.0**-75)]], dtype=b)
    ieee = (_f(2.0**-126) + _f(2.0**-75) * _f(-(2.0**-75))).item()
    assert ieee == 2.0**-126  # what plain FP32 gives: the case really is at the boundary
    # a result that underflows is flushed to a zero of its sign: -(2^-70)^2 -> -0
    x2 = torch.tensor([[2.0**-70]], dtype=b)
    w2 = torch.tensor([[-(2.0**-70)]], dtype=b)
    # DAZ: a bf16 denormal input reads as zero: 2^-130 * 2^100 would be 2^-30
    x3 = torch.tensor([[2.0**-130, 0.0]], dtype=b)
    w3 = torch.tensor([[2.0**100, 0.0]], dtype=b)
    assert x3[0, 0].item() == 2.0**-130  # stored as a bf16 denormal, not already zero
    with use_isa(isa):
        assert bits(ops.lm_head(x, w)).item() == 0
        assert bits(ops.lm_head(x2, w2)).item() == bits(_f([[-0.0]])).item()
        assert bits(ops.lm_head(x3, w3)).item() == 0
        assert bits(ops.det_gemm(x3, w3)).item() == 0


def _adversarial(m, k, n, g):
    """bf16 data whose partial sums cancel and underflow: exponents spread over the whole range
    around 2^-63 (products near FLT_MIN), some bf16 denormals, some large values."""

    def draw(*shape):
        e = torch.randint(-75, -52, shape, generator=g).float()
        v = torch.ldexp(1.0 + torch.rand(*shape, generator=g), e) * torch.where(
            torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0
        )
        den = torch.rand(*shape, generator=g) < 0.05
        v = torch.where(den, torch.ldexp(torch.rand(*shape, generator=g), torch.full(shape, -127.0)), v)
        return v.bfloat16()

    return draw(m, k), draw(n, k)


@pytest.mark.parametrize("shape", [(1, 65, 40), (3, 301, 70), (13, 257, 45), (59, 512, 96)])
def test_adversarial_flush_cases_bitwise_equal_across_paths(shape):
    m, k, n = shape
    g = gen(100 + m)
    x, w = _adversarial(m, k, n, g)
    with use_isa("scalar"):
        ref32, ref16 = ops.lm_head(x, w), ops.det_gemm(x, w)
        refT = ops.gemm(x, w.t().contiguous().t(), True)  # B with n contiguous (backward's layout)
    tiny = (ref32.abs() < 2.0**-126) & (ref32 != 0)
    assert not bool(tiny.any())  # FTZ: no denormal result
    exact = exact_ref_bf16_inputs(x, w)
    assert not same_bits(ref32, exact)  # the data does reach the flush rules
    assert same_bits(refT, ref32)
    for isa in SUPPORTED:
        with use_isa(isa):
            assert same_bits(ops.lm_head(x, w), ref32), isa
            assert same_bits(ops.det_gemm(x, w), ref16), isa
            assert same_bits(ops.gemm(x, w.t().contiguous().t(), True), ref32), isa


def test_negative_control_kstep_chosen_by_m_is_caught():
    """Our deliberately variant GEMM (K-step chosen by M: each pair of products summed first when
    M > 1; portable code, so the same bits on every host) must fail the same row-invariance helper
    and the comparison with lm_head / det_gemm; its one-row result is theirs."""
    g = gen(14)
    x, w = rand_bf16(59, 1024, gen=g), rand_bf16(128, 1024, gen=g)
    for out_fp32, ours in ((True, ops.lm_head), (False, ops.det_gemm)):

        def var(a, b, out_fp32=out_fp32):
            return ops.variant_gemm_kstep_by_m(a, b, out_fp32)

        assert same_bits(var(x[:1], w), ours(x[:1], w))
        assert not same_bits(var(x, w), ours(x, w))
        assert row_invariance_differs(var, x, w, [2, 7, 59], rows_to_check=tuple(range(0, 59, 2))) != []
        assert row_invariance_differs(ours, x, w, [2, 7, 59], rows_to_check=tuple(range(0, 59, 2))) == []


# --------------------------------------------------------------------------------------------
# The amx path (WS1_CPU_ISA=amx, only when asked for): det_gemm / lm_head on AMX tiles. Its bits are
# not the chain's (see above), so it is checked for what it promises: invariance within itself.
# --------------------------------------------------------------------------------------------
def _amx_or_skip():
    with use_isa("amx"):
        try:
            ops.isa()
        except RuntimeError as e:
            pytest.skip(f"the amx path is not available here: {str(e).splitlines()[0]}")


@pytest.mark.parametrize("op", ["det_gemm", "lm_head"])
def test_amx_batch_size_row_position_and_thread_invariance(op):
    _amx_or_skip()
    fn = getattr(ops, op)
    g = gen(20)
    # K = 1000: a padded last K-step; N = 300: a padded last n-tile
    x, w = rand_bf16(max(INV_MS), 1000, gen=g), rand_bf16(300, 1000, gen=g)
    with use_isa("amx"):
        assert row_invariance_differs(fn, x, w, INV_MS, (0, 1, 15, 16, 17, 58, 200, 256)) == []
        perm = torch.randperm(59, generator=g)
        assert same_bits(fn(x[:59][perm], w), fn(x[:59], w)[perm])
        with num_threads(1):
            y1 = fn(x[:59], w)
        with num_threads(2):
            y2 = fn(x[:59], w)
        assert same_bits(y1, y2)
        # extra weight rows (N) and zero rows (M) do not change the real outputs
        wp = torch.cat([w, rand_bf16(21, 1000, gen=g)])
        xp = torch.cat([x[:10], torch.zeros(7, 1000, dtype=torch.bfloat16)])
        assert same_bits(fn(xp, wp)[:10, :300], fn(x[:10], w))
        # a non-contiguous weight gives the contiguous weight's bits
        assert same_bits(fn(x[:5], w.t().contiguous().t()), fn(x[:5], w))


def test_amx_is_its_own_arithmetic_and_accurate():
    _amx_or_skip()
    g = gen(21)
    x, w = rand_bf16(37, 1024, gen=g), rand_bf16(96, 1024, gen=g, scale=0.05)
    ref = x.double() @ w.double().T
    with use_isa("amx"):
        y32 = ops.lm_head(x, w)
        y16 = ops.det_gemm(x, w)
        g32 = ops.gemm(x, w, True)  # the backward GEMM keeps the chain on the amx path
    torch.testing.assert_close(y32.double(), ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(y16.double(), ref, atol=5e-2, rtol=2e-2)
    with use_isa("scalar"):
        chain = ops.lm_head(x, w)
    assert not same_bits(y32, chain)  # why it has its own arch key
    assert same_bits(g32, chain)
    # and it reports itself: the calls are counted under path "amx"
    import json

    before = json.loads(ops.calls()).get("ws1_cpu::lm_head", {}).get("amx", 0)
    with use_isa("amx"):
        ops.lm_head(x, w)
    assert json.loads(ops.calls())["ws1_cpu::lm_head"]["amx"] == before + 1


def test_outputs_of_16_mib_and_more_keep_their_bits():
    """Outputs >= 16 MiB are allocated through empty_output (huge pages asked for before the first
    touch): every column of such a call equals the same columns from a small call, bitwise, for the
    bf16-out, fp32-out and strided backward GEMMs."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(64, 32, generator=g).bfloat16()
    w = torch.randn(1 << 17, 32, generator=g).bfloat16()  # det_gemm out 64 x 131072 bf16 = 16 MiB
    big = ops.det_gemm(x, w)
    assert big.numel() * big.element_size() >= 16 << 20
    assert torch.equal(big[:, :1000].view(torch.int16), ops.det_gemm(x, w[:1000]).view(torch.int16))
    big = ops.lm_head(x, w[: 1 << 16])  # fp32 out 64 x 65536 = 16 MiB
    assert torch.equal(
        big[:, -1000:].view(torch.int32), ops.lm_head(x, w[(1 << 16) - 1000 : 1 << 16]).view(torch.int32)
    )
    dy = torch.randn(64, 1 << 17, generator=g).bfloat16()
    big = ops.gemm(dy.t(), x.t(), True)  # dW-shaped, strided: 131072 x 32 fp32 = 16 MiB
    assert torch.equal(big[:1000].view(torch.int32), ops.gemm(dy[:, :1000].t(), x.t(), True).view(torch.int32))
