"""Benchmark the Triton kernels (triton_cuda_bf16) against torch's own CUDA ops, side by side in one run.

Cases (Qwen3-8B shapes, BF16, FP32 accumulation):

* det_gemm vs ``torch.matmul`` (cuBLAS) at M in {1, 59, 256, 4096}, K 4096, N in {4096, 12288};
  weights rotate over enough copies (> 2x L2) that neither side is timed on an L2-resident weight.
* attention vs ``F.scaled_dot_product_attention`` (enable_gqa; causal prefill on the padded
  [B, H, S, D] layout, decode with one query per sequence): prefill of the 4 fixture samples
  (lengths 11/16/13/19 packed), prefill B1 S2048, decode B1 Skv32 and B32 Skv2048; Hq 32, Hkv 8, D 128.
* logprob vs ``log_softmax`` + ``gather``, batch_invariant_logp vs ``log_softmax``: T 27 and 2048, V 151936.
* chain (``--chain``): teacher forcing of the 4 fixture samples through the synthetic qwen3-8b-L2
  model, forward and forward+backward, triton_cuda_bf16 vs the same model written in plain PyTorch
  BF16 as a user would (plain_qwen3.py: F.linear, F.rms_norm, batched causal SDPA), not the
  torch_default negative control (which runs the ws1 chain's own node-by-node calls).

Timing: CUDA events around ``inner`` back-to-back calls; the contenders of a case alternate run by
run after a warm-up, so clocks and background load hit both alike; median over ``--reps`` runs.
Kernels are timed in two modes where both sides allow it: ``graph`` (the calls captured in one
CUDA graph and replayed: device time, no Python launch cost) and ``eager`` (plain calls: what a
Python caller sees). ``speed = t_torch / t_ws1`` (1.0 = as fast as torch; > 1 faster).

Targets (issue 7): det_gemm speed >= 0.7 at M >= 256 and >= 0.5 at M = 1 (graph mode); the chain's
time ratio t_ws1 / t_torch <= 1.3 (its formal check is C10's).

    python benchmarks/bench_triton.py [--reps 20] [--json PATH] [--no-chain] [--quick]

``--quick``: a few small cases only (a smoke run). Without CUDA the script exits 2, except under
TRITON_INTERPRET=1 with ``--quick``, where it runs the code paths on CPU (a logic check; the
timings mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

BF = torch.bfloat16
HQ, HKV, D = 32, 8, 128
V_FULL = 151936
L2_BYTES = 60 * 2 ** 20      # H100/H200 L2 (50 / 60 MB): weights rotate over > 2x this
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# ---- timing ------------------------------------------------------------------------------------


class Clock:
    """ms per call of ``fn`` over ``inner`` back-to-back calls: CUDA events on a GPU, else wall clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def run(self, fn: Callable, inner: int) -> float:
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b) / inner
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - t) * 1e3 / inner

    def graph(self, fn: Callable, inner: int) -> Callable | None:
        """A callable replaying ``inner`` captured calls of fn (None where graphs do not apply)."""
        if not self.cuda:
            return None
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()                       # compile / autotune-free warm-up outside the capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(inner):
                fn()
        torch.cuda.synchronize()
        return g.replay


def compare(clock: Clock, fns: dict[str, Callable], reps: int, inner: int, graph: bool) -> dict:
    """Median ms per call of each contender, alternating run by run; graph mode replays captures."""
    if graph:
        replays = {k: clock.graph(f, inner) for k, f in fns.items()}
        runs = {k: (lambda r=r: r()) for k, r in replays.items()}
        per_run = 1
    else:
        runs, per_run = fns, inner
    for f in runs.values():          # warm-up (first-call compilation is not timed)
        clock.run(f, 1)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in runs.items():
            ms = clock.run(f, per_run)
            times[k].append(ms / (inner if graph else 1))
    return {k: {"median_ms": statistics.median(v), "min_ms": min(v)} for k, v in times.items()}


def _row(case: str, mode: str, res: dict, extra: dict | None = None) -> dict:
    ws1, ref = res["ws1"]["median_ms"], res["torch"]["median_ms"]
    row = {"case": case, "mode": mode, "ws1_ms": ws1, "torch_ms": ref, "ws1_min_ms": res["ws1"]["min_ms"],
           "torch_min_ms": res["torch"]["min_ms"], "speed": ref / ws1 if ws1 > 0 else None,
           "time_ratio": ws1 / ref if ref > 0 else None}
    row.update(extra or {})
    print(f"  {case:<44} {mode:<6} ws1 {ws1:9.4f} ms  torch {ref:9.4f} ms  speed {row['speed']:6.3f}", flush=True)
    return row


# ---- cases -------------------------------------------------------------------------------------


def gemm_cases(clock, dev, args) -> list[dict]:
    g = torch.Generator(device="cpu").manual_seed(0)
    shapes = [(m, 4096, n) for n in (4096, 12288) for m in (1, 59, 256, 4096)]
    if args.quick:
        shapes = [(1, 256, 384), (70, 256, 384)]
    rows = []
    for M, K, N in shapes:
        rows += _gemm_case(clock, dev, args, g, M, K, N)
    return rows


def _gemm_case(clock, dev, args, g, M, K, N) -> list[dict]:
    from ws1_ops.triton import det_gemm as tg

    x = (torch.randn(M, K, generator=g, device="cpu") * 0.5).to(BF).to(dev)
    copies = max(1, -(-2 * L2_BYTES // (N * K * 2))) if clock.cuda else 1
    ws = [(torch.randn(N, K, generator=g, device="cpu") * 0.02).to(BF).to(dev) for _ in range(copies)]
    it = {"ws1": 0, "torch": 0}

    def nxt(side):
        it[side] = (it[side] + 1) % copies
        return ws[it[side]]

    fns = {"ws1": lambda: tg.det_gemm(x, nxt("ws1")), "torch": lambda: torch.matmul(x, nxt("torch").t())}
    inner = 1 if args.quick else max(5, min(200, int(2e11 / (2 * M * K * N + 1))))
    rows = []
    for mode in (("graph", "eager") if clock.cuda else ("eager",)):
        r = _row(f"det_gemm M{M} K{K} N{N}", mode, compare(clock, fns, args.reps, inner, mode == "graph"),
                 {"M": M, "K": K, "N": N, "weight_copies": copies})
        r["tflops_ws1"] = 2 * M * K * N / (r["ws1_ms"] * 1e9)
        r["tflops_torch"] = 2 * M * K * N / (r["torch_ms"] * 1e9)
        rows.append(r)
    return rows


def _cu(lengths, dev):
    return torch.tensor([0] + list(lengths), dtype=torch.int64, device="cpu").cumsum(0).to(dev)


def _modes(clock):
    return ("graph", "eager") if clock.cuda else ("eager",)


def attention_cases(clock, dev, args) -> list[dict]:
    g = torch.Generator(device="cpu").manual_seed(1)
    heads = (4, 2, 32) if args.quick else (HQ, HKV, D)
    prefills = [("prefill fixture B4 S11/16/13/19", [11, 16, 13, 19]), ("prefill B1 S2048", [2048])]
    decodes = [("decode B1 Skv32", 1, 32), ("decode B32 Skv2048", 32, 2048)]
    if args.quick:
        prefills, decodes = [("prefill B2 S11/19", [11, 19])], [("decode B2 Skv19", 2, 19)]
    rows = []
    for name, lengths in prefills:
        rows += _prefill_case(clock, dev, args, g, heads, name, lengths)
    for name, B, S in decodes:
        rows += _decode_case(clock, dev, args, g, heads, name, B, S)
    return rows


def _prefill_case(clock, dev, args, g, heads, name, lengths) -> list[dict]:
    from ws1_ops.triton import attention as ta

    hq, hkv, d = heads
    scale = d ** -0.5

    def r(*shape):
        return torch.randn(*shape, generator=g, device="cpu").to(BF).to(dev)

    T, S, B = sum(lengths), max(lengths), len(lengths)
    q, k, v = r(T, hq, d), r(T, hkv, d), r(T, hkv, d)
    cu = _cu(lengths, dev)
    pos = torch.cat([torch.arange(n, device="cpu") for n in lengths]).to(dev)
    tiles = ta.plan(q, k, v, cu, cu, pos)
    # torch: the padded [B, H, S, D] layout, causal (right padding does not change the valid rows)
    qp, kp, vp = r(B, hq, S, d), r(B, hkv, S, d), r(B, hkv, S, d)
    inner = 1 if args.quick else 20
    sdpa = lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=scale, enable_gqa=True)  # noqa: E731
    fns = {"ws1": lambda: ta.attention_planned(q, k, v, cu, cu, pos, scale, tiles), "torch": sdpa}
    rows = [_row(f"attention {name}", mode, compare(clock, fns, args.reps, inner, mode == "graph"), {"lengths": lengths})
            for mode in _modes(clock)]
    fns_op = {"ws1": lambda: ta.attention(q, k, v, cu, cu, pos, scale), "torch": sdpa}
    rows.append(_row(f"attention {name} (+host plan)", "eager", compare(clock, fns_op, args.reps, inner, False)))
    return rows


def _decode_case(clock, dev, args, g, heads, name, B, S) -> list[dict]:
    from ws1_ops.triton import attention as ta

    hq, hkv, d = heads
    scale = d ** -0.5

    def r(*shape):
        return torch.randn(*shape, generator=g, device="cpu").to(BF).to(dev)

    q, k, v = r(B, hq, d), r(B * S, hkv, d), r(B * S, hkv, d)
    cu_q, cu_k = _cu([1] * B, dev), _cu([S] * B, dev)
    pos = torch.full((B,), S - 1, dtype=torch.int64, device=dev)
    tiles = ta.plan(q, k, v, cu_q, cu_k, pos)
    qd = q.reshape(B, 1, hq, d).transpose(1, 2)
    kd, vd = (t.reshape(B, S, hkv, d).transpose(1, 2) for t in (k, v))
    fns = {"ws1": lambda: ta.attention_planned(q, k, v, cu_q, cu_k, pos, scale, tiles),
           "torch": lambda: F.scaled_dot_product_attention(qd, kd, vd, scale=scale, enable_gqa=True)}
    inner = 1 if args.quick else 50
    return [_row(f"attention {name}", mode, compare(clock, fns, args.reps, inner, mode == "graph"), {"B": B, "Skv": S})
            for mode in _modes(clock)]


def logprob_cases(clock, dev, args) -> list[dict]:
    g = torch.Generator(device="cpu").manual_seed(2)
    V = 1000 if args.quick else V_FULL
    rows = []
    for T in ((5,) if args.quick else (27, 2048)):
        rows += _logprob_case(clock, dev, args, g, T, V)
    return rows


def _logprob_case(clock, dev, args, g, T, V) -> list[dict]:
    from ws1_ops.triton import batch_invariant_logp as tb
    from ws1_ops.triton import logprob as tlp

    logits = (torch.randn(T, V, generator=g, device="cpu") * 3).to(dev)
    t = torch.randint(0, V, (T,), generator=g, device="cpu").to(dev)
    inner = 1 if args.quick else 20
    fns = {"ws1": lambda: tlp.logprob(logits, t), "torch": lambda: torch.log_softmax(logits, -1).gather(1, t[:, None]).squeeze(1)}
    fns2 = {"ws1": lambda: tb.batch_invariant_logp(logits), "torch": lambda: torch.log_softmax(logits, -1)}
    rows = []
    for mode in _modes(clock):
        rows.append(_row(f"logprob T{T} V{V}", mode, compare(clock, fns, args.reps, inner, mode == "graph")))
        rows.append(_row(f"batch_invariant_logp T{T} V{V}", mode, compare(clock, fns2, args.reps, inner, mode == "graph")))
    return rows


def chain_phases(model, plain, samples, dev) -> list[tuple[str, Callable, Callable]]:
    """(phase, ws1 run, plain PyTorch run) for the chain benchmarks: teacher forcing of the fixture
    samples (4 x 20 right-padded, loss over the 27 completion tokens), forward and forward+backward
    (ws1 inside canonical_grads(), as the trainer runs it)."""
    from bench_model import PAD_TO, hf_inputs

    import ws1_ops
    import ws1_qwen3

    ids, _mask, rows_, tgt = (t.to(dev) for t in hf_inputs(samples, model.config.pad_id))

    def fwd():
        with torch.no_grad():
            ws1_qwen3.teacher_forcing(model, samples, layout="padded_right", padded_length=PAD_TO)

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        tf = ws1_qwen3.teacher_forcing(model, samples, layout="padded_right", padded_length=PAD_TO, grad=True)
        with ws1_ops.canonical_grads():
            tf.loss.backward()

    def plain_fwd():
        with torch.no_grad():
            plain.loss(ids, rows_, tgt)

    def plain_fwd_bwd():
        plain.zero_grad(set_to_none=True)
        plain.loss(ids, rows_, tgt).backward()

    return [("forward", fwd, plain_fwd), ("forward+backward", fwd_bwd, plain_fwd_bwd)]


def chain_cases(clock, dev, args) -> list[dict]:
    """The model chain on the fixture: triton_cuda_bf16 vs plain PyTorch BF16 (same weights, same
    loss over the 27 completion tokens of the 4 x 20 right-padded batch).

    Without a GPU (the --quick logic check) the ws1 side is cpu_bf16 on the CPU: it checks the
    plumbing, and its ratio means nothing (marked ``logic_check_only``)."""
    import ws1_qwen3

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from plain_qwen3 import PlainQwen3

    preset = "tiny" if args.quick else "qwen3-8b-L2"
    ws1_profile = "triton_cuda_bf16" if clock.cuda else "cpu_bf16"
    t0 = time.perf_counter()
    model = ws1_qwen3.synthetic(preset, ws1_profile, device=dev if clock.cuda else None)
    plain = PlainQwen3(model, device=dev)
    print(f"  chain: {preset} built in {time.perf_counter() - t0:.1f} s", flush=True)
    samples = ws1_qwen3.fixture_samples()
    phases = chain_phases(model, plain, samples, dev)
    rows = []
    for name, fn, ref in phases:
        res = compare(clock, {"ws1": fn, "torch": ref}, max(3, args.reps // 4), 1, False)
        rows.append(_row(f"chain {preset} fixture {name}", "eager", res,
                         {"preset": preset, "contenders": [ws1_profile, "plain PyTorch BF16 (plain_qwen3.py)"],
                          "logic_check_only": not clock.cuda}))
    return rows


# ---- targets and main --------------------------------------------------------------------------


def targets(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        if r["case"].startswith("det_gemm") and r["mode"] == "graph" and r.get("K") == 4096:
            want = 0.7 if r["M"] >= 256 else 0.5 if r["M"] == 1 else None
            if want is not None:
                out.append({"target": f"det_gemm speed >= {want} (graph) at M{r['M']} N{r['N']}", "value": r["speed"],
                            "met": r["speed"] >= want})
        if r["case"].startswith("chain") and r["case"].endswith("forward+backward") and not r.get("logic_check_only"):
            out.append({"target": "chain time ratio <= 1.3 (forward+backward vs plain PyTorch BF16)", "value": r["time_ratio"],
                        "met": r["time_ratio"] <= 1.3})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None, help="write the results here (default: evidence/bench/triton.json)")
    ap.add_argument("--no-chain", dest="chain", action="store_false")
    ap.add_argument("--quick", action="store_true", help="small shapes only (smoke run)")
    ap.add_argument("--only", default="gemm,attention,logprob,chain", help="comma list of case groups")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available() and not (INTERPRET and args.quick):
        print("bench_triton: no CUDA device on this host (the triton_cuda_bf16 kernels run on a GPU)", file=sys.stderr)
        return 2
    dev = torch.device("cuda" if torch.cuda.is_available() and not INTERPRET else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    clock = Clock(dev)
    import triton

    from ws1_ops.triton import _gemm

    host = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
            "device": torch.cuda.get_device_name(0) if clock.cuda else "cpu (interpreter logic check)",
            "capability": list(torch.cuda.get_device_capability(0)) if clock.cuda else None,
            "interpreter": INTERPRET, "quick": args.quick}
    print(f"bench_triton on {host['device']} (torch {host['torch']}, triton {host['triton']})", flush=True)
    groups = {"gemm": gemm_cases, "attention": attention_cases, "logprob": logprob_cases, "chain": chain_cases}
    rows, errors = [], {}
    for name in args.only.split(","):
        if name == "chain" and not args.chain:
            continue
        print(f"[{name}]", flush=True)
        try:
            rows += groups[name](clock, dev, args)
        except Exception as exc:  # a failed group is reported, never silently dropped
            errors[name] = f"{type(exc).__name__}: {exc}"
            print(f"  {name}: FAILED {errors[name]}", flush=True)
    tg = targets(rows)
    for t in tg:
        print(f"  target {'MET ' if t['met'] else 'MISS'} {t['target']}: {t['value']:.3f}")
    result = {"host": host, "gemm_configs": {"bf16": vars(_gemm.BF16_CONFIG), "fp32": vars(_gemm.F32_CONFIG)},
              "cases": rows, "targets": tg, "errors": errors}
    path = args.json or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "evidence", "bench", "triton.json")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
