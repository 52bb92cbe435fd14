"""C2's kernel-source cells: green only if the declared file exists AND defines the kernel's entry point
(``ws1_<family>::<op>`` -> a function ``<op>(...) { ... }``; ``<module>:<kernel>`` -> ``def <kernel>(``)."""

from ws1_contract.gates import _source_defines


def test_c_entry_point(tmp_path):
    f = tmp_path / "k.asc"
    f.write_text('extern "C" __global__ __aicore__ void rms_norm(GM_ADDR x, int64_t n) {\n}\n')
    assert _source_defines(f, "k.asc", "ws1_ascend::rms_norm")[0]
    ok, detail = _source_defines(f, "k.asc", "ws1_ascend::qk_norm")
    assert not ok and "does not define function qk_norm" in detail


def test_declaration_or_comment_is_not_a_definition(tmp_path):
    f = tmp_path / "k.cu"
    f.write_text(
        "// at::Tensor det_gemm(at::Tensor x) { }\nat::Tensor det_gemm(const at::Tensor& x);\n"
        "/* void det_gemm(int a) { } */\n"
    )
    assert not _source_defines(f, "k.cu", "ws1_cuda::det_gemm")[0]


def test_python_entry_point(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("@triton.jit\ndef rope_fwd_kernel(x_ptr):\n    pass\n# def silu_fwd_kernel(x):\n")
    assert _source_defines(f, "k.py", "ws1_ops.triton.rope:rope_fwd_kernel")[0]
    assert not _source_defines(f, "k.py", "ws1_ops.triton.silu:silu_fwd_kernel")[0]


def test_missing_file(tmp_path):
    ok, detail = _source_defines(tmp_path / "nope.asc", "nope.asc", "ws1_ascend::rope")
    assert not ok and "not found" in detail
