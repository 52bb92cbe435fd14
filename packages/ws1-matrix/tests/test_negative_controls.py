"""The matrix can fail: every kind of wrong kernel turns its cells red, for the right reason.

Shrunk shapes (tests/small.py); the comparisons, transforms and cell logic are the gates' own."""

import dataclasses
import functools

import pytest
import torch
from conftest import args, make_run

import ws1_ops
from ws1_contract import Cell, EvidenceError
from ws1_matrix import c34, compare, rows
from ws1_ops import registry


def _cells(run):
    return {c.id: c for c in run.cells}


def _failed_transforms(cell):
    return [t["transform"] for t in cell.extra.get("transforms", []) if not t["passed"]]


def test_torch_default_candidate_is_red_by_its_comparisons(small_env):
    """Plain PyTorch ops (the negative control): besides the fallback, the invariance comparisons
    themselves fail — batch-order dW, padding rows summed into dW/dweight, SDPA over padded keys."""
    control = functools.partial(ws1_ops.use_candidate, "torch_default")
    run = make_run("c4_gradient")
    c34.c4_gradient(run, args(op=["det_gemm", "rms_norm", "embedding"]), activate=control)
    cells = _cells(run)
    for op in ("det_gemm", "rms_norm", "embedding"):
        cell = cells[f"{op}-primary-gradient_invariance"]
        assert cell.status == "red"
        bad = _failed_transforms(cell)
        assert {"padded_right", "padded_left"} <= set(bad), (op, bad)
    assert "permuted" in _failed_transforms(cells["det_gemm-primary-gradient_invariance"])
    assert "undeclared fallback" in cells["det_gemm-primary-gradient_accuracy"].detail
    run = make_run("c3_forward")
    c34.c3_forward(run, args(op=["attention"]), activate=control)
    assert "padded_inline" in _failed_transforms(_cells(run)["attention-primary-forward_invariance"])


@pytest.fixture
def perturbed_det_gemm():
    """A test-only cpu det_gemm (same id, same family) whose last bit depends on the batch size: a
    'large-M path' that rounds one ulp up above M=8."""
    real = ws1_ops.kernels_for("cpu")["det_gemm"]  # loads the cpu family first

    def fwd(x, w):
        y = real.fwd(x, w)
        return torch.nextafter(y, torch.full_like(y, float("inf"))) if x.shape[0] > 8 else y

    registry._KERNELS[("det_gemm", "cpu")] = dataclasses.replace(real, fwd=fwd)
    yield
    registry._KERNELS[("det_gemm", "cpu")] = real


def test_batch_size_dependent_rounding_turns_invariance_red(small_env, perturbed_det_gemm):
    run = make_run("c3_forward")
    c34.c3_forward(run, args(op=["det_gemm"]))
    cells = _cells(run)
    for tier in ("short", "primary"):
        inv = cells[f"det_gemm-{tier}-forward_invariance"]
        assert inv.status == "red" and "differ in their bits" in inv.detail
        # one ulp is well inside the accuracy threshold: only invariance can see it
        assert cells[f"det_gemm-{tier}-forward_accuracy"].status == "green"
        assert inv.extra["kernel"]["kernel_ids"] == ["ws1_cpu::det_gemm"]  # the declared id: not a fallback
    # the canonical short batch has M=8 (unperturbed); batches with filler rows have M > 8
    assert {"random_positions", "padded_right", "padded_left"} <= set(_failed_transforms(cells["det_gemm-short-forward_invariance"]))
    # primary: M=59 is perturbed, so the small-M layouts differ and M16 agrees
    bad = set(_failed_transforms(cells["det_gemm-primary-forward_invariance"]))
    assert {"M1", "M2", "M3", "M7"} <= bad and "M16" not in bad


def test_kernel_of_another_family_is_an_undeclared_fallback(small_env):
    real = ws1_ops.kernels_for("cpu")["silu"]
    registry._KERNELS[("silu", "cpu")] = ws1_ops.kernels_for("torch_default")["silu"]
    try:
        run = make_run("c3_forward")
        c34.c3_forward(run, args(op=["silu", "swiglu"]))
    finally:
        registry._KERNELS[("silu", "cpu")] = real
    for c in run.cells:
        if c.extra["op"] == "silu":
            assert c.status == "red" and "undeclared fallback" in c.detail, c.detail
            assert c.extra["kernel"]["families"] == ["torch_default"]
        else:
            assert c.status == "green", c.detail
    # the run's provenance names the family that actually ran, and says it is wrong
    assert run.provenance["actual_backend"] == "cpu,torch_default"
    assert any("undeclared fallback" in p for p in run.extra["provenance_problems"])


def test_missing_kernel_package_is_red_never_served_by_another_family(small_env, monkeypatch):
    monkeypatch.setattr(ws1_ops, "family_available", lambda fam: "ModuleNotFoundError: No module named 'ws1_kernels_cpu'")
    run = make_run("c3_forward")
    c34.c3_forward(run, args(op=["det_gemm", "pack"]))
    cells = _cells(run)
    for tier in ("short", "primary"):
        c = cells[f"det_gemm-{tier}-forward_accuracy"]
        assert c.status == "red" and "not executed on this host: cpu kernel package missing" in c.detail
        assert "recorded" not in c.extra, "nothing may run in its place"
    assert cells["pack-short-forward_accuracy"].status == "N/A"


def test_missing_representative_case_is_red_not_skipped(tmp_path, monkeypatch):
    from small import small_contracts

    from ws1_matrix import cases

    def drop(m):
        m["representative_cases"] = [c for c in m["representative_cases"] if c["case_id"] != "rope-short-T8-cpu_bf16"]

    monkeypatch.setenv("WS1_CONTRACTS_DIR", str(small_contracts(tmp_path / "c", edit=drop)))
    cases.forget()
    run = make_run("c4_gradient")
    c34.c4_gradient(run, args(op=["rope"]))
    cells = _cells(run)
    for j in ("gradient_accuracy", "gradient_invariance"):
        c = cells[f"rope-short-{j}"]
        assert c.status == "red" and "missing representative case for rope × short" in c.detail
        assert cells[f"rope-primary-{j}"].status == "green"


def test_hidden_na_is_rejected():
    with pytest.raises(EvidenceError, match="hidden N/A"):
        Cell(id="det_gemm-short-forward_accuracy", judgment="forward_accuracy", status="N/A", detail="skipped")
    with pytest.raises(EvidenceError, match="hidden N/A"):
        Cell(id="x", judgment="forward_accuracy", status="N/A", detail="", na_reason="profile_independent")


def test_digest_path_green_and_caught(small_env, monkeypatch):
    """The path the real vocabulary-sized gradients take (canonical kept as sha256 digests per row
    block, reference gradient computed block by block), forced onto small tensors."""
    monkeypatch.setattr(rows, "DIGEST_ABOVE", 100)
    monkeypatch.setattr(compare, "BLOCK_ELEMENTS", 4096)
    run = make_run("c4_gradient")
    c34.c4_gradient(run, args(op=["lm_head", "embedding"]))
    cells = _cells(run)
    for op in ("lm_head", "embedding"):
        inv = cells[f"{op}-primary-gradient_invariance"]
        assert inv.status == "green", inv.detail
        acc = cells[f"{op}-primary-gradient_accuracy"]
        assert acc.status == "green", acc.detail
    run = make_run("c4_gradient")
    c34.c4_gradient(run, args(op=["lm_head"]), activate=functools.partial(ws1_ops.use_candidate, "torch_default"))
    inv = _cells(run)["lm_head-primary-gradient_invariance"]
    details = [t["detail"] for t in inv.extra["transforms"] if not t["passed"]]
    assert any("row blocks differ in their bits (sha256" in d and "first differing block starts at row" in d for d in details), details
