"""Benchmark ws1_cpu.det_gemm (bf16 in, serial-k fp32 FMA, bf16 out) against torch F.linear.

For each shape (M, K, N) the runs of the contenders are interleaved (ws1 on its default path, ws1 on
each path named by --also-isa, torch FP32 on fp32 copies of the same data, torch BF16), after a
warmup, so that background load hits all of them alike. Reported: median ms, GFLOP/s (2*M*K*N / time)
and throughput ratios; the path each ws1 column ran is the kernels' own count (torch.ops.ws1_cpu.calls()),
not a label. All ws1 paths give the same bits (checked here on every shape) except amx, which has its
own (the count of elements that differ from the default path is in the JSON).

    .venv/bin/python benchmarks/bench_cpu_gemm.py [--reps 9] [--big] [--also-isa avx512] [--json PATH]

--big adds the lm_head shape (27, 4096, 151936) (1.2 GB of bf16 weights, 2.5 GB as fp32).
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

SHAPES = [(1, 4096, 4096), (59, 4096, 4096), (256, 4096, 4096), (59, 4096, 12288)]
BIG = [(27, 4096, 151936)]


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def on_path(isa, fn):
    """fn run with WS1_CPU_ISA=isa (None: the default path)."""

    def run():
        old = os.environ.pop("WS1_CPU_ISA", None)
        if isa is not None:
            os.environ["WS1_CPU_ISA"] = isa
        try:
            return fn()
        finally:
            os.environ.pop("WS1_CPU_ISA", None)
            if old is not None:
                os.environ["WS1_CPU_ISA"] = old

    return run


def path_taken(fn, op):
    """The ISA path the kernels counted for one call of fn (their self-report)."""
    before = json.loads(torch.ops.ws1_cpu.calls()).get(f"ws1_cpu::{op}", {})
    fn()
    after = json.loads(torch.ops.ws1_cpu.calls()).get(f"ws1_cpu::{op}", {})
    return "+".join(p for p in sorted(after) if after[p] != before.get(p, 0))


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)


def bench_shape(m, k, n, reps, warmup, ws1_op, rounds_bf16, also_isa=()):
    g = torch.Generator().manual_seed(m * 7 + n)
    x = torch.randn(m, k, generator=g, device="cpu").bfloat16()
    w = (torch.randn(n, k, generator=g, device="cpu") * 0.02).bfloat16()
    xf, wf = x.float(), w.float()
    ws1 = getattr(torch.ops.ws1_cpu, ws1_op)
    cands = {"ws1": on_path(None, lambda: ws1(x, w))}
    for isa in also_isa:
        cands[f"ws1_{isa}"] = on_path(isa, lambda: ws1(x, w))
    cands.update(
        {
            "torch_fp32": lambda: F.linear(xf, wf),
            "torch_bf16": lambda: F.linear(x, w),
        }
    )
    paths = {name: path_taken(f, ws1_op) for name, f in cands.items() if name.startswith("ws1")}
    ref = cands["ws1"]()
    bits_differ = {}
    for name in paths:
        out = cands[name]()
        nd = int((bits(out) != bits(ref)).sum())
        # the amx path has its own bits (docs/numerics.md "BF16 matrix units"); every other must agree
        assert nd == 0 or paths[name] == "amx", f"{name} ({paths[name]}) differs in bits from the default path"
        bits_differ[name] = nd
    for _ in range(warmup):
        for f in cands.values():
            f()
    times = {name: [] for name in cands}
    for i in range(reps):
        for name, f in cands.items():
            # torch BF16 is ~10x slower than the others; it gets fewer (but still >= 7) runs
            if name == "torch_bf16" and i >= max(7, rounds_bf16):
                continue
            times[name].append(timed(f))
    flop = 2.0 * m * k * n
    res = {"M": m, "K": k, "N": n, "op": ws1_op, "paths": paths, "elements_differing_from_default": bits_differ}
    for name, ts in times.items():
        med = statistics.median(ts)
        res[name] = {"median_ms": med * 1e3, "min_ms": min(ts) * 1e3, "runs": len(ts), "gflops": flop / med / 1e9}
    for name in paths:
        sfx = "" if name == "ws1" else name[3:]
        res[f"ratio{sfx}_vs_torch_fp32"] = res[name]["gflops"] / res["torch_fp32"]["gflops"]
        res[f"ratio{sfx}_vs_torch_bf16"] = res[name]["gflops"] / res["torch_bf16"]["gflops"]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=9, help="timed runs per contender (>= 7)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--big", action="store_true", help="also lm_head at (27, 4096, 151936)")
    ap.add_argument("--json", default="evidence/bench/cpu_gemm.json")
    ap.add_argument("--shapes", default=None, help="override, e.g. '1,4096,4096;59,4096,4096'")
    ap.add_argument("--also-isa", default="", help="comma list of other ws1 paths to time side by side, e.g. avx512")
    args = ap.parse_args()
    also = [i for i in args.also_isa.split(",") if i]
    reps = max(7, args.reps)
    shapes = [(s, "det_gemm") for s in SHAPES]
    if args.shapes:
        shapes = [(tuple(int(v) for v in s.split(",")), "det_gemm") for s in args.shapes.split(";")]
    if args.big:
        shapes += [(s, "lm_head") for s in BIG]

    results = []
    ws1_cols = ["ws1"] + [f"ws1_{i}" for i in also]
    hdr = (
        f"{'op':9s} {'M':>4s} {'K':>5s} {'N':>6s} | "
        f"{'ws1 path':>10s} {'ms':>7s} {'GF/s':>6s} {'x fp32':>6s} {'x bf16':>6s}"
    )
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, ws1 default isa {ws1_kernels_cpu.isa()}")
    print(hdr + f" | {'fp32 ms':>8s} {'GF/s':>6s} | {'bf16 ms':>8s} {'GF/s':>6s}")
    print("-" * (len(hdr) + 37))
    for (m, k, n), op in shapes:
        r = bench_shape(m, k, n, reps, args.warmup, op, rounds_bf16=7, also_isa=also)
        results.append(r)
        for i, col in enumerate(ws1_cols):
            sfx = "" if col == "ws1" else col[3:]
            lead = f"{op:9s} {m:4d} {k:5d} {n:6d}" if i == 0 else " " * 27
            line = (
                f"{lead} | {r['paths'][col]:>10s} {r[col]['median_ms']:7.2f} {r[col]['gflops']:6.1f} "
                f"{r[f'ratio{sfx}_vs_torch_fp32']:6.2f} {r[f'ratio{sfx}_vs_torch_bf16']:6.2f}"
            )
            if i == 0:
                line += (
                    f" | {r['torch_fp32']['median_ms']:8.2f} {r['torch_fp32']['gflops']:6.1f} | "
                    f"{r['torch_bf16']['median_ms']:8.2f} {r['torch_bf16']['gflops']:6.1f}"
                )
            print(line, flush=True)

    out = {
        "host": {
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "threads": torch.get_num_threads(),
        },
        "torch": torch.__version__,
        "ws1_isa": ws1_kernels_cpu.isa(),
        "reps": reps,
        "note": "median over interleaved runs; ratios are ws1 throughput / torch throughput",
        "results": results,
    }
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
