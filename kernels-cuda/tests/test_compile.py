"""The device code compiles for sm_80 and sm_90a with warnings as errors, ptxas reports no spill, every
manifest-declared source defines its entry point — and each of those checks is shown able to fail.

~35 s on 2 cores (11 files x 2 archs, nvcc alone, no torch headers) plus ~6 s for the controls."""
import json
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_cuda_testpaths import PKG, ROOT, load_compile_check  # noqa: E402

cc = load_compile_check()

needs_nvcc = pytest.mark.skipif(cc.find_nvcc() is None and os.environ.get("WS1_REQUIRE_NVCC") != "1",
                                reason="no nvcc on this host (CUDA_HOME, PATH, /usr/local/cuda*): the device code cannot be compiled")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    rc, rep = cc.run(out, jobs=2)
    return rc, rep, out


@needs_nvcc
def test_every_kernel_compiles_for_both_archs_without_spills(report):
    rc, rep, out = report
    assert rep["problems"] == [] and rc == 0, "\n".join(rep["problems"])
    files = {f["file"]: f for f in rep["files"]}
    assert set(files) == {p.name for p in (PKG / "csrc").glob("*.cu")}
    for name, f in files.items():
        assert f["ok"] and f["kernels"], name
        archs = {k["arch"] for k in f["kernels"]}
        assert archs == {"sm_80", "sm_90a"}, (name, archs)
    hot = [k for n in ("det_gemm.cu", "lm_head.cu", "attention.cu") for k in files[n]["kernels"]]
    assert any("mma_gemm_kernel" in k["name"] for k in hot) and any("attention_fwd_kernel" in k["name"] for k in hot)
    assert all(k["spill_stores"] == 0 and k["spill_loads"] == 0 and k["registers"] > 0 for k in hot)
    # the evidence files are written, the JSON says what it is
    data = json.loads((out / "cuda_resources.json").read_text())
    assert data["verdict"] == "green" and "nothing here executed a kernel" in data["note"]
    assert "| attention.cu |" in (out / "cuda_resources.md").read_text()


SPILLING = """
// 96 live floats under __launch_bounds__(1024, 2) (a 32-register cap): ptxas must spill, on every host
__global__ void __launch_bounds__(1024, 2) spill_kernel(float* p) {
  float a[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) a[i] = p[i * blockDim.x + threadIdx.x];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 96; ++i)
#pragma unroll
    for (int j = 0; j < 96; ++j) s = fmaf(a[i], a[95 - j], s);
  p[threadIdx.x] = s;
}
"""


@needs_nvcc
def test_a_spilling_kernel_is_red(tmp_path):
    """Negative control: a kernel that cannot fit its registers (ptxas is deterministic: it spills the same
    way on every host) turns the check red, naming the kernel and both archs."""
    src = tmp_path / "spill.cu"
    src.write_text(SPILLING)
    rc, rep = cc.run(None, jobs=1, sources=[src])
    assert rc == 1
    spills = [p for p in rep["problems"] if "spill_kernel" in p and "spills on" in p]
    assert len(spills) == 2 and any("sm_80" in p for p in spills) and any("sm_90a" in p for p in spills), rep["problems"]


@needs_nvcc
def test_a_warning_is_a_compile_error(tmp_path):
    src = tmp_path / "warn.cu"
    src.write_text('#include "ws1_cuda_common.cuh"\n__global__ void k(float* p) { int unused = 3; p[0] = 1.0f; }\n')
    shutil.copy(PKG / "csrc" / "ws1_cuda_common.cuh", tmp_path)
    rc, rep = cc.run(None, jobs=1, sources=[src])
    assert rc == 1 and any("compile failed" in p and "unused" in p for p in rep["problems"]), rep["problems"]


def test_entry_points_are_checked(tmp_path):
    """Every declared source defines its op and the registration file declares it; a renamed entry point,
    a missing file and a missing schema are each named."""
    declared = cc.manifest_sources()
    assert len(declared) == 11 and cc.entry_problems(declared) == []
    csrc = tmp_path / "kernels-cuda" / "csrc"
    shutil.copytree(PKG / "csrc", csrc)
    (csrc / "rope.cu").write_text((csrc / "rope.cu").read_text().replace("at::Tensor rope(", "at::Tensor rope_renamed("))
    (csrc / "silu.cu").unlink()
    reg = csrc / "ws1_cuda.cpp"
    reg.write_text(reg.read_text().replace('m.def("logprob(', 'm.def("logprob_x('))
    problems = cc.entry_problems(declared, root=tmp_path, registration=reg)
    assert any(p.startswith("rope:") and "does not define the entry point rope" in p for p in problems), problems
    assert any(p.startswith("silu:") and "does not exist" in p for p in problems), problems
    assert any(p.startswith("logprob:") and "does not declare ws1_cuda::logprob" in p for p in problems), problems


def test_no_nvcc_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("WS1_NVCC", "none")
    assert cc.main(["--out", str(ROOT / "evidence" / "build-unused")]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "no nvcc found" in out[0]


def test_the_parser_reads_ptxas_lines():
    log = """ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
ptxas info    : Function properties for _Z1kPf
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 46080 bytes smem, 400 bytes cmem[0]
"""
    (k,) = cc.parse_ptxas(log)
    assert (k["arch"], k["registers"], k["spill_stores"], k["spill_loads"], k["stack_frame"], k["smem"], k["barriers"]) == \
        ("sm_90a", 255, 4, 12, 8, 46080, 1)
    problems = cc.check([{"file": "x.cu", "ok": True, "kernels": [dict(k, name="k")], "log": log}], {})
    assert any("spills on sm_90a" in p for p in problems) and any("no ['sm_80'] image" in p for p in problems)
