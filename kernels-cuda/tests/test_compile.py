"""The device code compiles for sm_80 and sm_90a with warnings as errors, ptxas reports no spill, the SASS holds
what the kernels are built on (the sm_90a GEMM: HGMMA.64x128x16 and TMA loads/stores, no local memory), every
manifest-declared source defines its entry point — and each of those checks is shown able to fail.

The CI subset (compile_check --subset ci): the light files for both archs (~35 s on 2 cores) and two of the four
CUTLASS translation units for sm_90a (~1.5-2 min of nvcc each, in parallel; compile_check's docstring says why
two cover the four); kernels-cuda/build/compile_check caches results by content, so a rerun of unchanged
sources takes seconds. `nox -s build_cuda` compiles all four."""

import json
import os
import re
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_cuda_testpaths import PKG, ROOT, load_compile_check  # noqa: E402

cc = load_compile_check()

needs_nvcc = pytest.mark.skipif(
    cc.find_nvcc() is None and os.environ.get("WS1_REQUIRE_NVCC") != "1",
    reason="no nvcc on this host (CUDA_HOME, PATH, /usr/local/cuda*): the device code cannot be compiled",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    rc, rep = cc.run(out, jobs=2, subset="ci")
    return rc, rep, out


@needs_nvcc
def test_every_kernel_compiles_for_both_archs_without_spills(report):
    rc, rep, out = report
    assert rep["problems"] == [] and rc == 0, "\n".join(rep["problems"])
    files = {f["file"]: f for f in rep["files"]}
    assert set(files) == {p.name for p in cc.selected("ci")}
    assert {n for n in files if n.startswith("wgmma_gemm_")} == set(cc.CI_HEAVY)
    for name, f in files.items():
        assert f["ok"] and f["kernels"], name
        archs = {k["arch"] for k in f["kernels"]}
        assert archs == ({"sm_90a"} if cc.is_heavy(PKG / "csrc" / name) else {"sm_80", "sm_90a"}), (name, archs)
    hot = [
        k
        for n in (
            "det_gemm.cu",
            "lm_head.cu",
            "attention_plan.cu",
            "attention_fwd.cu",
            "attention_bwd.cu",
            *cc.CI_HEAVY,
        )
        for k in files[n]["kernels"]
    ]
    assert any("mma_gemm_kernel" in k["name"] for k in hot) and any("attention" in k["name"] for k in hot)
    assert all(k["spill_stores"] == 0 and k["spill_loads"] == 0 and k["registers"] > 0 for k in hot)
    # the sm_90a GEMM: every instantiated kernel (2 configurations per TU) runs wgmma m64n128k16 and TMA, no LDL/STL
    for name in cc.CI_HEAVY:
        facts = [
            f
            for f in files[name]["sass_facts"]
            if f["arch"] == "sm_90a" and "GemmUniversal" in f["kernel"] and "wgmma m64n128k16 BF16->FP32 (HGMMA)" in f
        ]
        assert len(facts) >= 2, (name, facts)
        for f in facts:
            assert f["wgmma m64n128k16 BF16->FP32 (HGMMA)"] > 0 and f["TMA tensor load (UTMALDG)"] > 0, f
            assert f["local memory (LDL/STL)"] == 0 and f["another wgmma shape"] == 0, f
    # the evidence files are written, the JSON says what it is
    data = json.loads((out / "cuda_resources.json").read_text())
    assert data["verdict"] == "green" and "nothing here executed a kernel" in data["note"]
    assert "| attention_fwd.cu |" in (out / "cuda_resources.md").read_text()


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


@pytest.fixture(scope="module")
def spilling(tmp_path_factory):
    """The spilling kernel compiled once for both negative controls below (spills, SASS expectations): the check of
    one compile is judged twice rather than the same nvcc run made twice. The SASS row names only spill_kernel, so the
    spill check sees the same resource report either way."""
    src = tmp_path_factory.mktemp("spill") / "spill.cu"
    src.write_text(SPILLING)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            cc,
            "SASS_EXPECT",
            [
                {
                    "file": "spill.cu",
                    "arch": "sm_90a",
                    "kernel": "spill_kernel",
                    "require": {"wgmma (HGMMA)": r"\bHGMMA\b"},
                    "forbid": cc.NO_LOCAL,
                }
            ],
        )
        return cc.run(None, jobs=1, sources=[src])


@needs_nvcc
def test_a_spilling_kernel_is_red(spilling):
    """Negative control: a kernel that cannot fit its registers (ptxas is deterministic: it spills the same
    way on every host) turns the check red, naming the kernel and both archs."""
    rc, rep = spilling
    assert rc == 1
    spills = [p for p in rep["problems"] if "spill_kernel" in p and "spills on" in p]
    assert len(spills) == 2 and any("sm_80" in p for p in spills) and any("sm_90a" in p for p in spills), rep[
        "problems"
    ]


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
    (csrc / "rope.cu").write_text(
        (csrc / "rope.cu").read_text().replace("at::Tensor rope(", "at::Tensor rope_renamed(")
    )
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
    assert (
        k["arch"],
        k["registers"],
        k["spill_stores"],
        k["spill_loads"],
        k["stack_frame"],
        k["smem"],
        k["barriers"],
    ) == ("sm_90a", 255, 4, 12, 8, 46080, 1)
    problems = cc.check([{"file": "x.cu", "ok": True, "kernels": [dict(k, name="k")], "log": log}], {})
    assert any("spills on sm_90a" in p for p in problems) and any("no ['sm_80'] image" in p for p in problems)


@needs_nvcc
def test_sass_expectations_can_fail(spilling):
    """Negative control of the SASS check: the spilling kernel (local memory on every host) checked against a
    row that forbids local memory and requires wgmma is red on both counts, naming the kernel."""
    rc, rep = spilling
    assert rc == 1
    assert any("spill_kernel" in p and "lacks wgmma (HGMMA)" in p for p in rep["problems"]), rep["problems"]
    assert any("spill_kernel" in p and "local memory (LDL/STL)" in p and "has" in p for p in rep["problems"]), rep[
        "problems"
    ]


def test_the_sass_parser_and_checker():
    dump = """
Fatbin elf code:
================
arch = sm_90a
code version = [1,8]

\tcode for sm_90a
\t\tFunction : _Z1kv
        /*0000*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4].tnspA, RZ, !UPT, gsb0 ;  \
/* 0x61e00000041879f0 */
        /*0010*/                   UTMALDG.3D [UR8], [UR4] ;  /* 0x000000000008 */
        /*0020*/                   STL [R1], R2 ;  /* 0x000000000008 */
"""
    sass = cc.parse_sass(dump)
    assert list(sass) == [("sm_90a", "_Z1kv")] and len(sass[("sm_90a", "_Z1kv")]) == 3
    row = {
        "file": "x.cu",
        "arch": "sm_90a",
        "kernel": "_Z1kv",
        "require": {"h": r"\bHGMMA\.64x128x16\.F32\.BF16\b", "w": r"\bHMMA\b"},
        "forbid": cc.NO_LOCAL,
    }
    problems, facts = cc.sass_problems("x.cu", [], sass, table=[row])
    assert facts[0]["h"] == 1 and facts[0]["w"] == 0
    assert any("lacks w" in p for p in problems) and any("local memory" in p for p in problems)
    problems, _ = cc.sass_problems("x.cu", [], None, table=[row])
    assert problems and "no cuobjdump" in problems[0]
    problems, _ = cc.sass_problems("x.cu", [], {("sm_80", "_Z1kv"): []}, table=[row])
    assert problems == ["x.cu: no sm_90a kernel matching /_Z1kv/ in the SASS"]


def test_each_gemm_tu_is_held_to_its_own_wgmma_shape():
    """The real table: the n32 candidate's TU must run m64n32k16 and nothing else; every other CUTLASS TU m64n128k16
    and nothing else (the candidate's shape in one of them is red, and n128 in the candidate's TU is red)."""

    def sass(*ins):
        return {
            ("sm_90a", "cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<x>>"): [
                *ins,
                "UTMALDG.2D [UR8], [UR4]",
                "UTMASTG.2D [UR4], [UR6]",
                "F2FP.BF16.F32.PACK_AB R0, R1, R2",
            ]
        }

    n32 = "HGMMA.64x32x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0"
    n128 = "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0"
    assert cc.sass_problems(cc.N32_TU, [], sass(n32))[0] == []
    assert cc.sass_problems("wgmma_gemm_fwd_bf16.cu", [], sass(n128))[0] == []
    bad = cc.sass_problems(cc.N32_TU, [], sass(n32, n128))[0]
    assert bad and all("another wgmma shape" in p for p in bad), bad
    bad = cc.sass_problems("wgmma_gemm_fwd_bf16.cu", [], sass(n32))[0]
    assert any("lacks wgmma m64n128k16" in p for p in bad) and any("another wgmma shape" in p for p in bad), bad


def test_a_floating_point_atomic_is_forbidden_and_an_integer_one_is_not():
    """NO_FLOAT_ATOMIC on the SASS nvcc 13.0 emits for atomicAdd on float / double (RED, REDG, ATOMG; sm_80 and
    sm_90a spellings) and for the integer atomics a device plan uses (CAS, MAX, EXCH): only the first are found."""
    pat = re.compile(next(iter(cc.NO_FLOAT_ATOMIC.values())))
    for ins in (
        "REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR12][R2.64], R17 ;",
        "RED.E.ADD.F64.RN.STRONG.GPU [R6.64], R8 ;",
        "ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU PT, R9, desc[UR12][R8.64], R21 ;",
        "ATOMS.ADD.F16x2.RN R1, [R2], R3 ;",
    ):
        assert pat.search(ins), ins
    for ins in (
        "ATOMG.E.CAS.STRONG.GPU PT, RZ, [R12], R18, R19 ;",
        "@P0 REDG.E.MAX.S32.STRONG.GPU desc[UR12][R4.64], R15 ;",
        "ATOMG.E.EXCH.STRONG.GPU PT, RZ, desc[UR12][R4.64+0x4], RZ ;",
        "REDUX.MAX.S32 UR14, R0 ;",
        "FADD R1, R2, R3 ;",
    ):
        assert not pat.search(ins), ins


def test_the_heavy_subset_is_what_the_docs_say():
    """The CI subset holds every light file and exactly CI_HEAVY of the CUTLASS TUs; all five exist (the four the ops
    use, and the n32 candidate: compiled by `nox -s build_cuda`, not by CI)."""
    heavy = sorted(p.name for p in (PKG / "csrc").glob("wgmma_gemm_*.cu"))
    assert heavy == [
        "wgmma_gemm_dw.cu",
        "wgmma_gemm_dx.cu",
        "wgmma_gemm_fwd_bf16.cu",
        "wgmma_gemm_fwd_bf16_n32.cu",
        "wgmma_gemm_fwd_f32.cu",
    ]
    assert cc.N32_TU in heavy and cc.N32_TU not in cc.CI_HEAVY
    ci = {p.name for p in cc.selected("ci")}
    assert set(cc.CI_HEAVY) <= ci and not (set(heavy) - set(cc.CI_HEAVY)) & ci
    assert {p.name for p in cc.selected("all")} == {p.name for p in (PKG / "csrc").glob("*.cu")} - set(cc.HOST_ONLY)


def test_host_only_files_hold_no_kernel(tmp_path):
    """The host-only TUs (attention.cu: the entry points) are skipped by the device-only pass, so none may define or
    launch a kernel; a kernel, a launch and a missing file are each named (a kernel in a comment is not)."""
    assert cc.HOST_ONLY == ("attention.cu",) and cc.host_only_problems() == []
    src = (PKG / "csrc" / "attention.cu").read_text()
    (tmp_path / "attention.cu").write_text(src + "\n// __global__ void k(); k<<<1, 1>>>();\n")
    assert cc.host_only_problems(tmp_path) == []
    (tmp_path / "attention.cu").write_text(src + "\n__global__ void k() {}\nvoid h() { k<<<1, 1>>>(); }\n")
    problems = cc.host_only_problems(tmp_path)
    assert any("defines a kernel" in p for p in problems) and any("launches a kernel" in p for p in problems), problems
    (tmp_path / "attention.cu").unlink()
    assert cc.host_only_problems(tmp_path) == ["attention.cu: listed in HOST_ONLY but missing"]


def test_missing_cutlass_headers_are_red_with_one_line(monkeypatch):
    """A CUTLASS TU without CUTLASS's headers is a named failure (never skipped, never compiled without them)."""
    monkeypatch.setattr(cc, "cutlass_include", lambda: None)
    r = cc.compile_one(cc.find_nvcc() or "nvcc", PKG / "csrc" / "wgmma_gemm_dw.cu", use_cache=False)
    assert not r["ok"] and "no CUTLASS headers" in r["log"] and "requirements/cutlass.txt" in r["log"]
    assert any("wgmma_gemm_dw.cu: compile failed" in p and "CUTLASS" in p for p in cc.check([r], {}))


@needs_nvcc
def test_the_cache_is_keyed_by_the_file_and_its_headers(tmp_path, monkeypatch):
    """A second compile of unchanged sources comes from the cache; an edit of a header the file includes voids
    its entry, an edit of a header it does not include leaves it."""
    monkeypatch.setattr(cc, "CACHE", tmp_path / "cache")
    (tmp_path / "used.cuh").write_text("#pragma once\n__device__ inline float f(float x) { return x + 1.0f; }\n")
    (tmp_path / "other.cuh").write_text("#pragma once\n")
    src = tmp_path / "k.cu"
    src.write_text('#include "used.cuh"\n__global__ void k(float* p) { p[0] = f(p[0]); }\n')
    nvcc = cc.find_nvcc()
    assert cc.compile_one(nvcc, src)["cached"] is False
    assert cc.compile_one(nvcc, src)["cached"] is True
    (tmp_path / "other.cuh").write_text("#pragma once\n// edited\n")
    assert cc.compile_one(nvcc, src)["cached"] is True
    (tmp_path / "used.cuh").write_text("#pragma once\n__device__ inline float f(float x) { return x + 2.0f; }\n")
    r = cc.compile_one(nvcc, src)
    assert r["cached"] is False and r["ok"]
