"""Comparators: raw bits, tolerance, aggregates — each shown to fail where it must."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ws1_contract import aggregates, bitwise, within_tolerance


def test_bitwise_equal_and_different():
    a = torch.randn(4, 5).to(torch.bfloat16)
    assert bitwise(a, a.clone()).passed
    b = a.clone()
    b[2, 3] = b[2, 3] + 1
    r = bitwise(a, b, "x")
    assert not r.passed and r.n_diff == 1 and r.first_diff["index"] == [2, 3]
    assert "1 of 20 elements differ" in r.detail and "first at [2, 3]" in r.detail


def test_signed_zero_differs():
    r = bitwise(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not r.passed and r.n_diff == 1


def test_one_ulp_differs_fp32():
    a = torch.tensor([1.0], dtype=torch.float32)
    b = torch.nextafter(a, torch.tensor([2.0]))
    assert not bitwise(a, b).passed


def test_nan_is_hard_failure_even_when_bits_match():
    a = torch.tensor([1.0, float("nan")])
    r = bitwise(a, a.clone())
    assert not r.passed and "non-finite" in r.detail


def test_inf_is_hard_failure():
    a = torch.tensor([float("inf")])
    assert not bitwise(a, a.clone()).passed


def test_shape_and_dtype_mismatch():
    assert "shape mismatch" in bitwise(torch.zeros(2), torch.zeros(3)).detail
    assert "dtype mismatch" in bitwise(torch.zeros(2), torch.zeros(2, dtype=torch.bfloat16)).detail


def test_empty_is_not_a_pass():
    assert not bitwise(torch.zeros(0), torch.zeros(0)).passed


def test_integer_tensors():
    assert bitwise(torch.arange(5), torch.arange(5)).passed
    assert not bitwise(torch.arange(5), torch.arange(5) + 1).passed


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=64))
def test_bitwise_matches_raw_bytes(values):
    a = torch.tensor(values, dtype=torch.float32)
    b = a.clone()
    assert bitwise(a, b).passed
    b[0] = -b[0] if b[0] != 0 else (-0.0 if math.copysign(1, float(b[0])) > 0 else 0.0)
    assert bitwise(a, b).passed == (a.numpy().tobytes() == b.numpy().tobytes())


def test_within_tolerance():
    ref = torch.tensor([1.0, 2.0, -3.0])
    assert within_tolerance(ref + 1e-3, ref, 1e-2, 0).passed
    r = within_tolerance(ref + torch.tensor([0, 0, 0.5]), ref, 1e-2, 1e-2)
    assert not r.passed and r.first_diff["index"] == [2] and r.max_abs == 0.5
    assert within_tolerance(ref * 1.01, ref, 0, 0.011).passed
    assert not within_tolerance(torch.tensor([float("nan")]), torch.tensor([1.0]), 1, 1).passed
    assert not within_tolerance(torch.zeros(2), torch.zeros(3), 1, 1).passed


def test_within_tolerance_against_an_fp64_reference_is_judged_in_fp64():
    """An FP64 reference is not rounded to FP32 first: at |x| ~ 20 an FP32 ulp is 1.9e-6, so a 5e-7 error
    would vanish in FP32 (the reference rounds to 20.0) and is seen in FP64."""
    cand = torch.tensor([20.0, -20.0], dtype=torch.float32)
    ref64 = cand.double() + torch.tensor([5e-7, 0.0], dtype=torch.float64)
    assert within_tolerance(cand, ref64.float(), 2e-7, 0).passed  # what an FP32 comparison would see
    r = within_tolerance(cand, ref64, 2e-7, 0)
    assert not r.passed and r.n_diff == 1 and r.first_diff["index"] == [0] and abs(r.max_abs - 5e-7) < 1e-12
    assert within_tolerance(cand, ref64, 6e-7, 0).passed
    assert not within_tolerance(cand, torch.tensor([float("nan"), 0.0], dtype=torch.float64), 1, 1).passed


def test_aggregates():
    lhs = torch.tensor([-1.0, -2.0, -3.0, -4.0])
    active = torch.tensor([True, True, False, True])
    r = aggregates(lhs, lhs.clone(), active, {"max_abs_dlogp": 0.06, "approx_kl0": 0.05, "clipfrac0": 0})
    assert r.passed and r.bitwise_equal and r.tokens_different == 0 and r.n_active == 3
    rhs = lhs.clone()
    rhs[2] += 5  # inactive: ignored
    assert aggregates(lhs, rhs, active).bitwise_equal
    rhs[0] += 0.01
    r = aggregates(lhs, rhs, active, {"max_abs_dlogp": 0.06, "approx_kl0": 0.05, "clipfrac0": 0})
    assert r.passed and not r.bitwise_equal and r.tokens_different == 1
    assert abs(r.max_abs_dlogp - 0.01) < 1e-6
    rhs[1] += 0.5  # exp(-0.5) = 0.61 is outside [0.8, 1.2]
    r = aggregates(lhs, rhs, active, {"max_abs_dlogp": 0.06, "approx_kl0": 0.05, "clipfrac0": 0})
    assert not r.passed and r.clipfrac0 > 0 and "FAIL" in r.detail


def test_aggregates_empty_and_nonfinite_fail():
    x = torch.tensor([-1.0])
    assert not aggregates(x, x, torch.tensor([False])).passed
    y = torch.tensor([float("nan")])
    assert not aggregates(y, y).passed


# ---- the tensor-norm rule (issue 11 item 4) ---------------------------------------------------------


def test_within_norm_sees_zeroed_halved_and_flipped_tensors_the_atol_cannot():
    """Gradient-sized elements (~1e-3) under the BF16 reduction row's atol 0.1: the elementwise rule
    passes a zeroed, halved and sign-flipped tensor; the tensor-norm rule fails every one."""
    from ws1_contract.compare import within_norm

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(64, 48, generator=g) * 1e-3
    cand = ref.to(torch.bfloat16)
    ok = within_norm(cand, ref, 1e-2, 0.9999, "dW")
    assert ok.passed and ok.rel_l2 < 3e-3 and ok.cosine > 0.99999, ok.detail
    for bad, rel, cos in ((cand * 0, 1.0, 0.0), (cand * 0.5, 0.5, 1.0), (-cand, 2.0, -1.0)):
        assert within_tolerance(bad, ref, 0.1, 0.02).passed  # the elementwise row cannot see it
        r = within_norm(bad, ref, 1e-2, 0.9999, "dW")
        assert not r.passed and "FAIL" in r.detail
        assert math.isclose(r.rel_l2, rel, rel_tol=1e-2) and math.isclose(r.cosine, cos, abs_tol=1e-2)


def test_within_norm_edge_cases():
    from ws1_contract.compare import within_norm

    z = torch.zeros(5)
    assert within_norm(z, z, 1e-3, 0.999).passed  # zero vs zero: equal
    r = within_norm(torch.full((5,), 1e-30), z, 1e-3, 0.999)
    assert not r.passed and r.rel_l2 == math.inf  # anything vs a zero reference
    x = torch.randn(5)
    y = x.clone()
    y[1] = float("nan")
    assert not within_norm(y, x, 1e-3, 0.999).passed and "non-finite" in within_norm(y, x, 1e-3, 0.999).detail
    assert not within_norm(x[:4], x, 1e-3, 0.999).passed  # shape mismatch


def test_norm_stats_over_blocks_is_the_whole_tensor_rule():
    """A reference produced block by block (vocabulary-sized gradients) gets one verdict for the
    whole tensor: the sums accumulate across blocks, so one bad block among many good ones fails."""
    from ws1_contract.compare import NormStats, within_norm

    g = torch.Generator().manual_seed(1)
    ref = torch.randn(40, 16, generator=g)
    cand = ref.to(torch.bfloat16).float()
    cand[30:40] = 0  # one block of four zeroed
    s = NormStats()
    for lo in range(0, 40, 10):
        s.add(cand[lo : lo + 10], ref[lo : lo + 10])
    whole = within_norm(cand, ref, 0.1, 0.99)
    blocked = s.judge(0.1, 0.99)
    assert not whole.passed and not blocked.passed
    assert math.isclose(blocked.rel_l2, whole.rel_l2, rel_tol=1e-9) and math.isclose(
        blocked.cosine, whole.cosine, rel_tol=1e-9
    )
    # each block alone but the zeroed one would pass: the rule must not be a per-block AND
    assert all(within_norm(cand[lo : lo + 10], ref[lo : lo + 10], 0.1, 0.99).passed for lo in (0, 10, 20))


def test_the_nonfinite_screen_finds_one_bad_value_in_any_block(monkeypatch):
    """_nonfinite screens each block with aminmax before the mask: a single NaN, +Inf or -Inf in
    the middle of an otherwise finite block (or in the last, short block) is still found and located."""
    from ws1_contract import compare

    monkeypatch.setattr(compare, "BLOCK", 1000)
    for bad in (float("nan"), float("inf"), -float("inf")):
        for dtype in (torch.float32, torch.bfloat16):
            for where in (1500, 4321):
                t = torch.randn(4400).to(dtype)
                t[where] = bad
                assert compare._nonfinite(t) == (1, where)
                c = within_tolerance(torch.zeros(4400), t.float(), 1.0, 0.0, "x")
                assert not c.passed and "non-finite" in c.detail
    assert compare._nonfinite(torch.randn(4400)) == (0, None)


def test_equal_blocks_take_the_short_path_with_the_same_numbers(monkeypatch):
    """Blocks whose values are equal skip the error arithmetic; the verdict and every number are those
    of the general path (which a one-ulp change in one block still takes)."""
    from ws1_contract import compare

    monkeypatch.setattr(compare, "BLOCK", 1000)
    r = torch.randn(4400, generator=torch.Generator().manual_seed(3))
    s = compare.NormStats()
    s.add(r.clone(), r)
    r64 = r.double()
    want = float(torch.dot(r64[:1000], r64[:1000]))
    for lo in range(1000, 4400, 1000):
        want += float(torch.dot(r64[lo : lo + 1000], r64[lo : lo + 1000]))
    assert (s.err2, s.ref2, s.cand2, s.dot, s.n) == (0.0, want, want, want, 4400)
    c = r.clone()
    c[2500] = torch.nextafter(c[2500], torch.tensor(math.inf))
    tol = within_tolerance(c, r, 0.0, 0.0, "x")
    assert not tol.passed and tol.n_diff == 1 and tol.max_abs > 0
    s2 = compare.NormStats()
    s2.add(c, r)
    assert s2.err2 > 0 and s2.cand2 != s2.ref2
