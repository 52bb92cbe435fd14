"""The parallel-invariant gradient order's cost against the default, side by side on one device (CPU now).

One trainer step = teacher forcing of B samples (forward, completion log-probs, loss) and its backward inside
``ws1_ops.canonical_grads(order=...)``; rows, on the same model and batch:

* ``serial`` — the default order: each parameter's rows in one serial chain in canonical order;
* ``sample_tree`` — the parallel-invariant order (docs/parallel.md): one serial chain per sample (FP32), the
  samples' partials summed by a fixed pairwise tree, rounded once. What lets data-parallel ranks reproduce one
  device's bits; here its cost on one device (the per-sample kernel calls and the FP32 tree adds).

And the tensor-parallel order's GEMM on one device (``--gemms``): a row-parallel projection at Qwen3-8B's shapes
(o_proj [T, 4096] x [4096, 4096], down_proj [T, 12288] x [4096, 12288]) as ``det_gemm`` (one serial chain per
output, the default) and as the 8-chunk tree (``det_gemm(k_chunks=8)``, TP 1: eight FP32 partials, the tree, one
rounding) — what every rank pays per row-parallel GEMM, before the all-gather.

And the context-parallel order's attention on one device (``--cp S``): forward + backward of one S-token sequence
with Qwen3-8B's heads (32 query, 8 KV, head_dim 128) as ``ws1_ops.attention`` (the default: dk/dv one serial fold
over the queries) and as ``ws1_dist.ContextParallel`` at CP 1 (the same forward; dk/dv a tree over 128-position
query chunks), with torch's own SDPA (BF16, causal, GQA) beside them — what a user would run instead.

Interleaved steps after a warm-up, medians; ratio = invariant / default (> 1: the invariant order is slower).
Across ranks the tree's all-to-all moves the bytes a ring reduce-scatter moves ((W − 1) / W of each rank's FP32
gradient buffer); that cost is the process group's, not measured here.

    python benchmarks/bench_parallel.py [--shapes tiny,qwen3-0.6b-L2] [--samples 8] [--gemms 128] [--cp 2048]
                                        [--reps 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

import ws1_ops
import ws1_qwen3

ORDERS = ("serial", "sample_tree")
SHAPES = {
    "tiny": ("tiny", 24),  # (preset, longest sample)
    "qwen3-0.6b-L2": ("qwen3-0.6b", 128),  # Qwen3-0.6B's shapes, 2 layers, the 151,936-token tied head
}


def _model(shape: str):
    preset, _ = SHAPES[shape]
    config = ws1_qwen3.preset(preset)
    if shape.endswith("-L2"):
        config = config.replace(num_hidden_layers=2, name=shape)
    return ws1_qwen3.synthetic(config, "cpu_bf16")


def _samples(vocab: int, n: int, longest: int) -> list:
    g = torch.Generator().manual_seed(20261207)
    out = []
    for rank in range(n):
        length = max(4, longest - (rank * longest) // (2 * n))  # distinct lengths, longest/2..longest
        tokens = tuple(torch.randint(4, vocab, (length,), generator=g, device="cpu").tolist())
        out.append(ws1_qwen3.Sample(rank, tokens, length // 2, f"s{rank}"))
    return out


def step(model, samples, order: str) -> float:
    t0 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    tf = ws1_qwen3.teacher_forcing(model, samples, layout="packed", grad=True)
    with ws1_ops.canonical_grads(order=order):
        tf.loss.backward()
    return (time.perf_counter() - t0) * 1e3


def gemm_rows(m: int, reps: int) -> list[dict]:
    """det_gemm vs the 8-chunk tree (TP 1) at Qwen3-8B's row-parallel shapes, [m] rows."""
    import ws1_dist

    out = []
    g = torch.Generator().manual_seed(0)
    with ws1_ops.use_profile("cpu_bf16", torch.device("cpu")):
        for name, n, k in (("o_proj", 4096, 4096), ("down_proj", 4096, 12288)):
            x = torch.randn(m, k, generator=g, device="cpu").bfloat16()
            w = (torch.randn(n, k, generator=g, device="cpu") / 64).bfloat16()
            fns = {
                "det_gemm": lambda x=x, w=w: ws1_ops.det_gemm(x, w),
                "tree": lambda x=x, w=w: ws1_ops.det_gemm(x, w, k_chunks=ws1_dist.CHUNKS),
            }
            times = {k_: [] for k_ in fns}
            for fn in fns.values():
                fn()
            for _ in range(reps):
                for k_, fn in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    times[k_].append((time.perf_counter() - t0) * 1e3)
            med = {k_: statistics.median(t) for k_, t in times.items()}
            row = {"gemm": name, "m": m, "n": n, "k": k, "median_ms": med, "ratio": med["tree"] / med["det_gemm"]}
            out.append(row)
            print(
                f"  {name:<15} [{m}, {k}] x [{n}, {k}]: det_gemm {med['det_gemm']:.1f} ms, 8-chunk tree "
                f"{med['tree']:.1f} ms, ratio {row['ratio']:.2f}x"
            )
    return out


def cp_rows(seq: int, reps: int) -> dict:
    """Attention forward + backward of one ``seq``-token sequence: the default kernel, the CP order at CP 1, torch."""
    import ws1_dist

    g = torch.Generator().manual_seed(0)
    q = torch.randn(seq, 32, 128, generator=g, device="cpu").bfloat16()
    k = torch.randn(seq, 8, 128, generator=g, device="cpu").bfloat16()
    v = torch.randn(seq, 8, 128, generator=g, device="cpu").bfloat16()
    dout = (torch.randn(seq, 32, 128, generator=g, device="cpu") / 16).bfloat16()
    cu = torch.tensor([0, seq], dtype=torch.int64, device="cpu")
    pos = torch.arange(seq, dtype=torch.int64, device="cpu")
    cp = ws1_dist.ContextParallel(seq)

    def torch_sdpa(a, b, c):  # [S, H, D] -> [1, H, S, D]: torch's own causal GQA attention
        o = torch.nn.functional.scaled_dot_product_attention(
            a.transpose(0, 1)[None], b.transpose(0, 1)[None], c.transpose(0, 1)[None], is_causal=True, enable_gqa=True
        )
        return o[0].transpose(0, 1)

    fns = {
        "default": lambda a, b, c: ws1_ops.attention(a, b, c, cu, cu, pos),
        "cp_tree": cp.attention,
        "torch_sdpa_bf16": torch_sdpa,
    }

    def once(fn) -> float:
        a, b, c = (t.clone().requires_grad_(True) for t in (q, k, v))
        t0 = time.perf_counter()
        fn(a, b, c).backward(dout)
        return (time.perf_counter() - t0) * 1e3

    times = {name: [] for name in fns}
    with ws1_ops.use_profile("cpu_bf16", torch.device("cpu")):
        for fn in fns.values():
            once(fn)
        for _ in range(reps):
            for name, fn in fns.items():
                times[name].append(once(fn))
    med = {name: statistics.median(t) for name, t in times.items()}
    row = {"seq": seq, "heads": [32, 8, 128], "median_ms": med, "ratio": med["cp_tree"] / med["default"]}
    print(
        f"  attention fwd+bwd, {seq} tokens, 32/8 heads x 128: default {med['default']:.0f} ms, CP order "
        f"{med['cp_tree']:.0f} ms, ratio {row['ratio']:.2f}x; torch SDPA BF16 {med['torch_sdpa_bf16']:.0f} ms"
    )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_parallel", description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="tiny,qwen3-0.6b-L2")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gemms", type=int, default=128, help="rows of the row-parallel GEMM rows (0: skip them)")
    ap.add_argument("--cp", type=int, default=2048, help="tokens of the context-parallel attention row (0: skip it)")
    ap.add_argument("--json", default=None, help="write the record here")
    args = ap.parse_args(argv)
    shapes = args.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or args.reps < 1 or args.samples < 1:
        print(
            f"bench_parallel: unknown shape {unknown[0]!r} (known: {', '.join(SHAPES)})"
            if unknown
            else "bench_parallel: --reps and --samples must be >= 1",
            file=sys.stderr,
        )
        return 2
    print(
        f"bench_parallel on {platform.processor() or platform.machine()} ({os.cpu_count()} CPUs), torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads; one step = teacher forcing + backward; medians of "
        f"{args.reps} interleaved steps; ratio = sample_tree / serial (> 1: the invariant order is slower)"
    )
    record = {"bench": "parallel_order", "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": []}
    for shape in shapes:
        model = _model(shape)
        samples = _samples(model.config.vocab_size, args.samples, SHAPES[shape][1])
        tokens = sum(s.length for s in samples)
        times = {o: [] for o in ORDERS}
        for o in ORDERS:
            step(model, samples, o)  # warm-up
        for _ in range(args.reps):
            for o in ORDERS:
                times[o].append(step(model, samples, o))
        med = {o: statistics.median(t) for o, t in times.items()}
        row = {
            "shape": shape,
            "samples": len(samples),
            "tokens": tokens,
            "median_ms": med,
            "ratio": med["sample_tree"] / med["serial"],
        }
        record["rows"].append(row)
        print(
            f"  {shape:<15} B={len(samples)} ({tokens} tokens): serial {med['serial']:.1f} ms, sample_tree "
            f"{med['sample_tree']:.1f} ms, ratio {row['ratio']:.2f}x"
        )
        del model
    if args.gemms > 0:
        record["gemms"] = gemm_rows(args.gemms, args.reps)
    if args.cp > 0:
        record["cp"] = cp_rows(args.cp, args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
