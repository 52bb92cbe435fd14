"""Benchmark the CUDA C++ kernels (cuda_bf16, torch.ops.ws1_cuda) against what a user would pick instead,
side by side in one run (medians; not a test).

Cases (Qwen3-8B shapes, BF16, FP32 accumulation), timing and modes as benchmarks/bench_triton.py (whose
Clock / compare / row helpers this script uses): CUDA events, contenders alternating run by run, median
over --reps; ``graph`` (captured calls replayed: device time) and ``eager`` (plain Python calls).

* det_gemm vs ``torch.matmul`` (cuBLAS) at M in {1, 59, 256, 4096}, K 4096, N in {4096, 12288}; weights
  rotate over > 2x L2 so neither side is timed on an L2-resident weight; the same layers' backward GEMMs
  (dx = dy W and dW = dy^T x with BF16 dy: vs cuBLAS BF16 -> FP32; dx with an FP32 dy: vs cuBLAS FP32 with
  TF32 off, and vs cuBLAS BF16 for the record); lm_head at V 151936 vs cuBLAS BF16 -> FP32, and its backward
  at M 256 / 2048 (bench_triton.lm_head_backward_cases: FP32 dy [M, V], dx and dW vs cuBLAS FP32, TF32 off).
  Every GEMM row carries its roofline time (max of FLOPs / BF16 rate and bytes / HBM bandwidth, both measured on
  this card at the start of the run by harness.py; an FP32-dy GEMM — three BF16 GEMMs on sm_90 — at a third of
  the rate) and ws1's fraction of it;
* attention prefill (the 4 fixture samples packed; B1 S2048; a varlen pack B4 S1000/700/300/48), decode (B1
  Skv32, B32 Skv2048, B1 Skv32768) and the backward at S2048, Hq 32, Hkv 8, D 128, vs
  ``F.scaled_dot_product_attention`` forced onto its flash backend (``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``;
  padded [B, H, S, D] for the packs; K/V expanded to Hq heads if this torch's flash takes no GQA) — reported
  ABSENT when flash cannot run, never replaced — each row beside its roofline; the flash_attn package's
  varlen / decode calls as extra rows when it is importable;
* the n32 candidate (wgmma_gemm.h; not used by the ops) at M 1 and 59, N 1024 / 4096 / 12288: its time vs the
  narrow configuration det_gemm runs there and vs cuBLAS, and whether its bits equal narrow's (no target);
* logprob / batch_invariant_logp vs ``log_softmax`` (+ gather): T 27 and 2048, V 151936;
* the chain (teacher forcing of the 4 fixture samples through the synthetic qwen3-8b-L2 model, forward
  and forward+backward) on cuda_bf16 vs the same model in plain PyTorch BF16 (benchmarks/plain_qwen3.py).

Targets (issue 24, printed MET/MISS beside the roofline): det_gemm, lm_head and the backward GEMMs >= 0.9x
cuBLAS at M >= 256, >= 0.8x at M <= 64 (graph mode); chain time
ratio (forward+backward) <= 1.25; attention >= 0.8x SDPA flash for prefill at S2048 and the varlen
packs, >= 0.7x for decode at B32 Skv2048 and B1 Skv32768, >= 0.6x for the backward (graph mode; eager rows
for the record).

    python benchmarks/bench_cuda.py [--reps 10] [--json PATH] [--only gemm,attention,logprob,chain] [--deadline-s S]

The JSON is rewritten after every group (``complete`` false until the last): a run stopped by its caller's time
limit (SIGTERM) or past ``--deadline-s`` keeps the groups it finished and names the others in ``errors``
(harness.Run).

Without a CUDA device, or without the built ws1_kernels_cuda, it prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from bench_triton import (  # noqa: E402
    BF,
    HKV,
    HQ,
    V_FULL,
    Clock,
    D,
    _cu,
    _modes,
    _row,
    chain_phases,
    compare,
    failed_row,
    flash_backward,
    lm_head_backward_cases,
    print_targets,
    rotation,
    row_errors,
    weight_copies,
)
from bench_triton import _sdpa_flash as _triton_sdpa_flash  # noqa: E402


def _k():
    return torch.ops.ws1_cuda


# The ceilings are this card's, measured at the start of the run (harness.measure). An FP32 operand runs as three
# BF16 GEMMs on sm_90 (det_gemm.cu: the exact split), so its floor counts three products (gemms=3).


def roofline_ms(flops: float, nbytes: float, gemms: int = 1) -> float:
    """max(FLOPs / peak, bytes / bandwidth): the floor no kernel beats (each operand read once, C written once)."""
    return harness.current().roofline_ms(flops, nbytes, gemms)


def _rotating(g, dev, shape, scale, copies):
    return [(torch.randn(*shape, generator=g, device="cpu") * scale).to(BF).to(dev) for _ in range(copies)]


def _mm_f32_out():
    """cuBLAS BF16 x BF16 -> FP32 (torch.mm's out_dtype, torch >= 2.8), or None: the honest contender for an FP32
    output; without it the contender is BF16 out (cuBLAS writes half the bytes: said in the row)."""
    try:
        a = torch.zeros(8, 8, dtype=BF, device="cuda")
        torch.mm(a, a, out_dtype=torch.float32)
        return lambda x, y: torch.mm(x, y, out_dtype=torch.float32)
    except Exception:  # noqa: BLE001
        return None


def _gemm_row(clock, args, name, fns, flops, nbytes, extra, gemms=1):
    rows = []
    inner = max(3, min(200, int(2e11 / (flops + 1))))
    for mode in _modes(clock):
        r = _row(name, mode, compare(clock, fns, args.reps, inner, mode == "graph"), extra)
        r["roofline_ms"] = roofline_ms(flops, nbytes, gemms)
        r["roofline_basis"] = harness.current().basis(gemms)
        r["tflops_ws1"] = flops / (r["ws1_ms"] * 1e9)
        r["tflops_torch"] = flops / (r["torch_ms"] * 1e9)
        r["ws1_over_roofline"] = r["roofline_ms"] / r["ws1_ms"]
        print(
            f"    roofline {r['roofline_ms']:.4f} ms ({r['roofline_basis']}): "
            f"ws1 at {r['ws1_over_roofline']:.2f} of it",
            flush=True,
        )
        rows.append(r)
    return rows


def gemm_cases(clock, dev, args) -> list[dict]:
    """det_gemm and lm_head forward, and the backward's gemm (dx, dW; BF16 operands -> the tensor-core path, an
    FP32 dy -> the three-way BF16 split on sm_90), each against cuBLAS, at the issue's shapes. Weights rotate over
    > 2x L2."""
    g = torch.Generator(device="cpu").manual_seed(0)
    f32_out = _mm_f32_out()
    rows = []
    K = 4096
    for N in (4096, 12288):
        copies = weight_copies(N * K * 2)
        ws = _rotating(g, dev, (N, K), 0.02, copies)
        nxt = rotation(ws)

        for M in (1, 59, 256, 4096):
            x = (torch.randn(M, K, generator=g, device="cpu") * 0.5).to(BF).to(dev)
            flops, nb = 2 * M * K * N, 2 * (M * K + N * K + M * N)
            rows += _gemm_row(
                clock,
                args,
                f"det_gemm M{M} K{K} N{N}",
                {
                    "ws1": lambda x=x, nxt=nxt: _k().det_gemm(x, nxt("ws1")),
                    "torch": lambda x=x, nxt=nxt: torch.matmul(x, nxt("torch").t()),
                },
                flops,
                nb,
                {"kind": "det_gemm", "M": M, "K": K, "N": N, "weight_copies": copies, "vs": "cuBLAS BF16"},
            )
            # the backward of the same layer: dx = dy @ W (dy BF16: det_gemm's output gradient), dW = dy^T x
            dy = (torch.randn(M, N, generator=g, device="cpu") * 0.1).to(BF).to(dev)
            nb_dx = 2 * (M * N + N * K) + 4 * M * K
            mm = f32_out or (lambda a, b: torch.mm(a, b))
            vs = "cuBLAS BF16 -> FP32" if f32_out else "cuBLAS BF16 -> BF16 (no out_dtype in this torch)"
            rows += _gemm_row(
                clock,
                args,
                f"backward dx BF16 M{M} N{N} K{K}",
                {
                    "ws1": lambda dy=dy, nxt=nxt: _k().gemm(dy, nxt("ws1").t(), True),
                    "torch": lambda dy=dy, nxt=nxt, mm=mm: mm(dy, nxt("torch")),
                },
                flops,
                nb_dx,
                {"kind": "backward_bf16", "M": M, "K": K, "N": N, "vs": vs},
            )
            if M >= 59:
                perm = torch.randperm(M, generator=g, device="cpu").to(dev)
                dyp, xp = dy.index_select(0, perm), x.index_select(0, perm)
                nb_dw = 2 * (M * N + M * K) + 4 * N * K
                rows += _gemm_row(
                    clock,
                    args,
                    f"backward dW BF16 M{M} N{N} K{K}",
                    {
                        "ws1": lambda dyp=dyp, xp=xp: _k().gemm(dyp.t(), xp.t(), True),
                        "torch": lambda dyp=dyp, xp=xp, mm=mm: mm(dyp.t(), xp),
                    },
                    flops,
                    nb_dw,
                    {"kind": "backward_bf16", "M": M, "K": K, "N": N, "vs": vs},
                )
            # the same dx in FP32 (lm_head's dy is FP32): the three-way split, against cuBLAS FP32 (TF32 off)
            # and, for the record, against cuBLAS BF16
            if M in (59, 256):
                dy32 = torch.randn(M, N, generator=g, device="cpu").to(dev) * 0.1
                w0 = ws[0]
                w32 = w0.float()
                rows += _gemm_row(
                    clock,
                    args,
                    f"backward dx FP32 M{M} N{N} K{K} vs cuBLAS FP32",
                    {
                        "ws1": lambda dy32=dy32, w0=w0: _k().gemm(dy32, w0.t(), True),
                        "torch": lambda dy32=dy32, w32=w32: torch.mm(dy32, w32),
                    },
                    flops,
                    4 * M * N + 2 * N * K + 4 * M * K,
                    {"kind": "backward_fp32", "M": M, "K": K, "N": N, "vs": "cuBLAS FP32 (TF32 off)"},
                    gemms=3,
                )
                rows += _gemm_row(
                    clock,
                    args,
                    f"backward dx FP32 M{M} N{N} K{K} vs cuBLAS BF16",
                    {
                        "ws1": lambda dy32=dy32, w0=w0: _k().gemm(dy32, w0.t(), True),
                        "torch": lambda dy=dy, w0=w0: torch.mm(dy, w0),
                    },
                    flops,
                    4 * M * N + 2 * N * K + 4 * M * K,
                    {"kind": "backward_fp32_vs_bf16", "M": M, "K": K, "N": N, "vs": "cuBLAS BF16 (information)"},
                    gemms=3,
                )
    # lm_head: the vocabulary projection, FP32 logits
    V = V_FULL
    wv = (torch.randn(V, K, generator=g, device="cpu") * 0.02).to(BF).to(dev)
    vs = "cuBLAS BF16 -> FP32" if f32_out else "cuBLAS BF16 -> BF16 (no out_dtype in this torch)"
    mm = f32_out or (lambda a, b: torch.mm(a, b))
    for M in (1, 59, 256, 4096):
        x = (torch.randn(M, K, generator=g, device="cpu") * 0.5).to(BF).to(dev)
        rows += _gemm_row(
            clock,
            args,
            f"lm_head M{M} K{K} V{V}",
            {"ws1": lambda x=x, wv=wv: _k().lm_head(x, wv), "torch": lambda x=x, wv=wv, mm=mm: mm(x, wv.t())},
            2 * M * K * V,
            2 * (M * K + V * K) + 4 * M * V,
            {"kind": "lm_head", "M": M, "K": K, "N": V, "vs": vs},
        )
    rows += n32_candidate_rows(clock, dev, args, g)
    for name, kind, fns, flops, nbytes, extra in lm_head_backward_cases(
        dev,
        K,
        wv,
        (256, 2048),
        lambda dy, w: _k().gemm(dy, w.t(), True),
        lambda dy, x: _k().gemm(dy.t(), x.t(), True),
        mm,
        vs,
    ):
        rows += _gemm_row(clock, args, name, fns, flops, nbytes, {**extra, "kind": kind}, gemms=3)
    return rows


def n32_candidate_rows(clock, dev, args, g) -> list[dict]:
    """The n32 candidate (wgmma_gemm.h: 64 x 32 tiles on wgmma m64n32k16, N / 32 CTAs; never chosen by the ops) at a
    decode step's M (1, 59) for Qwen3-8B's weight widths N 1024 (k_proj, v_proj), 4096, 12288 (K 4096): its time beside
    the narrow configuration's (what det_gemm runs there) and cuBLAS's, and whether its bits equal narrow's on the
    same rows — the two facts that decide whether it may become det_gemm's M <= 64 configuration. No target: speed =
    t_narrow / t_candidate. Weights rotate over > 2x L2, as the det_gemm rows'. An sm_80 device has no sm_90a
    configuration: a line says so, no row."""
    if torch.cuda.get_device_capability(dev)[0] != 9:
        print("  n32 candidate: not run (an sm_90a configuration; this device is not sm_90)", flush=True)
        return []
    from ws1_kernels_cuda import _C

    rows, K = [], 4096
    for N in (1024, 4096, 12288):
        copies = weight_copies(N * K * 2)
        ws = _rotating(g, dev, (N, K), 0.02, copies)
        nxt = rotation(ws)

        for M in (1, 59):
            x = (torch.randn(M, K, generator=g, device="cpu") * 0.5).to(BF).to(dev)
            same = all(
                torch.equal(
                    _C.det_gemm_in_config(x, w, "narrow_n32").view(torch.int16),
                    _C.det_gemm_in_config(x, w, "narrow").view(torch.int16),
                )
                for w in ws[:2]
            )
            fns = {
                "ws1": lambda x=x, nxt=nxt: _C.det_gemm_in_config(x, nxt("ws1"), "narrow_n32"),
                "torch": lambda x=x, nxt=nxt: _C.det_gemm_in_config(x, nxt("torch"), "narrow"),
                "cublas": lambda x=x, nxt=nxt: torch.matmul(x, nxt("cublas").t()),
            }
            flops, nb = 2 * M * K * N, 2 * (M * K + N * K + M * N)
            for mode in _modes(clock):
                name = f"det_gemm n32 candidate M{M} K{K} N{N} vs narrow"
                try:
                    res = compare(clock, fns, args.reps, max(3, min(200, int(2e11 / flops))), mode == "graph")
                except Exception as exc:  # noqa: BLE001  (a row that cannot run is a failed row, named in the errors)
                    rows.append(failed_row(name, mode, "candidate", exc))
                    continue
                r = _row(
                    name,
                    mode,
                    res,
                    {
                        "kind": "candidate",
                        "M": M,
                        "K": K,
                        "N": N,
                        "weight_copies": copies,
                        "candidate_bits_equal_narrow": same,
                        "cublas_ms": res["cublas"]["median_ms"],
                        "note": "speed = t_narrow / t_candidate; not a target",
                    },
                )
                r["speed_vs_cublas"] = r["cublas_ms"] / r["ws1_ms"]
                r["roofline_ms"] = roofline_ms(flops, nb)
                r["ws1_over_roofline"] = r["roofline_ms"] / r["ws1_ms"]
                print(
                    f"    cuBLAS {r['cublas_ms']:.4f} ms: candidate at {r['speed_vs_cublas']:.2f}x of it, narrow at "
                    f"{r['cublas_ms'] / r['torch_ms']:.2f}x; roofline {r['roofline_ms']:.4f} ms",
                    flush=True,
                )
                rows.append(r)
            print(f"    candidate bits equal to narrow's: {same}", flush=True)
    return rows


def _flash():
    try:
        import flash_attn

        return flash_attn
    except Exception:  # noqa: BLE001  (absent or broken: reported as absent)
        return None


# ---- attention (issue 24): ws1 vs torch SDPA forced onto its flash backend ----------------------------------------
ATTN_WANT = {"attention_prefill": 0.8, "attention_decode": 0.7, "attention_backward": 0.6}


def _sdpa_flash(dev) -> dict:
    """torch's SDPA forced onto its flash backend (FlashAttention-2 class): bench_triton's, the one contender both GPU
    profiles are judged against ({"fn", "expand", "note"}, or {"fn": None, "note"}: the targets are then ABSENT)."""
    return _triton_sdpa_flash(dev, quick=False)


def attention_cost(kind: str, lengths=None, B=0, S=0) -> tuple[float, float]:
    """(useful FLOPs, fewest HBM bytes) of one call at Hq 32, Hkv 8, D 128 (docs/cuda.md, attention cost model):
    causal prefill 4 D Hq sum(p + 1); decode 4 D Hq B S; backward 2.5x the forward (FlashAttention's count)."""
    if kind == "prefill":
        T = sum(lengths)
        flops = sum(4 * D * HQ * n * (n + 1) // 2 for n in lengths)
        return flops, T * HQ * D * 2 * 2 + T * HKV * D * 2 * 2 + T * HQ * 4
    if kind == "decode":
        return 4 * D * HQ * B * S, B * S * HKV * D * 2 * 2 + B * HQ * D * 2 * 2 + B * HQ * 4
    flops = 4 * D * HQ * S * (S + 1) // 2 * 5 // 2  # backward
    return flops, S * HQ * D * 2 * 4 + S * HKV * D * 2 * 2 + S * HQ * D * 4 + S * HKV * D * 4 * 2 + S * HQ * 4


def _attn_row(clock, args, name, mode, fns, inner, extra, flops, nbytes):
    r = _row(name, mode, compare(clock, fns, args.reps, inner, mode == "graph"), extra)
    r["roofline_ms"] = roofline_ms(flops, nbytes)
    r["roofline_basis"] = f"{harness.current().basis()}; useful FLOPs {flops / 1e9:.3f} G, {nbytes / 1e6:.1f} MB"
    r["ws1_over_roofline"] = r["roofline_ms"] / r["ws1_ms"]
    print(f"    roofline {r['roofline_ms']:.4f} ms: ws1 at {r['ws1_over_roofline']:.2f} of it", flush=True)
    return r


def attention_cases(clock, dev, args) -> list[dict]:
    """Prefill (the fixture pack, B1 S2048, a varlen pack), decode (B1 Skv32, B32 Skv2048, B1 Skv32768) and the
    backward at S2048, Hq 32 / Hkv 8 / D 128, each against SDPA's flash backend (padded [B, H, S, D] for the
    packs: SDPA has no varlen entry) and, when importable, the flash_attn package (extra rows, not targets)."""
    g = torch.Generator(device="cpu").manual_seed(1)
    flash, fa = _sdpa_flash(dev), _flash()
    scale = D**-0.5
    rows = []
    if flash["fn"] is None:
        print(f"  {flash['note']}: the attention targets are ABSENT (nothing timed in their place)", flush=True)
        rows.append({"case": "attention vs SDPA flash", "mode": "-", "absent": flash["note"]})
        return rows
    print(f"  contender: {flash['note']}", flush=True)

    def r(*shape):
        return torch.randn(*shape, generator=g, device="cpu").to(BF).to(dev)

    def kv_for(t):  # [B, Hkv, S, D] -> what the flash contender reads
        return t.repeat_interleave(HQ // HKV, 1) if flash["expand"] else t

    for name, lengths in (
        ("prefill fixture B4 S11/16/13/19", [11, 16, 13, 19]),
        ("prefill B1 S2048", [2048]),
        ("prefill varlen B4 S1000/700/300/48", [1000, 700, 300, 48]),
    ):
        T, S, B = sum(lengths), max(lengths), len(lengths)
        q, k, v = r(T, HQ, D), r(T, HKV, D), r(T, HKV, D)
        cu = _cu(lengths, dev)
        pos = torch.cat([torch.arange(n, device="cpu") for n in lengths]).to(dev)
        qp, kp, vp = r(B, HQ, S, D), kv_for(r(B, HKV, S, D)), kv_for(r(B, HKV, S, D))
        fns = {
            "ws1": lambda q=q, k=k, v=v, cu=cu, pos=pos: _k().attention(q, k, v, cu, cu, pos, scale),
            "torch": lambda qp=qp, kp=kp, vp=vp: flash["fn"](qp, kp, vp, True, scale),
        }
        flops, nbytes = attention_cost("prefill", lengths)
        for mode in _modes(clock):
            rows.append(
                _attn_row(
                    clock,
                    args,
                    f"attention {name} vs SDPA flash",
                    mode,
                    fns,
                    10,
                    {
                        "kind": "attention_prefill",
                        "vs": flash["note"],
                        "lengths": lengths,
                        "contender_layout": f"padded [{B}, {HQ}, {S}, {D}]",
                    },
                    flops,
                    nbytes,
                )
            )
        if fa is not None:
            cu32 = cu.to(torch.int32)
            fl = {
                "ws1": fns["ws1"],
                "torch": lambda q=q, k=k, v=v, cu32=cu32, S=S: fa.flash_attn_varlen_func(
                    q, k, v, cu32, cu32, S, S, softmax_scale=scale, causal=True
                ),
            }
            rows.append(
                _row(
                    f"attention {name} vs flash_attn",
                    "graph",
                    compare(clock, fl, args.reps, 10, True),
                    {"vs": "flash_attn " + fa.__version__, "lengths": lengths},
                )
            )
    for name, B, S in (("decode B1 Skv32", 1, 32), ("decode B32 Skv2048", 32, 2048), ("decode B1 Skv32768", 1, 32768)):
        q, k, v = r(B, HQ, D), r(B * S, HKV, D), r(B * S, HKV, D)
        cu_q, cu_k = _cu([1] * B, dev), _cu([S] * B, dev)
        pos = torch.full((B,), S - 1, dtype=torch.int64, device=dev)
        qd = q.reshape(B, 1, HQ, D).transpose(1, 2).contiguous()
        kd = kv_for(k.reshape(B, S, HKV, D).transpose(1, 2).contiguous())
        vd = kv_for(v.reshape(B, S, HKV, D).transpose(1, 2).contiguous())
        fns = {
            "ws1": lambda q=q, k=k, v=v, cu_q=cu_q, cu_k=cu_k, pos=pos: _k().attention(q, k, v, cu_q, cu_k, pos, scale),
            "torch": lambda qd=qd, kd=kd, vd=vd: flash["fn"](qd, kd, vd, False, scale),
        }
        flops, nbytes = attention_cost("decode", B=B, S=S)
        for mode in _modes(clock):
            rows.append(
                _attn_row(
                    clock,
                    args,
                    f"attention {name} vs SDPA flash",
                    mode,
                    fns,
                    50,
                    {
                        "kind": "attention_decode" if S > 32 else "attention_decode_small",
                        "vs": flash["note"],
                        "B": B,
                        "Skv": S,
                    },
                    flops,
                    nbytes,
                )
            )
        if fa is not None:
            qf, kf, vf = q.reshape(B, 1, HQ, D), k.reshape(B, S, HKV, D), v.reshape(B, S, HKV, D)
            fl = {
                "ws1": fns["ws1"],
                "torch": lambda qf=qf, kf=kf, vf=vf: fa.flash_attn_func(qf, kf, vf, softmax_scale=scale),
            }
            rows.append(
                _row(
                    f"attention {name} vs flash_attn",
                    "graph",
                    compare(clock, fl, args.reps, 50, True),
                    {"vs": "flash_attn " + fa.__version__, "B": B, "Skv": S},
                )
            )
    # backward at S2048: ws1's attention_bwd (its plans are built on the device, so it is captured like the forward;
    # the eager row adds the host-side validation's sync) vs the flash backward
    S = 2048
    q, k, v = r(S, HQ, D), r(S, HKV, D), r(S, HKV, D)
    cu, pos = _cu([S], dev), torch.arange(S, device=dev)
    out, lse = _k().attention(q, k, v, cu, cu, pos, scale)
    dout = r(S, HQ, D)
    fns = {
        "ws1": lambda: _k().attention_bwd(dout, q, k, v, out, lse, cu, cu, pos, scale),
        "torch": flash_backward(flash, kv_for, q, k, v, dout, scale),
    }
    flops, nbytes = attention_cost("backward", S=S)
    name = "attention backward B1 S2048 vs SDPA flash"
    for mode in _modes(clock):
        try:
            rows.append(
                _attn_row(
                    clock,
                    args,
                    name,
                    mode,
                    fns,
                    5,
                    {"kind": "attention_backward", "vs": flash["note"], "S": S},
                    flops,
                    nbytes,
                )
            )
        except RuntimeError as exc:  # a capture either side cannot make: this row fails, the group's others stay
            rows.append(failed_row(name, mode, "attention_backward", exc))
    if fa is None:
        print("  the flash_attn package is not importable here: its extra rows are absent, not replaced", flush=True)
    return rows


def attention_targets(rows: list[dict]) -> list[dict]:
    """Issue 24: forward >= 0.8x SDPA flash for prefill at S2048 and the varlen packs (graph mode), decode >= 0.7x at
    B32 Skv2048 and B1 Skv32768 (graph), backward >= 0.6x (graph), each beside its roofline; ABSENT (met None) when
    the flash backend cannot run."""
    out = []
    for r in rows:
        if "absent" in r:
            for t in (
                "prefill S2048 and varlen packs >= 0.8",
                "decode B32 Skv2048 and B1 Skv32768 >= 0.7",
                "backward >= 0.6",
            ):
                out.append(
                    {"target": f"attention {t} vs SDPA flash", "value": None, "met": None, "absent": r["absent"]}
                )
            continue
        want = ATTN_WANT.get(r.get("kind"))
        if want is None or r["mode"] != "graph":
            continue
        if "failed" in r:  # not measured: no verdict, and the run's errors name it (exit status 1)
            out.append(
                {
                    "target": f"{r['case']}: speed >= {want} ({r['mode']})",
                    "value": None,
                    "met": None,
                    "absent": f"FAILED {r['failed']}",
                }
            )
            continue
        out.append(
            {
                "target": f"{r['case']}: speed >= {want} ({r['mode']})",
                "value": r["speed"],
                "met": r["speed"] >= want,
                "roofline_ms": r["roofline_ms"],
                "ws1_ms": r["ws1_ms"],
                "torch_ms": r["torch_ms"],
                "vs": r["vs"],
            }
        )
    return out


def logprob_cases(clock, dev, args) -> list[dict]:
    g = torch.Generator(device="cpu").manual_seed(2)
    rows = []
    for T in (27, 2048):
        logits = (torch.randn(T, V_FULL, generator=g, device="cpu") * 3).to(dev)
        t = torch.randint(0, V_FULL, (T,), generator=g, device="cpu").to(dev)
        fns = {
            "ws1": lambda lg=logits, t=t: _k().logprob(lg, t),
            "torch": lambda lg=logits, t=t: torch.log_softmax(lg, -1).gather(1, t[:, None]).squeeze(1),
        }
        fns2 = {
            "ws1": lambda lg=logits: _k().batch_invariant_logp(lg),
            "torch": lambda lg=logits: torch.log_softmax(lg, -1),
        }
        # eager only: the ws1 logprob validates targets on the host (one sync), which a graph cannot capture
        rows.append(_row(f"logprob T{T} V{V_FULL}", "eager", compare(clock, fns, args.reps, 10, False)))
        for mode in _modes(clock):
            rows.append(
                _row(f"batch_invariant_logp T{T} V{V_FULL}", mode, compare(clock, fns2, args.reps, 10, mode == "graph"))
            )
    return rows


def chain_cases(clock, dev, args) -> list[dict]:
    """cuda_bf16 vs plain PyTorch BF16 on the synthetic qwen3-8b-L2 model, the 4 fixture samples."""
    from plain_qwen3 import PlainQwen3

    import ws1_qwen3

    t0 = time.perf_counter()
    model = ws1_qwen3.synthetic("qwen3-8b-L2", "cuda_bf16", device=dev)
    plain = PlainQwen3(model, device=dev)
    print(f"  chain: qwen3-8b-L2 built in {time.perf_counter() - t0:.1f} s", flush=True)
    samples = ws1_qwen3.fixture_samples()
    phases = chain_phases(model, plain, samples, dev)
    rows = []
    for name, fn, ref in phases:
        res = compare(clock, {"ws1": fn, "torch": ref}, max(3, args.reps // 3), 1, False)
        rows.append(
            _row(
                f"chain qwen3-8b-L2 fixture {name}",
                "eager",
                res,
                {"contenders": ["cuda_bf16", "plain PyTorch BF16 (plain_qwen3.py)"]},
            )
        )
    return rows


def targets(rows: list[dict]) -> list[dict]:
    """Issue 24: det_gemm, lm_head and the backward's GEMMs >= 0.9x cuBLAS at M >= 256, >= 0.8x at M <= 64 (graph
    mode), each beside its roofline. The FP32 backward is judged against cuBLAS FP32; its ratio to cuBLAS BF16 is
    printed, not judged (an FP32 product cannot be compared with a BF16 one as a target)."""
    out = []
    for r in rows:
        if (
            r.get("kind") in ("det_gemm", "lm_head", "backward_bf16", "backward_fp32", "lm_head_backward")
            and r["mode"] == "graph"
        ):
            want = 0.9 if r["M"] >= 256 else 0.8
            out.append(
                {
                    "target": f"{r['case']}: speed >= {want} vs {r['vs']} (graph)",
                    "value": r["speed"],
                    "met": r["speed"] >= want,
                    "roofline_ms": r["roofline_ms"],
                    "ws1_ms": r["ws1_ms"],
                    "torch_ms": r["torch_ms"],
                }
            )
        if r["case"].startswith("chain") and r["case"].endswith("forward+backward"):
            out.append(
                {
                    "target": "chain time ratio <= 1.25 (forward+backward vs plain PyTorch BF16)",
                    "value": r["time_ratio"],
                    "met": r["time_ratio"] <= 1.25,
                }
            )
    out += attention_targets(rows)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default=None, help="write the results here (default: evidence/bench/cuda.json)")
    ap.add_argument("--only", default="gemm,attention,logprob,chain", help="comma list of case groups")
    harness.add_deadline(ap)
    args = ap.parse_args(argv)
    groups = {"gemm": gemm_cases, "attention": attention_cases, "logprob": logprob_cases, "chain": chain_cases}
    if harness.refuse_unknown("bench_cuda", args.only, groups):
        return 2
    if not torch.cuda.is_available():
        print("bench_cuda: no CUDA device on this host (the cuda_bf16 kernels run on a GPU)", file=sys.stderr)
        return 2
    try:
        import ws1_kernels_cuda  # noqa: F401
    except ImportError as exc:
        print(f"bench_cuda: {exc}", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    clock = Clock(dev)
    fa = _flash()
    host = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "flash_attn": getattr(fa, "__version__", None),
    }
    host["ceilings"] = harness.use(harness.measure(dev)).to_json()
    print(
        f"bench_cuda on {host['device']} (torch {host['torch']}, flash_attn {host['flash_attn']}); rooflines at "
        f"{harness.current().basis()}, L2 {harness.current().l2_bytes / 2**20:.0f} MiB ({harness.current().source})",
        flush=True,
    )
    gemm_config = (
        "sm_90: wgmma m64n128k16 + TMA (CUTLASS collectives, persistent): 256x128x64 cooperative (wide) or "
        "64x128x64 ping-pong (narrow; M <= 128 or < 132 wide tiles), same bits; sm_80: mma.sync 64x128 / 32x32; "
        "FP32 a with BF16 b on sm_90: the exact three-way BF16 split on the same wgmma kernel, (lo + mid) + hi; "
        "other FP32 operands and sm_80: CUDA-core serial chain 128x128x16"
    )
    path = args.json or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "evidence", "bench", "cuda.json"
    )
    run = harness.Run(
        path,
        lambda rows, errors: {
            "host": host,
            "gemm_config": gemm_config,
            "cases": rows,
            "targets": targets(rows),
            "errors": {**errors, **row_errors(rows)},
            "calls": json.loads(_k().calls()),
        },
        args.deadline_s,
    )
    for name in args.only.split(","):
        print(f"[{name}]", flush=True)
        run.group(name, lambda fn=groups[name]: fn(clock, dev, args))
    print_targets(targets(run.rows), vs="cuBLAS")
    complete = run.finish()
    print(f"wrote {path}{'' if complete else ' (incomplete: see its errors)'}")
    return 1 if run.errors or row_errors(run.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
