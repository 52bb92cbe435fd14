"""C2 runtime evidence: green when every node ran its declared kernel; red on an undeclared one."""

import ws1_ops
from ws1_contract import read_evidence
from ws1_matrix.runtime import main
from ws1_ops import registry


def test_runtime_green_on_cpu(tmp_path):
    assert main(["cpu_bf16", "--evidence-dir", str(tmp_path)]) == 0
    d = read_evidence(tmp_path / "cpu_bf16" / "c2_runtime.json")
    assert d["counts"]["green"] == 11 and all(c["recorded"]["kernel_ids"] == [c["declared"]] for c in d["cells"])


def test_undeclared_kernel_turns_red(tmp_path):
    """A cpu 'silu' that is really torch's (recording another family and id) must be caught."""
    real = registry._KERNELS[("silu", "cpu")]
    fake = ws1_ops.kernels_for("torch_default")["silu"]
    registry._KERNELS[("silu", "cpu")] = fake
    try:
        assert main(["cpu_bf16", "--evidence-dir", str(tmp_path)]) == 1
    finally:
        registry._KERNELS[("silu", "cpu")] = real
    cells = {c["id"]: c for c in read_evidence(tmp_path / "cpu_bf16" / "c2_runtime.json")["cells"]}
    assert cells["runtime-silu"]["status"] == "red"
    assert "undeclared fallback" in cells["runtime-silu"]["detail"]
    assert cells["runtime-swiglu"]["status"] == "green"


def test_absent_device_exit_2(tmp_path):
    assert main(["cuda_bf16", "--evidence-dir", str(tmp_path)]) == 2
