"""triton-aot: the Triton kernels through the real GPU compiler (triton.compile + Triton's ptxas), no GPU.

Each test compiles a few configurations for sm_90a (1-10 s each on one core). The negative controls
are kernels of ours compiled the way the docs forbid: with FP fusion on (rope's FP64 sincos becomes
fma.rn.f64) and attention's dk/dv with the old 64-key tile at head_dim 128 (spills), both certain
with the ptxas that Triton bundles."""

import json
import os

import pytest

triton = pytest.importorskip("triton")

from ws1_matrix import triton_aot  # noqa: E402


@pytest.fixture(scope="module")
def launches():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("compiles the kernels as JITFunctions: not under TRITON_INTERPRET=1")
    return triton_aot.record_in_child(["test", "qwen3-8b"], execute=False)


def _one(launches, kernel, shapes, **kwargs):
    recs = [r for r in launches if r["kernel"].endswith(":" + kernel) and r["shapes"] == shapes]
    assert recs, f"no recorded launch of {kernel} at {shapes}"
    rec = dict(recs[0])
    rec["kwargs"] = {**rec["kwargs"], **kwargs}
    return rec


def test_every_node_launch_is_recorded_with_the_family_options(launches):
    kernels = {r["kernel"].split(":")[1] for r in launches}
    assert len(kernels) == 26, sorted(kernels)
    assert all(r["kwargs"]["enable_fp_fusion"] is False for r in launches)
    assert {r["shapes"] for r in launches} == {"test", "qwen3-8b"}


def test_session_compiles_and_judges(tmp_path):
    rc = triton_aot.main(["--arch", "90", "--shapes", "qwen3-8b", "--no-execute", "--jobs", "1",
                          "--kernels", "rope,swiglu_bwd,silu_fwd,det_gemm_bwd_dx", "--evidence-dir", str(tmp_path)])
    doc = json.loads((tmp_path / "build" / "triton_aot.json").read_text())
    assert rc == 0, [r["red"] for r in doc["results"]]
    by = {r["kernel"].split(":")[1]: r for r in doc["results"]}
    assert set(by) == {"rope_fwd_kernel", "rope_bwd_kernel", "swiglu_bwd_kernel", "silu_fwd_kernel",
                       "det_gemm_bwd_dx_kernel"}
    for name in ("rope_fwd_kernel", "rope_bwd_kernel", "silu_fwd_kernel"):      # no contraction
        assert by[name]["fma"]["f32"] == 0 and by[name]["fma"]["f64"] == 0, by[name]["fma"]
    assert by["swiglu_bwd_kernel"]["fma"]["f32"] > 0                           # its written tl.fma
    dx = [r for r in doc["results"] if r["kernel"].endswith("det_gemm_bwd_dx_kernel")
          and r["constexprs"].get("SPLIT_A")]
    assert dx and all(r["mma"]["wgmma"] > 0 and r["spill_stores"] == 0 for r in dx)  # FP32 dy on tensor cores
    assert "| rope_fwd_kernel | sm_90a |" in (tmp_path / "build" / "triton_aot.md").read_text()


def test_negative_control_fusion_on_is_caught(launches, tmp_path):
    rec = _one(launches, "rope_fwd_kernel", "qwen3-8b")
    on = triton_aot.compile_one(rec, 90, str(tmp_path), fp_fusion=True)
    assert on["fma"]["f64"] > 0
    red = triton_aot.verdict(on)
    assert any("fma.rn.f64" in x for x in red) and any("fusion on" in x for x in red)
    off = triton_aot.compile_one(rec, 90, str(tmp_path))
    assert off["fma"] == {"f32": 0, "f64": 0, "libdevice_ftz_f32": 0} and not triton_aot.verdict(off)


def test_negative_control_spilling_tile_is_caught(launches, tmp_path):
    rec = _one(launches, "attention_bwd_dkdv_kernel", "qwen3-8b", BN=64)   # the tile before issue 17
    r = triton_aot.compile_one(rec, 90, str(tmp_path))
    assert r["constexprs"]["BD"] == 128 and r["spill_stores"] > 0
    assert any("spills" in x for x in triton_aot.verdict(r))


def test_compile_error_is_red(launches, tmp_path):
    rec = _one(launches, "silu_fwd_kernel", "test", BLOCK=1000)   # tl.arange needs a power of two
    r = triton_aot.compile_one(rec, 90, str(tmp_path))
    assert "error" in r and triton_aot.verdict(r)[0].startswith("compile error")


def test_bad_arguments_exit_2(capsys):
    assert triton_aot.main(["--shapes", "llama"]) == 2
    assert triton_aot.main(["--arch", "sm90"]) == 2
    err = capsys.readouterr().err
    assert "unknown shape set" in err and "--arch takes integers" in err
