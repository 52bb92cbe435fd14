"""Every branch of ws1-accel on a CPU-only host: CUDA and NPU presence are simulated."""

import sys
import types

import pytest
import torch

import ws1_accel as acc
from ws1_accel.__main__ import main


def test_profile_families_and_device_types():
    assert {p: acc.family_of(p) for p in acc.PROFILE_FAMILY} == {
        "cpu_bf16": "cpu",
        "triton_cuda_bf16": "triton",
        "cuda_bf16": "cuda",
        "ascend_bf16": "ascend",
    }
    assert [acc.device_type_of(p) for p in ("cpu_bf16", "triton_cuda_bf16", "cuda_bf16", "ascend_bf16")] == [
        "cpu",
        "cuda",
        "cuda",
        "npu",
    ]


def test_unknown_profile_names_the_profile():
    with pytest.raises(acc.UnknownProfile, match="'fp8_cuda'"):
        acc.resolve_device("fp8_cuda")


def test_cpu_facts():
    f = acc.facts("cpu_bf16")
    assert f.device == "cpu" and f.family == "cpu"
    assert f.arch_key == torch.backends.cpu.get_cpu_capability().lower()
    assert f.device_name
    assert acc.disable_tf32("cpu") is False and f.tf32_enabled is False


def test_cpu_tf32_report_follows_matmul_precision():
    try:
        torch.set_float32_matmul_precision("high")
        assert acc.tf32_enabled("cpu") is True
    finally:
        assert acc.disable_tf32("cpu") is False


@pytest.mark.parametrize("profile", ["cuda_bf16", "triton_cuda_bf16"])
def test_cuda_absent_fails_closed(profile, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not acc.is_available(profile)
    with pytest.raises(acc.AcceleratorUnavailable, match=f"{profile} needs a cuda device"):
        acc.resolve_device(profile)


def test_cuda_present_simulated(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    assert acc.resolve_device("cuda_bf16") == torch.device("cuda", 0)
    assert acc.device_name("cuda:0") == "NVIDIA H200"
    assert acc.arch_key("cuda:0") == "sm90"
    with pytest.raises(acc.AcceleratorUnavailable, match="only 1 cuda device"):
        acc.resolve_device("cuda_bf16", "cuda:3")


def test_cuda_tf32_disable():
    # cudnn.allow_tf32 defaults to True: the report must say so until it is disabled.
    torch.backends.cuda.matmul.allow_tf32 = True
    assert acc.tf32_enabled("cuda") is True
    assert acc.disable_tf32("cuda") is False
    assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False


def test_family_mismatch_rejected_before_any_probe(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a device was probed")

    for v in acc.VENDORS.values():
        monkeypatch.setattr(v, "probe", boom)
    with pytest.raises(acc.ProfileDeviceMismatch, match="runs on npu devices, not 'cuda:0'"):
        acc.resolve_device("ascend_bf16", "cuda:0")
    with pytest.raises(acc.ProfileDeviceMismatch, match="runs on cuda devices"):
        acc.resolve_device("triton_cuda_bf16", "npu:0")
    with pytest.raises(acc.ProfileDeviceMismatch, match="runs on cpu devices"):
        acc.resolve_device("cpu_bf16", "cuda")
    with pytest.raises(acc.ProfileDeviceMismatch, match="is not a device"):
        acc.resolve_device("cpu_bf16", "tpu-ish:x")


def test_npu_absent_reports_the_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import raises ImportError
    why = acc.unavailable_reason("ascend_bf16")
    assert why.startswith("torch_npu cannot be imported: ModuleNotFoundError")
    with pytest.raises(
        acc.AcceleratorUnavailable, match="ascend_bf16 needs a npu device: torch_npu cannot be imported"
    ):
        acc.resolve_device("ascend_bf16")


def test_npu_import_error_from_missing_cann(monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "torch_npu":
            raise OSError("libascendcl.so: cannot open shared object file")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(acc.AcceleratorUnavailable, match="OSError: libascendcl.so"):
        acc.resolve_device("ascend_bf16")


def _fake_npu(monkeypatch, available=True):
    calls = []
    npu = types.SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: 1,
        get_device_name=lambda i=0: "Ascend910B3",
        manual_seed_all=lambda s: calls.append(("seed", s)),
        synchronize=lambda i=0: calls.append(("sync", i)),
        empty_cache=lambda: calls.append(("empty",)),
    )
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    # what torch_npu itself does on import; only possible once, and process-global: afterwards
    # torch.accelerator (which torch.optim consults) looks for torch.npu, so no WS1 code uses torch.optim
    try:
        torch.utils.rename_privateuse1_backend("npu")
    except RuntimeError:
        pass
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    return calls


def test_npu_present_simulated(monkeypatch):
    calls = _fake_npu(monkeypatch)
    assert acc.resolve_device("ascend_bf16") == torch.device("npu", 0)
    assert acc.device_name("npu:0") == "Ascend910B3"
    assert acc.arch_key("npu:0") == "Ascend910B3"
    assert acc.disable_tf32("npu:0") is False
    acc.seed_all(7, "npu:0")
    acc.synchronize("npu:0")
    acc.empty_cache("npu:0")
    assert calls == [("seed", 7), ("sync", 0), ("empty",)]


def test_npu_imported_but_no_device(monkeypatch):
    _fake_npu(monkeypatch, available=False)
    with pytest.raises(acc.AcceleratorUnavailable, match="no NPU device is visible"):
        acc.resolve_device("ascend_bf16")


def test_seed_all_is_reproducible():
    acc.seed_all(20260812)
    a = torch.rand(4)
    acc.seed_all(20260812)
    assert torch.equal(a, torch.rand(4))


def test_register_profile():
    acc.register_profile("my_cpu_fp32", "cpu")
    try:
        assert acc.resolve_device("my_cpu_fp32") == torch.device("cpu")
        with pytest.raises(ValueError, match="unknown backend family"):
            acc.register_profile("x", "tpu")
    finally:
        acc.PROFILE_FAMILY.pop("my_cpu_fp32")


def test_cli_exit_codes(capsys, monkeypatch):
    assert main(["cpu_bf16"]) == 0
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    assert main(["ascend_bf16", "--json"]) == 2
    out = capsys.readouterr().out
    assert '"available": false' in out
    assert main(["ascend_bf16", "--device", "cuda:0"]) == 2
    assert "runs on npu devices" in capsys.readouterr().err
