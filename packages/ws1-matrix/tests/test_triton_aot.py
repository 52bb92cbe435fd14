"""triton-aot: the Triton kernels through the real GPU compiler (triton.compile + Triton's ptxas), no GPU.

Each test compiles a few configurations for sm_90a (1-10 s each on one core). The negative controls
are kernels of ours compiled the way the docs forbid, each certain with the ptxas that Triton
bundles: FP fusion on (rope's FP64 sincos becomes fma.rn.f64), attention's forward with 128 rows on
one warpgroup (spills), dW with 16-row tiles (no wgmma on Hopper: mma.sync), and attention's decode
layout with 8 warps (other wgmma shapes than the prefill layout's)."""

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


def _one(launches, kernel, shapes, table="sm90", where=lambda r: True, **kwargs):
    recs = [
        r
        for r in launches
        if r["kernel"].endswith(":" + kernel) and r["shapes"] == shapes and r["table"] == table and where(r)
    ]
    assert recs, f"no recorded launch of {kernel} at {shapes}"
    rec = dict(recs[0])
    rec["kwargs"] = {**rec["kwargs"], **kwargs}
    return rec


def test_every_node_launch_is_recorded_with_the_family_options(launches):
    kernels = {r["kernel"].split(":")[1] for r in launches}
    assert len(kernels) == 29, sorted(kernels)
    assert {"norm_dw_kernel", "norm_dw_sum_kernel"} <= kernels  # the norms' chunked dweight: both launches
    # the captured decode's path: the plan made on the device and the merge that checks it
    assert "attention_plan_kernel" in kernels
    assert {r["kwargs"]["CHECKED"] for r in launches if r["kernel"].endswith(":attention_fwd_merge_kernel")} == {
        False,
        True,
    }
    assert all(r["kwargs"]["enable_fp_fusion"] is False for r in launches)
    assert {r["shapes"] for r in launches} == {"test", "qwen3-8b"}
    assert {r["table"] for r in launches} == {"sm90", "sm80"}
    # the Hopper GEMM tiers and both attention layouts are among the recorded launches
    fwd = {
        (r["kwargs"]["BM"], r["kwargs"]["BN"])
        for r in launches
        if r["kernel"].endswith(":det_gemm_fwd_kernel") and r["table"] == "sm90"
    }
    assert fwd == {(64, 128), (128, 128)}, fwd
    stages = {
        r["kwargs"]["num_stages"]
        for r in launches
        if r["kernel"].endswith(":lm_head_fwd_kernel") and r["table"] == "sm90"
    }
    assert stages == {8, 4}, stages  # the three tiers
    att = {
        (r["kwargs"]["BM"], r["kwargs"]["GP"])
        for r in launches
        if r["kernel"].endswith(":attention_fwd_kernel") and r["table"] == "sm90" and r["shapes"] == "qwen3-8b"
    }
    assert att == {(128, 1), (64, 4)}, att


def test_session_compiles_and_judges(tmp_path):
    rc = triton_aot.main(
        [
            "--arch",
            "90",
            "--shapes",
            "qwen3-8b",
            "--no-execute",
            "--jobs",
            "1",
            "--kernels",
            "rope,swiglu_bwd,silu_fwd,det_gemm_bwd_dx",
            "--evidence-dir",
            str(tmp_path),
        ]
    )
    doc = json.loads((tmp_path / "build" / "triton_aot.json").read_text())
    assert rc == 0, [r["red"] for r in doc["results"]]
    by = {r["kernel"].split(":")[1]: r for r in doc["results"]}
    assert set(by) == {
        "rope_fwd_kernel",
        "rope_bwd_kernel",
        "swiglu_bwd_kernel",
        "silu_fwd_kernel",
        "det_gemm_bwd_dx_kernel",
    }
    for name in ("rope_fwd_kernel", "rope_bwd_kernel", "silu_fwd_kernel"):  # no contraction
        assert by[name]["fma"]["f32"] == 0 and by[name]["fma"]["f64"] == 0, by[name]["fma"]
    assert by["swiglu_bwd_kernel"]["fma"]["f32"] > 0  # its written tl.fma
    dx = [
        r for r in doc["results"] if r["kernel"].endswith("det_gemm_bwd_dx_kernel") and r["constexprs"].get("SPLIT_A")
    ]
    assert dx and all(r["mma"]["wgmma"] > 0 and r["spill_stores"] == 0 for r in dx)  # FP32 dy on tensor cores
    bf = [
        r for r in doc["results"] if r["kernel"].endswith("det_gemm_bwd_dx_kernel") and not r["constexprs"]["SPLIT_A"]
    ]
    assert len(bf) == 3 and len({tuple(r["wgmma_shapes"]) for r in bf}) == 1  # the three tiers: one wgmma shape
    assert all(
        r["constexprs"]["TMA"]
        and r["tma_loads"]
        and r["sass"]["HGMMA"]
        and r["sass"]["UTMALDG"]
        and not r["sass"]["HMMA"]
        for r in bf
    )  # wgmma + TMA
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
    rec = _one(
        launches, "attention_fwd_kernel", "qwen3-8b", where=lambda r: r["kwargs"]["BM"] == 128, num_warps=4
    )  # 128 rows on one warpgroup: 2 accumulators
    r = triton_aot.compile_one(rec, 90, str(tmp_path))
    assert r["constexprs"]["BD"] == 128 and r["spill_stores"] > 0
    assert any("spills" in x for x in triton_aot.verdict(r))


def test_negative_control_mma_sync_on_hopper_is_caught(launches, tmp_path):
    rec = _one(
        launches, "det_gemm_bwd_dw_kernel", "qwen3-8b", where=lambda r: not r["kwargs"]["SPLIT_A"], BM=16, num_warps=4
    )  # wgmma needs 64 rows per warpgroup
    r = triton_aot.compile_one(rec, 90, str(tmp_path))
    assert r["mma"]["wgmma"] == 0 and r["sass"]["HMMA"] > 0
    assert any("without wgmma" in x for x in triton_aot.verdict(r)) and any("SASS" in x for x in triton_aot.verdict(r))
    ok = triton_aot.compile_one(
        _one(launches, "det_gemm_bwd_dw_kernel", "qwen3-8b", where=lambda r: not r["kwargs"]["SPLIT_A"]),
        90,
        str(tmp_path),
    )
    assert ok["sass"]["HGMMA"] > 0 and not triton_aot.verdict(ok)


def test_negative_control_layouts_with_other_wgmma_shapes_are_caught(launches, tmp_path):
    """The decode layout compiled with 8 warps splits its 64 rows' columns over two warpgroups:
    other wgmma shapes than the prefill layout's, so the bits of a row could differ between them."""
    pre = _one(launches, "attention_fwd_kernel", "qwen3-8b", where=lambda r: r["kwargs"]["BM"] == 128)
    dec = _one(launches, "attention_fwd_kernel", "qwen3-8b", where=lambda r: r["kwargs"]["BM"] == 64)
    good = [triton_aot.compile_one(r, 90, str(tmp_path)) for r in (pre, dec)]
    for r in good:
        r["red"] = []
    triton_aot.shape_agreement(good)
    assert good[0]["wgmma_shapes"] == good[1]["wgmma_shapes"] and not any(r["red"] for r in good), good[0][
        "wgmma_shapes"
    ]
    bad = [good[0], triton_aot.compile_one({**dec, "kwargs": {**dec["kwargs"], "num_warps": 8}}, 90, str(tmp_path))]
    bad[1]["red"] = []
    triton_aot.shape_agreement(bad)
    assert all(any("wgmma shapes" in x for x in r["red"]) for r in bad)


def test_compile_error_is_red(launches, tmp_path):
    rec = _one(launches, "silu_fwd_kernel", "test", BLOCK=1000)  # tl.arange needs a power of two
    r = triton_aot.compile_one(rec, 90, str(tmp_path))
    assert "error" in r and triton_aot.verdict(r)[0].startswith("compile error")


def test_bad_arguments_exit_2(capsys):
    assert triton_aot.main(["--shapes", "llama"]) == 2
    assert triton_aot.main(["--arch", "sm90"]) == 2
    err = capsys.readouterr().err
    assert "unknown shape set" in err and "--arch takes integers" in err
