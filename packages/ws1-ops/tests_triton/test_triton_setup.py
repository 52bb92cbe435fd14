"""The mode is really in use (the interpreter, or the compiled kernels on the device), the family
registers the manifest's kernel ids, and the profile itself stays refused on a host without a GPU."""

import pytest
import torch

import ws1_accel
import ws1_ops
from ws1_contract import load_manifest


@pytest.mark.interpreter_only
def test_kernels_are_interpreted_and_run_on_cpu_tensors(tri):
    from triton.runtime.interpreter import InterpretedFunction

    from ws1_ops.backends import triton as tb
    from ws1_ops.triton import _common

    assert _common.INTERPRET
    for node, mod in tb.MODULES.items():
        k = getattr(mod, f"{node}_fwd_kernel")
        assert isinstance(k, _common.counted) and isinstance(k.fn, InterpretedFunction), node
    x = torch.randn(5, 16).bfloat16()
    with ws1_ops.record() as rec:
        y = ws1_ops.silu(x)
    assert y.device.type == "cpu"
    s = rec.summary()["silu"]
    assert (
        s["kernel_ids"] == ["ws1_ops.triton.silu:silu_fwd_kernel"]
        and s["families"] == ["triton"]
        and s["devices"] == ["cpu"]
    )
    # the launch itself counted it (the kernels' self-report), on the interpreter path
    assert s["package"] == {"ws1_ops.triton.silu:silu_fwd_kernel": {"interpreter": 1}} and s["package_problems"] == []


@pytest.mark.device_only
def test_kernels_are_compiled_and_run_on_the_device(tri):
    """Device mode: the launchers run JIT-compiled kernels on CUDA tensors, counted on the device's
    path (sm90 on an H100/H200), with the device's configuration table."""
    import triton

    from ws1_ops.backends import triton as tb
    from ws1_ops.triton import _common, _gemm

    assert not _common.INTERPRET
    for node, mod in tb.MODULES.items():
        k = getattr(mod, f"{node}_fwd_kernel")
        assert isinstance(k, _common.counted) and isinstance(k.fn, triton.runtime.jit.JITFunction), node
    x = torch.randn(5, 16).bfloat16().cuda()
    with ws1_ops.record() as rec:
        y = ws1_ops.silu(x)
    assert y.device.type == "cuda"
    path = _common._gpu_path(torch.cuda.current_device())
    s = rec.summary()["silu"]
    assert s["package"] == {"ws1_ops.triton.silu:silu_fwd_kernel": {path: 1}} and s["package_problems"] == []
    major = torch.cuda.get_device_capability()[0]
    assert _common.arch(x) == ("sm90" if major == 9 else "sm80")
    assert _gemm.plan_fwd(x, torch.zeros(8, 16, dtype=torch.bfloat16, device="cuda")).tma == (major == 9)


def test_a_swapped_triton_callable_is_caught(tri):
    """A pure-Python callable behind the triton label launches nothing: the record says it did not run."""
    import dataclasses

    from tdev import swapped

    with swapped("silu", lambda real: dataclasses.replace(real, fwd=lambda x: torch.nn.functional.silu(x))):
        with ws1_ops.record() as rec:
            ws1_ops.silu(torch.randn(5, 16).bfloat16())
    s = rec.summary()["silu"]
    assert s["kernel_ids"] == ["ws1_ops.triton.silu:silu_fwd_kernel"]
    assert any("recorded kernel did not run" in p for p in s["package_problems"]), s


@pytest.mark.parametrize("fusion", [False, True])
def test_every_launch_carries_the_fp_fusion_option(fusion, tri, monkeypatch):
    """What a launch hands to Triton (the GPU compiles with it at run time) holds the family's
    enable_fp_fusion; with the module constant flipped, the launches follow (the check can fail)."""
    from ws1_ops.triton import _common
    from ws1_ops.triton import swiglu as sw

    seen = []

    class Spy:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.append(kwargs)

    from tdev import DEV

    monkeypatch.setattr(_common, "FP_FUSION", fusion)
    monkeypatch.setattr(sw.swiglu_fwd_kernel, "fn", Spy())
    sw.swiglu(torch.randn(3, 8).bfloat16().to(DEV), torch.randn(3, 8).bfloat16().to(DEV))
    assert [k["enable_fp_fusion"] for k in seen] == [fusion]
    assert _common.counted.options({"num_warps": 4}) == {"enable_fp_fusion": fusion, "num_warps": 4}


def test_every_node_registers_the_manifest_kernel_id():
    ks = ws1_ops.kernels_for("triton")
    assert sorted(ks) == sorted(ws1_ops.REQUIRED_NODES)
    m = load_manifest()
    for node, k in ks.items():
        assert k.kernel_id == m.kernel_id("triton_cuda_bf16", node), node
        assert k.bwd is not None or k.param_grad is not None, node


@pytest.mark.interpreter_only
@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA device")
def test_profile_is_refused_without_a_gpu():
    """On a CPU host the profile never runs (so its cells stay red 'not executed on this host')."""
    with pytest.raises(ws1_accel.AcceleratorUnavailable):
        with ws1_ops.use_profile("triton_cuda_bf16"):
            pass


def test_cpu_tensors_outside_the_interpreter_are_refused(monkeypatch):
    from ws1_ops.triton import _common

    monkeypatch.setattr(_common, "INTERPRET", False)
    with pytest.raises(ValueError, match="must be on a CUDA device, got cpu .*TRITON_INTERPRET"):
        _common.check_device("det_gemm", torch.zeros(2))


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda m: m["det_gemm"].det_gemm(torch.zeros(2, 8), torch.zeros(4, 8, dtype=torch.bfloat16)),
            "must be bfloat16",
        ),
        (
            lambda m: m["det_gemm"].det_gemm(
                torch.zeros(2, 8, dtype=torch.bfloat16), torch.zeros(4, 9, dtype=torch.bfloat16)
            ),
            r"need x \[M, K\] and weight \[N, K\]",
        ),
        (lambda m: m["logprob"].logprob(torch.zeros(2, 0), torch.zeros(2, dtype=torch.int64)), "V > 0"),
        (
            lambda m: m["rms_norm"].rms_norm(torch.zeros(2, 8), torch.zeros(7, dtype=torch.bfloat16), 1e-6),
            r"weight must be \[8\]",
        ),
        (
            lambda m: m["attention"].attention(
                *(torch.zeros(3, 2, 8, dtype=torch.bfloat16),) * 3,
                torch.tensor([0, 3]),
                torch.tensor([0, 3]),
                torch.tensor([0, 1, 3]),
                1.0,
            ),
            "query 2 at position 3",
        ),
        (
            lambda m: m["swiglu"].swiglu(
                torch.zeros(2, 8, dtype=torch.bfloat16), torch.zeros(2, 9, dtype=torch.bfloat16)
            ),
            "one shape",
        ),
    ],
)
@pytest.mark.interpreter_only  # CPU inputs: on a device the device check answers first
def test_launchers_reject_bad_inputs_with_one_line(call, match):
    from ws1_ops.backends import triton as tb

    with pytest.raises(ValueError, match=match) as ei:
        call(tb.MODULES)
    assert "\n" not in str(ei.value)


def test_empty_inputs(tri):
    bf = torch.bfloat16
    assert ws1_ops.det_gemm(torch.zeros(0, 8, dtype=bf), torch.zeros(4, 8, dtype=bf)).shape == (0, 4)
    assert ws1_ops.rms_norm(torch.zeros(0, 8), torch.ones(8, dtype=bf)).shape == (0, 8)
    assert ws1_ops.silu(torch.zeros(0, 8, dtype=bf)).shape == (0, 8)


def test_missing_triton_refuses_the_family_with_the_reason():
    import subprocess
    import sys

    code = r"""
import sys
sys.modules["triton"] = None   # as if triton were not installed
import ws1_ops
print("why:", ws1_ops.family_available("triton"))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (
        "why: backend family 'triton' is not available: ModuleNotFoundError" in r.stdout
        or "why: backend family 'triton' is not available: ImportError" in r.stdout
    ), r.stdout
