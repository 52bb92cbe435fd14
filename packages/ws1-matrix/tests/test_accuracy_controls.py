"""C4 gradient accuracy can fail (issue 11 items 4 and 10): a test-only cpu variant kernel (same id,
same family) whose gradient of one parameter is zeroed, halved or sign-flipped turns its cell red;
a gradient the candidate did not produce is red; the logprob ops are judged by their FP32 row.

Shrunk shapes (tests/small.py); the comparisons and the cell logic are the gates' own."""

import contextlib
import dataclasses
import functools

import pytest
from small import make_run

import ws1_ops
from ws1_matrix import cases, compare, rows
from ws1_matrix.forward_gradient import judge_profile
from ws1_matrix.judge import tiers_of
from ws1_ops import registry

SCALES = {"zeroed": 0.0, "halved": 0.5, "flipped": -1.0}
PARAM_OPS = ("embedding", "rms_norm", "qk_norm", "det_gemm", "lm_head")


@contextlib.contextmanager
def variant(op: str, **build):
    """The cpu kernel of ``op`` with fields replaced: ``build[field](real_kernel) -> callable``."""
    real = ws1_ops.kernels_for("cpu")[op]
    registry._KERNELS[(op, "cpu")] = dataclasses.replace(real, **{f: b(real) for f, b in build.items()})
    try:
        yield
    finally:
        registry._KERNELS[(op, "cpu")] = real


def scaled_param_grad(s: float):
    return lambda real: lambda *a: real.param_grad(*a) * s


def _cells(ops, judgments=("gradient_accuracy",), activate=None, tiers=None) -> dict:
    run = make_run("c3_forward" if judgments[0].startswith("forward") else "c4_gradient")
    judge_profile(run, list(ops), judgments, tiers or (lambda op: tiers_of(run.manifest, op, extra=True)), activate)
    return {c.id: c for c in run.cells}


def _comparison(cell, name: str) -> dict:
    return next(c for c in cell.extra["comparisons"] if c["name"] == name)


def test_real_kernels_are_green_with_the_norm_rule(small_env):
    cells = _cells(PARAM_OPS + ("attention",))
    for cid, c in cells.items():
        assert c.status == "green", c.detail
        assert c.thresholds["max_rel_l2"] == 0.05 and c.thresholds["min_cosine"] == 0.999
        assert all(d["rel_l2"] is not None and d["rel_l2"] < 0.01 for d in c.extra["comparisons"]), cid


@pytest.mark.parametrize("how", SCALES)
def test_zeroed_halved_flipped_parameter_gradient_is_red(small_env, how):
    """Red by the tensor-norm rule in every case (C4's own elements are large enough for the atol to
    fail them too; in C10's chain they are not — see ws1-qwen3 test_c10_reference_cell)."""
    for op in PARAM_OPS:
        with variant(op, param_grad=scaled_param_grad(SCALES[how])):
            cells = _cells([op])
        for tier in ("short", "primary"):
            c = cells[f"{op}-{tier}-gradient_accuracy"]
            assert c.status == "red", (op, tier, c.detail)
            w = _comparison(c, "weight")
            assert not w["passed"] and "FAIL: rel L2" in w["detail"], w["detail"]


@pytest.mark.parametrize("how", SCALES)
def test_attention_dk_zeroed_halved_flipped_is_red(small_env, how):
    s = SCALES[how]

    def bwd(real):
        def f(*a):
            dq, dk, dv = real.bwd(*a)
            return dq, dk * s, dv

        return f

    with variant("attention", bwd=bwd):
        cells = _cells(["attention"])
    for tier in ("short", "primary", "long"):
        c = cells[f"attention-{tier}-gradient_accuracy"]
        assert c.status == "red" and not _comparison(c, "dk")["passed"], c.detail
        assert _comparison(c, "dq")["passed"] and _comparison(c, "dv")["passed"]


def test_blockwise_reference_path_accumulates_the_norm_rule(small_env, monkeypatch):
    """The path of the vocabulary-sized gradients (reference block by block): one norm verdict over
    the whole tensor, equal to the unblocked one; a halved dW is red there too."""
    plain = _cells(["lm_head", "embedding"])
    monkeypatch.setattr(rows, "BLOCKWISE_REF_ABOVE", 100)
    monkeypatch.setattr(compare, "BLOCK_ELEMENTS", 4096)
    blocked = _cells(["lm_head", "embedding"])
    for op in ("lm_head", "embedding"):
        a = _comparison(plain[f"{op}-primary-gradient_accuracy"], "weight")
        b = _comparison(blocked[f"{op}-primary-gradient_accuracy"], "weight")
        assert blocked[f"{op}-primary-gradient_accuracy"].status == "green"
        assert b["rel_l2"] == pytest.approx(a["rel_l2"], abs=1e-12) and b["cosine"] == pytest.approx(
            a["cosine"], rel=1e-12
        )
    with variant("lm_head", param_grad=scaled_param_grad(0.5)):
        c = _cells(["lm_head"])["lm_head-primary-gradient_accuracy"]
    w = _comparison(c, "weight")
    assert c.status == "red" and w["rel_l2"] == pytest.approx(0.5, rel=1e-3), w["detail"]


def test_a_gradient_the_candidate_did_not_produce_is_red(small_env):
    """A kernel that leaves the weight without a gradient: red, never a silently shorter list."""
    with variant("det_gemm", param_grad=lambda real: lambda *a: None):
        cells = _cells(["det_gemm"])
    for tier in ("short", "primary"):
        c = cells[f"det_gemm-{tier}-gradient_accuracy"]
        assert c.status == "red" and "weight: the candidate produced no gradient" in c.detail, c.detail
        assert [d["name"] for d in c.extra["comparisons"]] == ["x", "weight"]


@pytest.mark.parametrize("op", ["logprob", "batch_invariant_logp"])
def test_logprob_gradients_are_judged_by_the_fp32_norm_row(small_env, op):
    """FP32 in and out: the gradient's tensor-norm limits are the FP32 row's (rel L2 1e-5), which pass
    the real kernel and catch a 1e-4 relative change of the gradient that the elementwise BF16 row
    (atol 5e-2) lets through. (The elementwise FP32 row is not used: see judge._rows.)"""
    cells = _cells([op], ("gradient_accuracy",))
    for tier in ("short", "primary"):
        c = cells[f"{op}-{tier}-gradient_accuracy"]
        assert c.status == "green", c.detail
        assert c.thresholds["norm_dtype"] == "float32" and c.thresholds["max_rel_l2"] == 1e-5, c.thresholds
        assert c.thresholds["dtype"] == "bfloat16" and c.thresholds["atol"] == 5e-2, c.thresholds

    def bwd(real):
        return lambda *a: real.bwd(*a) * (1 + 1e-4)

    with variant(op, bwd=bwd):
        cells = _cells([op])
    for t in ("short", "primary"):
        c = cells[f"{op}-{t}-gradient_accuracy"]
        assert c.status == "red" and _comparison(c, "logits")["rel_l2"] > 1e-5, c.detail
        assert _comparison(c, "logits")["max_abs"] < 5e-2, "the elementwise row alone would be green"


# ---- the logprob class's forward against FP64 (issue 23 item 5) ------------------------------------------

LOGPROB_OPS = ("logprob", "batch_invariant_logp")
LSE_SHIFT = "variant_logprob_lse_shift"


def _by_reference(cell) -> dict:
    refs = {}
    for d in cell.extra["comparisons"]:
        refs.setdefault(d["reference"], []).append(d)
    return refs


@pytest.mark.parametrize("op", LOGPROB_OPS)
def test_logprob_forward_is_judged_by_both_rows(small_env, op):
    """Two comparisons in the forward_accuracy cell: the BF16 row against the FP32 reference (as
    before) and the FP64-reference row (atol 5e-5) against log_softmax in FP64 on the same inputs."""
    cells = _cells([op], ("forward_accuracy", "forward_invariance"))
    for tier in ("short", "primary"):
        c = cells[f"{op}-{tier}-forward_accuracy"]
        assert c.status == "green", c.detail
        assert (c.thresholds["atol"], c.thresholds["rtol"], c.thresholds["dtype"]) == (6e-2, 0, "bfloat16")
        assert c.thresholds["fp64_reference"] == {"atol": 5e-5, "rtol": 0.0, "dtype": "float32"}
        (f32,), (f64,) = _by_reference(c)["float32"], _by_reference(c)["float64"]
        assert f32["passed"] and f64["passed"] and f64["name"] == "output vs FP64"
        assert 0 < f64["max_abs"] < 5e-5 and c.max_abs_err == f32["max_abs"]
        assert f"; vs FP64 atol 5e-05 rtol 0: max |err| {f64['max_abs']:.3e}" in c.detail
        assert "fp64_reference" not in cells[f"{op}-{tier}-forward_invariance"].thresholds


def test_other_ops_have_no_fp64_comparison(small_env):
    cells = _cells(["det_gemm", "rms_norm"], ("forward_accuracy",))
    for c in cells.values():
        assert c.status == "green" and set(_by_reference(c)) == {"float32"} and "fp64_reference" not in c.thresholds


@pytest.mark.parametrize("op", LOGPROB_OPS)
def test_lse_shift_control_is_red_by_the_fp64_row_and_green_by_the_bf16_row(small_env, op):
    """Our control (every row's lse + 1e-4): the FP64-reference row turns the cell red at every element;
    the BF16 row against the FP32 reference — the cell's whole judgment before this row — passes it;
    the variant stays invariant, so only accuracy is red."""
    control = functools.partial(ws1_ops.use_candidate, LSE_SHIFT)
    cells = _cells([op], ("forward_accuracy", "forward_invariance"), activate=control)
    for tier in ("short", "primary"):
        c = cells[f"{op}-{tier}-forward_accuracy"]
        assert c.status == "red" and c.extra["recorded"][op]["variant"] == [LSE_SHIFT], c.detail
        (f32,), (f64,) = _by_reference(c)["float32"], _by_reference(c)["float64"]
        assert f32["passed"] and f32["max_abs"] < 6e-2, "the BF16 row alone would be green"
        assert not f64["passed"] and f64["n_diff"] == f64["n_total"] > 0, f64["detail"]
        assert 9e-5 < f64["max_abs"] < 1.1e-4
        assert c.detail.startswith("output vs FP64:") and "exceed atol 5e-05" in c.detail
        inv = cells[f"{op}-{tier}-forward_invariance"]
        assert inv.status == "green" and inv.extra["recorded"][op]["variant"] == [LSE_SHIFT], inv.detail


@pytest.mark.parametrize("op", LOGPROB_OPS)
def test_one_row_moved_by_1e4_is_red(small_env, op):
    """The rule is elementwise: one row's log-probs 1e-4 too small (row 0 of every call) is red, by
    exactly that row's elements; the BF16 row passes it."""

    def fwd(real):
        def f(*a):
            lp, lse = real.fwd(*a)
            lp = lp.clone()
            lp[0] -= 1e-4
            return lp, lse

        return f

    with variant(op, fwd=fwd):
        cells = _cells([op], ("forward_accuracy",))
    for tier in ("short", "primary"):
        c = cells[f"{op}-{tier}-forward_accuracy"]
        (f32,), (f64,) = _by_reference(c)["float32"], _by_reference(c)["float64"]
        row = f64["n_total"] // c.extra["shape"]["T"]
        assert c.status == "red" and f32["passed"] and not f64["passed"], c.detail
        assert f64["n_diff"] == row and f64["first_diff"]["index"][0] == 0, f64["detail"]


def test_real_vocabulary_logprob_ops_meet_the_fp64_row_and_the_control_does_not():
    """At the manifest's own vocabulary (V 151936, the short tier's T 4; the real contracts): our cpu
    kernels are inside atol 5e-5 of FP64 (4.7e-6 and 6.2e-6; the primary tier is C3's), the control
    outside it, both inside the BF16 row."""
    cases.forget()
    try:
        real = _cells(LOGPROB_OPS, ("forward_accuracy",), tiers=lambda op: ["short"])
        shifted = _cells(
            LOGPROB_OPS,
            ("forward_accuracy",),
            activate=functools.partial(ws1_ops.use_candidate, LSE_SHIFT),
            tiers=lambda op: ["short"],
        )
    finally:
        cases.forget()
    assert len(real) == len(shifted) == 2
    for cid, c in real.items():
        assert c.extra["shape"]["V"] == 151936
        (f64,) = _by_reference(c)["float64"]
        assert c.status == "green" and 0 < f64["max_abs"] < 5e-5, (cid, c.detail)
        s = shifted[cid]
        (s32,), (s64,) = _by_reference(s)["float32"], _by_reference(s)["float64"]
        assert s.status == "red" and s32["passed"] and not s64["passed"] and s64["n_diff"] == s64["n_total"], (
            cid,
            s.detail,
        )
