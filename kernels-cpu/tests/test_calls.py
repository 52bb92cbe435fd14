"""The kernels' self-report, torch.ops.ws1_cpu.calls(): every op counts its own calls by kernel id and
the ISA path it took; a call that raises is not counted. The path is the one that ran: under
WS1_CPU_ISA=scalar every dispatching op reports "scalar" whatever the CPU could do."""

import json

import pytest
import torch

import ws1_kernels_cpu  # noqa: F401

K = torch.ops.ws1_cpu
BF = torch.bfloat16


def calls():
    return json.loads(K.calls())


def delta(before, after):
    out = {}
    for kid, paths in after.items():
        for path, n in paths.items():
            d = n - before.get(kid, {}).get(path, 0)
            if d:
                out.setdefault(kid, {})[path] = d
    return out


def run_every_op():
    g = torch.Generator().manual_seed(0)

    def r(*s, dtype=BF):
        return torch.randn(*s, generator=g).to(dtype)

    x, w = r(6, 32), r(16, 32)
    K.det_gemm(x, w)
    K.lm_head(x, w)
    K.gemm(r(6, 16, dtype=torch.float32), w.t(), True)
    K.rms_norm(x, r(32), 1e-6)
    y, rstd = K.qk_norm(r(6, 2, 32), r(32), 1e-6)
    K.qk_norm_bwd(r(6, 2, 32, dtype=torch.float32), r(6, 2, 32), r(32), rstd)
    _, rstd = K.rms_norm(x, r(32), 1e-6)
    K.rms_norm_bwd(r(6, 32, dtype=torch.float32), x, r(32), rstd)
    K.rope(r(6, 2, 32), torch.arange(6), 1e6, False)
    K.swiglu(x, x)
    K.silu(x)
    K.swiglu_bwd(r(6, 32, dtype=torch.float32), x, x)
    K.silu_bwd(r(6, 32, dtype=torch.float32), x)
    logits = r(6, 40, dtype=torch.float32)
    _, lse = K.logprob(logits, torch.tensor([1, 2, 3, 4, 5, 6]))
    K.logprob_bwd(torch.ones(6), logits, lse, torch.tensor([1, 2, 3, 4, 5, 6]))
    lp, _ = K.batch_invariant_logp(logits)
    K.batch_invariant_logp_bwd(torch.ones(6, 40), lp)
    K.embedding(torch.tensor([1, 2, 3]), w)
    K.embedding_bwd(r(3, 32, dtype=torch.float32), torch.tensor([1, 2, 3]), 16)
    cu = torch.tensor([0, 6])
    q, k, v = r(6, 4, 32), r(6, 2, 32), r(6, 2, 32)
    out, lse = K.attention(q, k, v, cu, cu, torch.arange(6), 32**-0.5)
    K.attention_bwd(r(6, 4, 32), q, k, v, out, lse, cu, cu, torch.arange(6), 32**-0.5)


OPS = [
    "det_gemm",
    "lm_head",
    "gemm",
    "rms_norm",
    "qk_norm",
    "qk_norm_bwd",
    "rms_norm_bwd",
    "rope",
    "swiglu",
    "silu",
    "swiglu_bwd",
    "silu_bwd",
    "logprob",
    "logprob_bwd",
    "batch_invariant_logp",
    "batch_invariant_logp_bwd",
    "embedding",
    "embedding_bwd",
    "attention",
    "attention_bwd",
]


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16", "amx", None])
def test_every_op_counts_its_calls_on_the_path_it_took(monkeypatch, isa):
    if isa is None:
        monkeypatch.delenv("WS1_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("WS1_CPU_ISA", isa)
    try:
        path = K.isa()
    except RuntimeError:
        pytest.skip(f"this CPU lacks {isa}")
    before = calls()
    run_every_op()
    d = delta(before, calls())
    want = {f"ws1_cpu::{op}": {path: 1} for op in OPS}
    want["ws1_cpu::rms_norm"] = {path: 2}
    # embedding's forward and backward dispatch on no ISA: plain row copies / adds
    want["ws1_cpu::embedding"] = {"generic": 1}
    want["ws1_cpu::embedding_bwd"] = {"generic": 1}
    assert d == want


def test_a_call_that_raises_is_not_counted():
    before = calls()
    with pytest.raises(RuntimeError, match="K mismatch"):
        K.det_gemm(torch.zeros(2, 8, dtype=BF), torch.zeros(4, 16, dtype=BF))
    assert delta(before, calls()) == {}
    K.det_gemm(torch.zeros(2, 8, dtype=BF), torch.zeros(4, 8, dtype=BF))
    assert list(delta(before, calls())) == ["ws1_cpu::det_gemm"]


def _cpu_vendor_and_flags() -> tuple[str, set[str]]:
    vendor, flags = "", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("vendor_id") and not vendor:
                vendor = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return vendor, flags


def test_the_default_path_is_the_documented_one(monkeypatch):
    """isa.cpp detect(): avx512bf16 on AMD CPUs with AVX512_BF16 (faster there, same bits), else
    avx512 where AVX-512F/BW/VL + FMA exist, else avx2, else scalar — read here from /proc/cpuinfo."""
    try:
        vendor, flags = _cpu_vendor_and_flags()
    except OSError:
        pytest.skip("no /proc/cpuinfo (not Linux)")
    monkeypatch.delenv("WS1_CPU_ISA", raising=False)
    avx512 = {"avx512f", "avx512bw", "avx512vl", "fma"} <= flags
    if vendor == "AuthenticAMD" and avx512 and "avx512_bf16" in flags:
        want = "avx512bf16"
    elif avx512:
        want = "avx512"
    elif {"avx2", "fma"} <= flags:
        want = "avx2"
    else:
        want = "scalar"
    assert K.isa() == want
