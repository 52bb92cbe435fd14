"""Registry, runtime record, fail-closed behaviour, and bad input."""

import subprocess
import sys

import pytest
import torch

import ws1_accel
import ws1_ops
from ws1_ops import KernelUnavailable, NoProfile, OpInputError


def test_record_says_what_ran(cpu):
    x = torch.randn(3, 16).bfloat16().requires_grad_()
    w = torch.randn(8, 16).bfloat16().requires_grad_()
    with ws1_ops.record() as rec:
        ws1_ops.det_gemm(x, w, torch.arange(3)).float().sum().backward()
        ws1_ops.silu(x.detach())
    s = rec.summary()
    # backward: two kernel calls, dx and dW
    label = {k: s["det_gemm"][k] for k in ("kernel_ids", "families", "devices", "forward", "backward")}
    assert label == {
        "kernel_ids": ["ws1_cpu::det_gemm"],
        "families": ["cpu"],
        "devices": ["cpu"],
        "forward": 1,
        "backward": 2,
    }
    # and the kernel package's own count confirms it: det_gemm once, its dx and dW GEMMs twice
    assert s["det_gemm"]["package_problems"] == []
    assert {kid: sum(p.values()) for kid, p in s["det_gemm"]["package"].items()} == {
        "ws1_cpu::det_gemm": 1,
        "ws1_cpu::gemm": 2,
    }
    assert s["silu"]["kernel_ids"] == ["ws1_cpu::silu"] and s["silu"]["backward"] == 0


def test_backward_runs_only_the_gradients_asked_for(cpu):
    """A frozen input or weight costs no kernel call (a frozen weight skips its row reduction)."""
    x = torch.randn(3, 16).bfloat16()
    w = torch.randn(8, 16).bfloat16()
    for gx, gw in ((False, True), (True, False)):
        xx, ww = x.clone().requires_grad_(gx), w.clone().requires_grad_(gw)
        with ws1_ops.record() as rec:
            ws1_ops.det_gemm(xx, ww, torch.arange(3)).float().sum().backward()
        assert rec.summary()["det_gemm"]["backward"] == 1
        assert (xx.grad is not None) == gx and (ww.grad is not None) == gw


def test_every_required_node_has_a_cpu_kernel():
    ks = ws1_ops.kernels_for("cpu")
    assert sorted(ks) == sorted(ws1_ops.REQUIRED_NODES)
    assert all(k.kernel_id == f"ws1_cpu::{op}" and (k.bwd or k.param_grad) for op, k in ks.items())


def test_no_profile_is_an_error():
    with pytest.raises(NoProfile, match="use_profile"):
        ws1_ops.silu(torch.zeros(2, 2).bfloat16())


def test_absent_device_fails_closed():
    with pytest.raises(ws1_accel.AcceleratorUnavailable):
        with ws1_ops.use_profile("cuda_bf16"):
            pass
    with pytest.raises(ws1_accel.ProfileDeviceMismatch):
        with ws1_ops.use_profile("ascend_bf16", "cuda:0"):
            pass


def test_unknown_candidate():
    with pytest.raises(KernelUnavailable, match="unknown candidate"):
        with ws1_ops.use_candidate("cublas"):
            pass


def test_missing_kernel_package_is_a_clear_error_and_reference_still_works():
    code = r"""
import sys
sys.modules["ws1_kernels_cpu"] = None   # as if ws1-kernels-cpu were not installed
import torch, ws1_ops
x = torch.randn(4, 8)
print("reference", tuple(ws1_ops.reference.rms_norm(x, torch.ones(8)).shape))
try:
    with ws1_ops.use_profile("cpu_bf16"):
        pass
except ws1_ops.KernelUnavailable as e:
    print("refused:", e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "reference (4, 8)" in r.stdout
    assert "refused: backend family 'cpu' is not available: ModuleNotFoundError" in r.stdout


BF = torch.bfloat16


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: ws1_ops.det_gemm(torch.zeros(2, 8), torch.zeros(4, 8, dtype=BF)),
            "det_gemm: x must be bfloat16, got float32",
        ),
        (
            lambda: ws1_ops.det_gemm(torch.zeros(2, 3, 8, dtype=BF), torch.zeros(4, 8, dtype=BF)),
            r"det_gemm: x must be \[M, K\], got shape \(2, 3, 8\)",
        ),
        (
            lambda: ws1_ops.det_gemm(torch.zeros(2, 8, dtype=BF), torch.zeros(4, 9, dtype=BF)),
            "K mismatch: x has K=8, weight has K=9",
        ),
        (
            lambda: ws1_ops.det_gemm(torch.zeros(2, 8, dtype=BF), torch.zeros(4, 8, dtype=torch.float16)),
            "weight must be bfloat16 or float32",
        ),
        (
            lambda: ws1_ops.embedding(torch.tensor([0, 5, 10]), torch.zeros(10, 4, dtype=BF)),
            r"token id 10 out of range \[0, 10\)",
        ),
        (lambda: ws1_ops.embedding(torch.tensor([-1]), torch.zeros(10, 4, dtype=BF)), "token id -1 out of range"),
        (lambda: ws1_ops.embedding(torch.tensor([0.0]), torch.zeros(10, 4, dtype=BF)), "ids must be an int64 tensor"),
        (lambda: ws1_ops.logprob(torch.zeros(2, 5), torch.tensor([0, 5])), r"target id 5 out of range \[0, 5\)"),
        (lambda: ws1_ops.logprob(torch.zeros(2, 5, dtype=BF), torch.tensor([0, 1])), "logits must be float32"),
        (lambda: ws1_ops.rms_norm(torch.zeros(2, 8), torch.zeros(7, dtype=BF)), r"weight must be \[8\]"),
        (
            lambda: ws1_ops.rope(torch.zeros(2, 1, 7, dtype=BF), torch.zeros(2, dtype=torch.int64)),
            "head_dim must be even",
        ),
        (
            lambda: ws1_ops.swiglu(torch.zeros(2, 8, dtype=BF), torch.zeros(2, 9, dtype=BF)),
            "gate and up must have one shape",
        ),
        (
            lambda: ws1_ops.qk_norm(torch.zeros(2, 8, dtype=BF), torch.zeros(8, dtype=BF)),
            r"x must be \[T, n_heads, D\]",
        ),
    ],
)
def test_bad_input_one_line_error(call, match, cpu):
    with pytest.raises(OpInputError, match=match) as ei:
        call()
    assert "\n" not in str(ei.value)


def test_non_contiguous_is_handled(cpu):
    x = torch.randn(16, 64).bfloat16()
    w = torch.randn(64, 32).bfloat16().t()  # [32, 64] non-contiguous view
    xt = torch.randn(64, 16).bfloat16().t()
    from ws1_contract import bitwise

    assert bitwise(ws1_ops.det_gemm(x, w), ws1_ops.det_gemm(x, w.contiguous())).passed
    assert bitwise(ws1_ops.det_gemm(xt, w), ws1_ops.det_gemm(xt.contiguous(), w.contiguous())).passed


def test_empty_batch(cpu):
    y = ws1_ops.det_gemm(torch.zeros(0, 8, dtype=BF), torch.zeros(4, 8, dtype=BF))
    assert y.shape == (0, 4)
    assert ws1_ops.rms_norm(torch.zeros(0, 8), torch.ones(8, dtype=BF)).shape == (0, 8)


def test_nan_propagates_to_its_row_only(cpu):
    """Documented behaviour: a NaN input poisons its own row's output and no other row."""
    x = torch.randn(4, 64).bfloat16()
    x[2, 5] = float("nan")
    y = ws1_ops.det_gemm(x, torch.randn(8, 64).bfloat16())
    assert torch.isnan(y[2]).all() and torch.isfinite(y[[0, 1, 3]]).all()
    z = ws1_ops.rms_norm(x.float(), torch.ones(64, dtype=BF))
    assert torch.isnan(z[2]).all() and torch.isfinite(z[[0, 1, 3]]).all()


def test_row_keys_must_identify_rows(cpu):
    x = torch.randn(3, 8).bfloat16()
    w = torch.randn(4, 8).bfloat16().requires_grad_()
    y = ws1_ops.det_gemm(x, w, torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="share a logical key"):
        y.float().sum().backward()


def test_nested_records_each_see_their_calls(cpu):
    """record() blocks nest (ws1_vllm records its own calls inside a gate's block): leaving the inner one, whose
    events equal the outer one's, must remove the inner recorder, not the outer."""
    x, w = torch.randn(3, 8).bfloat16(), torch.randn(4, 8).bfloat16()
    with ws1_ops.record() as outer:
        with ws1_ops.record() as inner:
            ws1_ops.det_gemm(x, w)
        ws1_ops.det_gemm(x, w)
    assert inner.summary()["det_gemm"]["forward"] == 1
    assert outer.summary()["det_gemm"]["forward"] == 2


def test_merged_records_add_up_and_an_unknown_field_kind_raises(cpu):
    """Recorder.merge (a process-wide log fed by many record() blocks): two blocks' calls add up; a field of a kind
    merge does not know raises instead of being dropped."""
    x, w = torch.randn(3, 8).bfloat16(), torch.randn(4, 8).bfloat16()
    total = ws1_ops.Recorder()
    for _ in range(2):
        with ws1_ops.record() as part:
            ws1_ops.det_gemm(x, w)
        total.merge(part)
    assert total.summary()["det_gemm"]["forward"] == 2
    odd = ws1_ops.Recorder()
    odd.unreported = ["not a set"]
    with pytest.raises(TypeError, match="field unreported is a list"):
        total.merge(odd)
