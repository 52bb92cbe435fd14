"""Benchmark the ws1 Qwen3 model against transformers' own Qwen3 (BF16 and FP32) and plain PyTorch BF16.

For each model (``tiny``, ``qwen3-8b-L2``; synthetic weights, saved once and loaded by every contender):

* forward — the trainer's teacher forcing of the 4 fixture samples (4 x 20 right-padded): ws1 BF16
  (cpu_bf16) vs transformers BF16 and FP32 and the plain-PyTorch BF16 model of plain_qwen3.py
  (F.linear, F.rms_norm, batched causal SDPA: the code a user would write). The others run their
  backbone on the padded batch and their lm_head on the same 27 completion rows ws1 computes logits
  for (the same work; a full-vocab head on all 80 rows would only handicap them).
* forward+backward — loss = −mean logp of the 27 completion tokens, backward to every parameter
  (ws1 inside canonical_grads()). Interleaved when every contender with its gradients fits in
  memory together; otherwise (qwen3-8b-L2 on a 24 GiB host: an FP32 8B-shape model and its
  gradients take 13 GB) each runs alone, one after the other, and the record says so.
* decode — 4 requests, greedy, N new tokens: ws1 generate() vs transformers generate() BF16 and FP32.

The contenders' repetitions are interleaved (a, b, c, a, b, c, ...) after a warm-up, so background
load hits them alike; medians, and ratios side by side (ws1 time / contender time: < 1 means ws1
is faster), are printed and written as JSON (--json PATH). The ISA path the ws1 kernels took is
printed from their own self-report (ws1_ops record: arch_key), not from the CPU's flags.

    .venv/bin/python benchmarks/bench_model.py [--models tiny,qwen3-8b-L2] [--reps 5] [--decode-tokens 20] [--json PATH]
                                               [--also-isa amx]

--also-isa P,Q adds ws1 on other kernel paths (WS1_CPU_ISA) as contenders "ws1_P" in the forward and
(interleaved) forward+backward phases, each with the arch key its kernels reported.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import ws1_ops
import ws1_qwen3
from ws1_qwen3 import Request, fixture_samples, generate, save_pretrained, teacher_forcing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import available_bytes  # noqa: E402
from plain_qwen3 import PlainQwen3  # noqa: E402

PAD_TO = 20
CONTENDERS = ("hf_bf16", "hf_fp32", "plain_bf16")  # ratios: ws1_bf16 / each of these


def median_times(fns: dict, reps: int) -> dict[str, float]:
    for fn in fns.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            gc.collect()
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def hf_inputs(samples, pad_id):
    ids = torch.full((len(samples), PAD_TO), pad_id, dtype=torch.int64, device="cpu")
    mask = torch.zeros_like(ids)
    rows, tgt = [], []
    for b, s in enumerate(samples):
        ids[b, : s.length] = torch.tensor(s.tokens, device="cpu")
        mask[b, : s.length] = 1
        for p in range(s.n_prompt, s.length):
            rows.append(b * PAD_TO + p - 1)
            tgt.append(s.tokens[p])
    return ids, mask, torch.tensor(rows, device="cpu"), torch.tensor(tgt, device="cpu")


def hf_loss(hf, ids, mask, rows, tgt):
    h = hf.model(input_ids=ids, attention_mask=mask).last_hidden_state.reshape(-1, hf.config.hidden_size)
    logits = hf.lm_head(h.index_select(0, rows)).float()
    return -torch.log_softmax(logits, -1).gather(1, tgt[:, None]).mean()


def ws1_loss(model, samples):
    return teacher_forcing(
        model, samples, layout="padded_right", padded_length=PAD_TO, grad=torch.is_grad_enabled()
    ).loss


def ratios(t: dict) -> dict:
    return {f"ws1_bf16/{k}": t["ws1_bf16"] / t[k] for k in CONTENDERS if k in t}


def ws1_arch_key(model, samples) -> str:
    """The ISA path the ws1 kernels took, from their own count (not the CPU's flags)."""
    with torch.no_grad(), ws1_ops.record() as rec:
        ws1_loss(model, samples)
    return rec.arch_key()


def on_path(isa: str, fn):
    """fn run with WS1_CPU_ISA=isa (the ws1 kernels read it on every call)."""

    def run():
        old = os.environ.get("WS1_CPU_ISA")
        os.environ["WS1_CPU_ISA"] = isa
        try:
            return fn()
        finally:
            if old is None:
                os.environ.pop("WS1_CPU_ISA", None)
            else:
                os.environ["WS1_CPU_ISA"] = old

    return run


def bench(name: str, reps: int, decode_tokens: int, sequential: bool = False, also_isa=()) -> dict:
    with tempfile.TemporaryDirectory() as d:
        return _bench(name, reps, decode_tokens, d, sequential, also_isa)


def _decode(out: dict, ours, hf16, hf32, samples, cfg, decode_tokens: int, reps: int) -> None:
    """4 requests, greedy, ``decode_tokens`` new tokens each: ws1 generate() vs transformers, interleaved."""
    prompts = [s.tokens[: s.n_prompt] for s in samples]
    reqs = [
        Request(prompt=p, max_new_tokens=decode_tokens, temperature=0.0, request_id=f"r{i}")
        for i, p in enumerate(prompts)
    ]
    ids = torch.tensor(prompts, device="cpu")  # equal-length prompts: no padding needed

    def hf_gen(m):
        return lambda: m.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=decode_tokens,
            min_new_tokens=decode_tokens,
            do_sample=False,
            pad_token_id=cfg.pad_id,
        )

    with torch.no_grad():
        t = median_times(
            {"ws1_bf16": lambda: generate(ours, reqs), "hf_bf16": hf_gen(hf16), "hf_fp32": hf_gen(hf32)},
            max(3, reps // 2),
        )
    n = len(reqs) * decode_tokens
    out["decode_tokens"] = n
    out["decode_s"] = t
    out["decode_tok_per_s"] = {k: n / v for k, v in t.items()}
    out["decode_ratio"] = ratios(t)


def _bench(name: str, reps: int, decode_tokens: int, d: str, sequential: bool, also_isa=()) -> dict:
    from transformers import Qwen3ForCausalLM

    def hf(dtype):
        return Qwen3ForCausalLM.from_pretrained(d, dtype=dtype).eval()  # the same (BF16-exact) values

    samples = fixture_samples()
    ours = ws1_qwen3.synthetic(name, "cpu_bf16", progress=True)
    cfg = ours.config
    save_pretrained(ours, d)
    hf32, hf16 = hf(torch.float32), hf(torch.bfloat16)
    plain = PlainQwen3(ours)
    inputs = hf_inputs(samples, cfg.pad_id)
    out: dict = {
        "model": name,
        "params": cfg.n_parameters(),
        "tokens": f"{len(samples)}x{PAD_TO}",
        "active_tokens": 27,
        "ws1_isa": ws1_arch_key(ours, samples),
    }
    out["also_isa"] = {f"ws1_{p}": on_path(p, lambda: ws1_arch_key(ours, samples))() for p in also_isa}
    extra_fwd = {f"ws1_{p}": on_path(p, lambda: ws1_loss(ours, samples)) for p in also_isa}

    # 1. forward, four contenders interleaved
    with torch.no_grad():
        t = median_times(
            {
                "ws1_bf16": lambda: ws1_loss(ours, samples),
                "hf_bf16": lambda: hf_loss(hf16, *inputs),
                "hf_fp32": lambda: hf_loss(hf32, *inputs),
                "plain_bf16": lambda: plain.loss(*inputs[::2], inputs[3]),
                **extra_fwd,
            },
            reps,
        )
    out["forward_s"] = t
    out["forward_ratio"] = ratios(t)

    # 2. decode, interleaved (--decode-tokens 0: skipped)
    if decode_tokens > 0:
        _decode(out, ours, hf16, hf32, samples, cfg, decode_tokens, reps)

    # 3. forward+backward: interleaved if all four contenders and their gradients fit together
    # (weights + gradients: 2+2 bytes per parameter for each BF16 model, 4+4 for FP32, x1.5 for
    # activations and allocator slack); else each alone in memory, one after the other.
    def ws1_fb():
        loss = ws1_loss(ours, samples)
        with ws1_ops.canonical_grads():
            loss.backward()
        ours.zero_grad(set_to_none=True)

    def fb_of(m, loss):
        def run():
            loss().backward()
            m.zero_grad(set_to_none=True)

        return run

    makers = {
        "ws1_bf16": lambda: ws1_fb,
        "hf_bf16": lambda: fb_of(hf16, lambda: hf_loss(hf16, *inputs)),
        "hf_fp32": lambda: fb_of(hf32, lambda: hf_loss(hf32, *inputs)),
        "plain_bf16": lambda: fb_of(plain, lambda: plain.loss(*inputs[::2], inputs[3])),
    }
    need = 1.5 * cfg.n_parameters() * (4 + 4 + 4 + 8)
    fb_reps = max(3, reps // 2)
    if need <= available_bytes() and not sequential:
        extra_fb = {f"ws1_{p}": on_path(p, ws1_fb) for p in also_isa}
        fb = median_times({**{k: mk() for k, mk in makers.items()}, **extra_fb}, fb_reps)
        out["forward_backward_mode"] = "interleaved"
    else:
        # each contender alone: free the others (the weights are on disk in d), rebuild one at a time
        keep = {"ws1_bf16": ours}
        ours = hf16 = hf32 = plain = None
        gc.collect()
        fb = {"ws1_bf16": median_times({"ws1_bf16": ws1_fb_of(keep["ws1_bf16"], samples)}, fb_reps)["ws1_bf16"]}
        plain = PlainQwen3(keep["ws1_bf16"])
        keep = None
        gc.collect()
        fb["plain_bf16"] = median_times(
            {"plain_bf16": fb_of(plain, lambda: plain.loss(*inputs[::2], inputs[3]))}, fb_reps
        )["plain_bf16"]
        plain = None
        gc.collect()
        for key, dt in (("hf_bf16", torch.bfloat16), ("hf_fp32", torch.float32)):
            m = hf(dt)
            fb[key] = median_times({key: fb_of(m, lambda m=m: hf_loss(m, *inputs))}, fb_reps)[key]
            m = None
            gc.collect()
        why = (
            "forced (--fb-sequential)"
            if sequential
            else (
                f"the contenders need ~{need / 2**30:.0f} GiB together, {available_bytes() / 2**30:.0f} GiB available"
            )
        )
        out["forward_backward_mode"] = f"sequential, not interleaved: {why}; mind the background load"
    out["forward_backward_s"] = fb
    out["forward_backward_ratio"] = ratios(fb)
    return out


def ws1_fb_of(model, samples):
    def run():
        loss = ws1_loss(model, samples)
        with ws1_ops.canonical_grads():
            loss.backward()
        model.zero_grad(set_to_none=True)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,qwen3-8b-L2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=20)
    ap.add_argument("--json", default="evidence/bench/model.json")
    ap.add_argument(
        "--fb-sequential", action="store_true", help="forward+backward one contender at a time even if all fit"
    )
    ap.add_argument(
        "--also-isa", default="", help="comma list of other ws1 kernel paths to time side by side, e.g. amx"
    )
    args = ap.parse_args()
    also = [p for p in args.also_isa.split(",") if p]
    results = []
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {platform.processor() or platform.machine()}")
    for name in args.models.split(","):
        r = bench(name, args.reps, args.decode_tokens, args.fb_sequential, also)
        results.append(r)
        print(
            f"\n{name} ({r['params'] / 1e6:.0f}M params, {r['tokens']} tokens; ws1 kernels ran ISA path {r['ws1_isa']})"
        )
        cols = ("ws1_bf16", *CONTENDERS)
        print(
            f"  {'phase':<18}"
            + "".join(f"{c + ' s':>14}" for c in cols)
            + "".join(f"{'ws1/' + c:>16}" for c in CONTENDERS)
        )
        for phase, key in (("forward", "forward"), ("forward+backward", "forward_backward"), ("decode", "decode")):
            if f"{key}_s" not in r:
                continue  # decode with --decode-tokens 0
            t, rt = r[f"{key}_s"], r[f"{key}_ratio"]
            print(
                f"  {phase:<18}"
                + "".join(f"{t[c]:14.3f}" if c in t else f"{'-':>14}" for c in cols)
                + "".join(
                    f"{rt['ws1_bf16/' + c]:15.2f}x" if "ws1_bf16/" + c in rt else f"{'-':>16}" for c in CONTENDERS
                )
            )
        for col, arch in r["also_isa"].items():
            line = f"  {col} (arch key {arch}):"
            for phase, key in (("forward", "forward"), ("forward+backward", "forward_backward")):
                t = r[f"{key}_s"]
                if col in t:
                    line += (
                        f" {phase} {t[col]:.3f} s"
                        + "".join(f", /{c} {t[col] / t[c]:.2f}x" for c in CONTENDERS if c in t)
                        + ";"
                    )
            print(line)
        if "decode_tok_per_s" in r:
            print("  decode tok/s: " + ", ".join(f"{k} {v:.1f}" for k, v in r["decode_tok_per_s"].items()))
        print(f"  forward+backward: {r['forward_backward_mode']}")
        gc.collect()
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "results": results}, indent=1)
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
