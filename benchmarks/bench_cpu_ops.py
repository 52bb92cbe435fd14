"""Benchmark the non-GEMM ws1_cpu ops against their torch equivalents (same inputs, same thread count).

Cases (Qwen3-8B-like shapes): rms_norm (T59 H4096, fp32 residual in, bf16 out), swiglu (T59 F12288
bf16), rope (T59 Hq32 D128 bf16, cos/sin computed in the call for both), attention (B4 S19 causal
prefill, and decode B1 with Skv 32 and 2048; Hq32 Hkv8 D128 bf16, torch = F.scaled_dot_product_attention
with enable_gqa on the padded [B, H, S, D] layout), logprob (T27 V151936; torch = log_softmax + gather)
and batch_invariant_logp (torch = log_softmax).

The contenders of a case are interleaved run by run after a warmup, so background load hits both alike;
each run repeats the call `inner` times (chosen so a run is >= ~2 ms). Reported: median and min ms per
call and ratio = ws1 / torch (median; < 1 means ws1 is faster).

    .venv/bin/python benchmarks/bench_cpu_ops.py [--reps 15] [--threads 1,2] [--json PATH]

Each thread count in --threads gets its own table (torch.set_num_threads for both contenders). On a
shared 2-core host a busy second core stalls every 2-thread run at a barrier (~8 ms scheduler quanta
show up as identical medians); the 1-thread table is then the trustworthy one.
"""

import argparse
import json
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

import ws1_kernels_cpu  # noqa: F401  registers torch.ops.ws1_cpu

OPS = torch.ops.ws1_cpu
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_JSON = os.path.join(ROOT, "evidence", "bench", "cpu_ops.json")
EPS = 1e-6
THETA = 1e6


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def case_rms_norm(g):
    x = torch.randn(59, 4096, generator=g, device="cpu")
    w = (1 + 0.1 * torch.randn(4096, generator=g, device="cpu")).bfloat16()

    def ref():
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
        return ((x * r) * w.float()).bfloat16()

    return "rms_norm T59 H4096", lambda: OPS.rms_norm(x, w, EPS), ref


def case_swiglu(g):
    a = torch.randn(59, 12288, generator=g, device="cpu").bfloat16()
    b = torch.randn(59, 12288, generator=g, device="cpu").bfloat16()
    return "swiglu T59 F12288", lambda: OPS.swiglu(a, b), lambda: F.silu(a) * b


def case_rope(g):
    x = torch.randn(59, 32, 128, generator=g, device="cpu").bfloat16()
    pos = torch.arange(59, device="cpu")
    inv = 1.0 / (THETA ** (torch.arange(0, 128, 2, dtype=torch.float32, device="cpu") / 128))

    def ref():  # HF Qwen3: freqs = pos x inv_freq (fp32), cos/sin cast to bf16, rotate_half
        fr = pos[:, None].float() * inv[None, :]
        emb = torch.cat((fr, fr), dim=-1)
        cos, sin = emb.cos().bfloat16()[:, None, :], emb.sin().bfloat16()[:, None, :]
        return x * cos + rotate_half(x) * sin

    return "rope T59 H32 D128", lambda: OPS.rope(x, pos, THETA, False), ref


def case_attn_prefill(g, B=4, S=19, Hq=32, Hkv=8, D=128):
    q = torch.randn(B, S, Hq, D, generator=g, device="cpu").bfloat16()
    k = torch.randn(B, S, Hkv, D, generator=g, device="cpu").bfloat16()
    v = torch.randn(B, S, Hkv, D, generator=g, device="cpu").bfloat16()
    qp, kp, vp = (t.reshape(B * S, -1, D).contiguous() for t in (q, k, v))
    cu = torch.arange(0, B * S + 1, S, device="cpu")
    pos = torch.arange(S, device="cpu").repeat(B)
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    sc = D**-0.5
    return (
        f"attention prefill B{B} S{S}",
        lambda: OPS.attention(qp, kp, vp, cu, cu, pos, sc),
        lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True),
    )


def case_attn_decode(g, Skv, Hq=32, Hkv=8, D=128):
    q = torch.randn(1, Hq, D, generator=g, device="cpu").bfloat16()
    k = torch.randn(Skv, Hkv, D, generator=g, device="cpu").bfloat16()
    v = torch.randn(Skv, Hkv, D, generator=g, device="cpu").bfloat16()
    cuq, cuk = torch.tensor([0, 1], device="cpu"), torch.tensor([0, Skv], device="cpu")
    pos = torch.tensor([Skv - 1], device="cpu")
    qt = q.reshape(1, 1, Hq, D).transpose(1, 2).contiguous()
    kt, vt = (t.reshape(1, Skv, Hkv, D).transpose(1, 2).contiguous() for t in (k, v))
    sc = D**-0.5
    return (
        f"attention decode B1 Skv{Skv}",
        lambda: OPS.attention(q, k, v, cuq, cuk, pos, sc),
        lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True),
    )


def case_logprob(g):
    x = torch.randn(27, 151936, generator=g, device="cpu") * 3
    t = torch.randint(0, 151936, (27,), generator=g, device="cpu")
    return ("logprob T27 V151936", lambda: OPS.logprob(x, t), lambda: torch.log_softmax(x, -1).gather(-1, t[:, None]))


def case_bilp(g):
    x = torch.randn(27, 151936, generator=g, device="cpu") * 3
    return "batch_invariant_logp T27 V151936", lambda: OPS.batch_invariant_logp(x), lambda: torch.log_softmax(x, -1)


def run_case(name, ours, ref, reps, warmup):
    for _ in range(warmup):
        ours()
        ref()
    t = time.perf_counter()
    ref()
    one = max(time.perf_counter() - t, 1e-6)
    inner = max(1, int(2e-3 / one))
    times = {"ws1": [], "torch": []}
    for _ in range(reps):
        for key, fn in (("ws1", ours), ("torch", ref)):
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            times[key].append((time.perf_counter() - t) / inner)
    res = {"case": name, "inner": inner, "runs": reps}
    for key, ts in times.items():
        res[key] = {"median_ms": statistics.median(ts) * 1e3, "min_ms": min(ts) * 1e3}
    res["ratio"] = res["ws1"]["median_ms"] / res["torch"]["median_ms"]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", default=str(torch.get_num_threads()), help="comma-separated thread counts")
    ap.add_argument("--json", default=DEFAULT_JSON)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    cases = [
        case_rms_norm(g),
        case_swiglu(g),
        case_rope(g),
        case_attn_prefill(g),
        case_attn_decode(g, 32),
        case_attn_decode(g, 2048),
        case_logprob(g),
        case_bilp(g),
    ]
    tables = {}
    for nt in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(nt)
        rows = [run_case(n, o, r, args.reps, args.warmup) for n, o, r in cases]
        tables[str(nt)] = rows
        print(f"threads={nt} isa={ws1_kernels_cpu.isa()} torch={torch.__version__}")
        print(f"{'case':36s} {'ws1 ms':>10s} {'torch ms':>10s} {'ratio':>7s}")
        for r in rows:
            print(f"{r['case']:36s} {r['ws1']['median_ms']:10.4f} {r['torch']['median_ms']:10.4f} {r['ratio']:7.2f}")
    out = {
        "host": platform.node(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "isa": ws1_kernels_cpu.isa(),
        "torch": torch.__version__,
        "reps": args.reps,
        "ratio_definition": "ws1 median / torch median (lower is better)",
        "results_by_threads": tables,
    }
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print("wrote", args.json)


if __name__ == "__main__":
    main()
