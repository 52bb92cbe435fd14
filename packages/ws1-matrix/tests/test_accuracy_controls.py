"""C4 gradient accuracy can fail (issue 11 items 4 and 10): a test-only cpu variant kernel (same id,
same family) whose gradient of one parameter is zeroed, halved or sign-flipped turns its cell red;
a gradient the candidate did not produce is red; the logprob ops are judged by their FP32 row.

Shrunk shapes (tests/small.py); the comparisons and the cell logic are the gates' own."""

import contextlib
import dataclasses

import pytest
from conftest import make_run

import ws1_ops
from ws1_matrix import compare, rows
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
    return lambda real: (lambda *a: real.param_grad(*a) * s)


def _cells(ops, judgments=("gradient_accuracy",)) -> dict:
    run = make_run("c4_gradient")
    judge_profile(run, list(ops), judgments, lambda op: tiers_of(run.manifest, op, extra=True))
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
        assert b["rel_l2"] == pytest.approx(a["rel_l2"], abs=1e-12) and b["cosine"] == pytest.approx(a["cosine"], rel=1e-12)
    with variant("lm_head", param_grad=scaled_param_grad(0.5)):
        c = _cells(["lm_head"])["lm_head-primary-gradient_accuracy"]
    w = _comparison(c, "weight")
    assert c.status == "red" and w["rel_l2"] == pytest.approx(0.5, rel=1e-3), w["detail"]


def test_a_gradient_the_candidate_did_not_produce_is_red(small_env):
    """A kernel that leaves the weight without a gradient: red, never a silently shorter list."""
    with variant("det_gemm", param_grad=lambda real: (lambda *a: None)):
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
