"""Benchmark the ws1 Qwen3 model against transformers' own Qwen3 on the same weights, in one run.

For each model (``tiny``, ``qwen3-8b-L2``; synthetic weights, saved once and loaded by both):

* forward — the trainer's teacher forcing of the 4 fixture samples (4 x 20 right-padded): ws1 BF16
  (cpu_bf16) vs transformers FP32 and BF16. transformers runs its backbone on the padded batch and
  its lm_head on the same 27 completion rows ws1 computes logits for (the same work; a full-vocab
  head on all 80 rows would only handicap it).
* forward+backward — loss = −mean logp of the 27 completion tokens, backward to every parameter
  (ws1 inside canonical_grads()); the two contenders run one after the other, each alone in
  memory (an FP32 8B-shape model and its gradients take 13 GB).
* decode — 4 requests, greedy, N new tokens: ws1 generate() vs transformers generate() (left-padded
  batch, its KV cache).

The contenders' repetitions are interleaved (a, b, c, a, b, c, ...) after a warm-up, so background
load hits them alike; medians and ratios (ws1 time / transformers time: < 1 means ws1 is faster)
are printed and written as JSON.

    .venv/bin/python benchmarks/bench_model.py [--models tiny,qwen3-8b-L2] [--reps 5] [--decode-tokens 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

import ws1_ops
import ws1_qwen3
from ws1_qwen3 import Request, fixture_samples, generate, save_pretrained, teacher_forcing

PAD_TO = 20


def median_times(fns: dict, reps: int) -> dict[str, float]:
    for fn in fns.values():          # warm-up
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
    ids = torch.full((len(samples), PAD_TO), pad_id, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    rows, tgt = [], []
    for b, s in enumerate(samples):
        ids[b, :s.length] = torch.tensor(s.tokens)
        mask[b, :s.length] = 1
        for p in range(s.n_prompt, s.length):
            rows.append(b * PAD_TO + p - 1)
            tgt.append(s.tokens[p])
    return ids, mask, torch.tensor(rows), torch.tensor(tgt)


def hf_loss(hf, ids, mask, rows, tgt):
    h = hf.model(input_ids=ids, attention_mask=mask).last_hidden_state.reshape(-1, hf.config.hidden_size)
    logits = hf.lm_head(h.index_select(0, rows)).float()
    return -torch.log_softmax(logits, -1).gather(1, tgt[:, None]).mean()


def ws1_loss(model, samples):
    return teacher_forcing(model, samples, layout="padded_right", padded_length=PAD_TO, grad=torch.is_grad_enabled()).loss


def bench(name: str, reps: int, decode_tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        return _bench(name, reps, decode_tokens, d)


def _bench(name: str, reps: int, decode_tokens: int, d: str) -> dict:
    from transformers import Qwen3ForCausalLM

    def hf(dtype):
        return Qwen3ForCausalLM.from_pretrained(d, dtype=dtype).eval()   # the same (BF16-exact) values

    samples = fixture_samples()
    ours = ws1_qwen3.synthetic(name, "cpu_bf16", progress=True)
    cfg = ours.config
    save_pretrained(ours, d)
    hf32, hf16 = hf(torch.float32), hf(torch.bfloat16)
    inputs = hf_inputs(samples, cfg.pad_id)
    out: dict = {"model": name, "params": cfg.n_parameters(), "tokens": f"{len(samples)}x{PAD_TO}", "active_tokens": 27}

    # 1. forward, three contenders interleaved
    with torch.no_grad():
        t = median_times({
            "ws1_bf16": lambda: ws1_loss(ours, samples),
            "hf_fp32": lambda: hf_loss(hf32, *inputs),
            "hf_bf16": lambda: hf_loss(hf16, *inputs),
        }, reps)
    out["forward_s"] = t
    out["forward_ratio_vs_hf_fp32"] = t["ws1_bf16"] / t["hf_fp32"]
    out["forward_ratio_vs_hf_bf16"] = t["ws1_bf16"] / t["hf_bf16"]
    hf16 = None
    gc.collect()

    # 2. decode, interleaved
    prompts = [s.tokens[:s.n_prompt] for s in samples]
    reqs = [Request(prompt=p, max_new_tokens=decode_tokens, temperature=0.0, request_id=f"r{i}") for i, p in enumerate(prompts)]
    ids = torch.tensor(prompts)                    # equal-length prompts: no padding needed
    with torch.no_grad():
        t = median_times({
            "ws1_bf16": lambda: generate(ours, reqs),
            "hf_fp32": lambda: hf32.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=decode_tokens,
                                             min_new_tokens=decode_tokens, do_sample=False, pad_token_id=cfg.pad_id),
        }, max(3, reps // 2))
    n = len(reqs) * decode_tokens
    out["decode_tokens"] = n
    out["decode_tok_per_s"] = {k: n / v for k, v in t.items()}
    out["decode_speedup_vs_hf_fp32"] = t["hf_fp32"] / t["ws1_bf16"]

    # 3. forward+backward: at the 8B shapes an FP32 model with its gradients (13 GB) and ours with
    # theirs do not fit a 24 GiB host together, so the two run one after the other in this process
    # (each alone in memory), not interleaved: compare medians, mind the background load.
    def ws1_fb():
        loss = ws1_loss(ours, samples)
        with ws1_ops.canonical_grads():
            loss.backward()
        ours.zero_grad(set_to_none=True)

    hf32 = None
    gc.collect()
    fb = {"ws1_bf16": median_times({"ws1_bf16": ws1_fb}, max(3, reps // 2))["ws1_bf16"]}
    ours = None
    gc.collect()
    hf32 = hf(torch.float32)

    def hf_fb():
        hf_loss(hf32, *inputs).backward()
        hf32.zero_grad(set_to_none=True)

    fb["hf_fp32"] = median_times({"hf_fp32": hf_fb}, max(3, reps // 2))["hf_fp32"]
    out["forward_backward_s"] = fb
    out["forward_backward_ratio_vs_hf_fp32"] = fb["ws1_bf16"] / fb["hf_fp32"]
    out["forward_backward_note"] = "sequential phases (memory), not interleaved"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,qwen3-8b-L2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=20)
    ap.add_argument("--json", default="evidence/bench/model.json")
    args = ap.parse_args()
    results = []
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {platform.processor() or platform.machine()}")
    for name in args.models.split(","):
        r = bench(name, args.reps, args.decode_tokens)
        results.append(r)
        f, fb, d = r["forward_s"], r["forward_backward_s"], r["decode_tok_per_s"]
        print(f"\n{name} ({r['params'] / 1e6:.0f}M params, {r['tokens']} tokens)")
        print(f"  forward            ws1 bf16 {f['ws1_bf16']:.3f}s | hf fp32 {f['hf_fp32']:.3f}s | hf bf16 {f['hf_bf16']:.3f}s"
              f" | ws1/hf_fp32 {r['forward_ratio_vs_hf_fp32']:.2f}x  ws1/hf_bf16 {r['forward_ratio_vs_hf_bf16']:.2f}x  (target <= 1.0x fp32)")
        print(f"  forward+backward   ws1 bf16 {fb['ws1_bf16']:.3f}s | hf fp32 {fb['hf_fp32']:.3f}s"
              f" | ws1/hf_fp32 {r['forward_backward_ratio_vs_hf_fp32']:.2f}x  (target <= 1.5x)")
        print(f"  decode {r['decode_tokens']} tok   ws1 {d['ws1_bf16']:.1f} tok/s | hf fp32 {d['hf_fp32']:.1f} tok/s"
              f" | ws1 speedup {r['decode_speedup_vs_hf_fp32']:.2f}x")
        gc.collect()
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "results": results}, indent=1))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
