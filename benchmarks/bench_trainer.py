"""One trainer step of a transformers Qwen3ForCausalLM patched by ws1_qwen3.apply_ws1 (cpu_bf16), against the stock
transformers model a user would train instead, in BF16 and in FP32, side by side in one run on the CPU.

A trainer step is what verl / TRL run per micro-batch: the forward of a left-padded batch of B sequences (prompt +
completion, distinct lengths, an attention_mask), the per-token log-probs of the completion tokens, the loss
``-(logp * completion_mask).sum() / n_tokens``, and its backward to every parameter (the gradients zeroed first,
as the optimizer's zero_grad does). Rows, on the same weights and the same batch:

* ``ws1`` — ``transformers.Qwen3ForCausalLM.from_pretrained(dir, dtype=torch.bfloat16)`` patched in place by
  ``ws1_qwen3.apply_ws1(model, "cpu_bf16")``; log-probs from ``ws1_qwen3.token_logprobs(model, input_ids, mask,
  completion_mask=...)`` (WS1's lm_head only on the rows that predict a completion token); backward inside
  ``ws1_ops.canonical_grads()``.
* ``stock_bf16`` — the unpatched model loaded in BF16: ``model(input_ids, attention_mask=mask).logits``, shifted by
  one, ``torch.log_softmax(logits.float(), -1).gather(...)`` (what TRL's selective_log_softmax and verl's
  logprobs_from_logits compute), a plain backward. ``--stock-logits completion`` passes TRL's ``logits_to_keep``
  (the last C + 1 positions, C the longest completion) instead of taking every position's logits (``all``, the
  default: verl's way, and the call a user writes first).
* ``stock_fp32`` — the same, loaded in FP32 (the user who wants accuracy).

The checkpoint is ``ws1_qwen3.synthetic(preset, "cpu_bf16")`` written by ``ws1_qwen3.save_pretrained`` to a temp
dir and loaded by all three rows (nothing comes from a model hub). Shapes (``--shapes``): ``tiny`` (the smoke
size) and ``qwen3-0.6b-L2`` (Qwen3-0.6B's shapes — its 151936-token tied vocabulary head included — cut to 2
layers), B = 4 sequences of 160..256 tokens.

Timing: one warm-up step of every row (its loss must be finite: a row whose step fails is reported and dropped, the
others go on), then ``--reps`` steps interleaved row by row (a, b, c, a, b, c, ...), so background load hits them
alike; medians. Per shape: median ms per row, real (non-pad) tokens per second, and the ratios ws1 / stock_bf16
and ws1 / stock_fp32 of the median times — a ratio > 1 means WS1 is slower, < 1 faster. The host's 1-minute load
average before and after each shape is printed and kept (another job's load widens the spread between a row's
fastest and median step). Not timed, from the last step of each row: its loss, and the largest |difference| of its
completion log-probs from stock_fp32's. The ISA path WS1's kernels took is their own report (ws1_ops.record:
arch_key), not a guess from the CPU's flags; ``WS1_CPU_ISA=amx`` in the environment asks for their AMX path
(opt-in, kernels-cpu/README.md).

    python benchmarks/bench_trainer.py [--shapes tiny,qwen3-0.6b-L2] [--reps 5] [--threads N]
                                       [--stock-logits all|completion] [--json PATH] [--deadline-s S]

The JSON record (default evidence/bench/trainer.json) is rewritten after every shape (harness.Run: ``complete``
false until the last). Exit 1 when a shape or a row failed (named in the record's errors), 2 on an unknown shape.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PROFILE = "cpu_bf16"
STOCK_ATTN = "sdpa"  # the stock rows' attention (transformers' default on CPU)
ROWS = ("ws1", "stock_bf16", "stock_fp32")
CONTENDERS = ("stock_bf16", "stock_fp32")  # the ratios: ws1 time / each of these
# per shape: the preset, its layer count cut to (None: the preset's), each sequence's prompt and completion lengths
SHAPES = {
    "tiny": {"preset": "tiny", "layers": None, "prompts": [12, 9, 14, 7], "completions": [8, 12, 5, 10]},
    "qwen3-0.6b-L2": {
        "preset": "qwen3-0.6b",
        "layers": 2,
        "prompts": [100, 72, 88, 60],
        "completions": [156, 140, 120, 100],  # 256, 212, 208, 160 tokens
    },
}


def config_of(shape: str):
    import ws1_qwen3

    sz = SHAPES[shape]
    cfg = ws1_qwen3.preset(sz["preset"])  # an attrs Qwen3Config: .replace() evolves it
    return cfg.replace(num_hidden_layers=sz["layers"], name=shape) if sz["layers"] else cfg


def make_batch(sz: dict, vocab: int, pad_id: int):
    """input_ids [B, S] (each sequence right-aligned, pads on the left), attention_mask [B, S] and completion_mask
    [B, S] (1 on the completion tokens), int64 on the host; random tokens, seeded."""
    g = torch.Generator(device="cpu").manual_seed(27)
    lengths = [p + c for p, c in zip(sz["prompts"], sz["completions"])]
    B, S = len(lengths), max(lengths)
    ids = torch.full((B, S), pad_id, dtype=torch.int64, device="cpu")
    mask = torch.zeros(B, S, dtype=torch.int64, device="cpu")
    completion = torch.zeros(B, S, dtype=torch.int64, device="cpu")
    for b, (p, c) in enumerate(zip(sz["prompts"], sz["completions"])):
        ids[b, S - p - c :] = torch.randint(vocab, (p + c,), generator=g, device="cpu")
        mask[b, S - p - c :] = 1
        completion[b, S - c :] = 1
    return ids, mask, completion


def finite(row: str, loss: torch.Tensor) -> None:
    if not bool(torch.isfinite(loss)):
        raise FloatingPointError(f"{row}: the loss is {float(loss)}, not finite")


def ws1_step(model, ids, mask, completion, n: int):
    """The trainer step on the patched model: (loss, the completion tokens' log-probs in row-major order)."""
    import ws1_ops
    import ws1_qwen3

    model.zero_grad(set_to_none=True)
    logp = ws1_qwen3.token_logprobs(model, ids, mask, completion_mask=completion)  # FP32 [B, S], 0 where unscored
    loss = -(logp * completion).sum() / n
    with ws1_ops.canonical_grads():
        loss.backward()
    return loss.detach(), logp.detach()[completion.bool()]


def stock_step(model, ids, mask, completion, n: int, keep: int | None):
    """The trainer step on a stock model: logits of every position (``keep`` None) or of the last ``keep`` + 1
    (TRL's logits_to_keep), shifted by one (position t predicts token t + 1), FP32 log_softmax, the targets'
    entries gathered."""
    model.zero_grad(set_to_none=True)
    if keep is None:
        logits = model(ids, attention_mask=mask).logits[:, :-1]
        targets, scored = ids[:, 1:], completion[:, 1:]
    else:
        logits = model(ids, attention_mask=mask, logits_to_keep=keep + 1).logits[:, :-1]
        targets, scored = ids[:, -keep:], completion[:, -keep:]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None])[..., 0]
    loss = -(logp * scored).sum() / n
    loss.backward()
    return loss.detach(), logp.detach()[scored.bool()]


def interleaved(fns: dict, reps: int, errors: dict, shape: str):
    """One warm-up step of every row (a row that raises, or whose loss is not finite, is named in ``errors`` and
    left out), then ``reps`` steps row by row. Returns (seconds per run by row, each row's last (loss, logp))."""
    last: dict = {}
    for row, fn in fns.items():
        try:
            last[row] = fn()
            finite(row, last[row][0])
        except Exception as exc:  # noqa: BLE001  a failed row is reported, never silently dropped
            last.pop(row, None)
            errors[f"{shape}:{row}"] = f"{type(exc).__name__}: {exc}"
            print(f"  {shape}: row {row} FAILED its warm-up step: {errors[f'{shape}:{row}']}", flush=True)
    times: dict[str, list[float]] = {row: [] for row in last}
    for _ in range(reps):
        for row in list(times):
            gc.collect()
            t = time.perf_counter()
            try:
                out = fns[row]()
                finite(row, out[0])
            except Exception as exc:  # noqa: BLE001
                errors[f"{shape}:{row}"] = f"{type(exc).__name__} in a timed step: {exc}"
                print(f"  {shape}: row {row} FAILED: {errors[f'{shape}:{row}']}", flush=True)
                del times[row], last[row]
                continue
            times[row].append(time.perf_counter() - t)
            last[row] = out
    return times, last


def bench_shape(shape: str, args, errors: dict) -> list[dict]:
    import transformers

    import ws1_ops
    import ws1_qwen3

    transformers.utils.logging.disable_progress_bar()  # its weight-loading bars, three per shape
    sz = SHAPES[shape]
    cfg = config_of(shape)
    ids, mask, completion = make_batch(sz, cfg.vocab_size, cfg.pad_id)
    n = int(completion.sum())
    keep = max(sz["completions"]) if args.stock_logits == "completion" else None
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix=f"bench_trainer_{shape}_") as d:
        t0 = time.perf_counter()
        ours = ws1_qwen3.synthetic(cfg, PROFILE)
        ws1_qwen3.save_pretrained(ours, d)
        del ours
        gc.collect()

        def load(dtype):
            # sdpa named, not left to transformers' default: the row's attention is then known, not read back
            return transformers.Qwen3ForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation=STOCK_ATTN).train()

        models = {
            "ws1": ws1_qwen3.apply_ws1(load(torch.bfloat16), PROFILE),
            "stock_bf16": load(torch.bfloat16),
            "stock_fp32": load(torch.float32),
        }
        print(f"[{shape}] checkpoint written and loaded 3x in {time.perf_counter() - t0:.1f} s", flush=True)
        isa: dict = {}

        def ws1_row():  # the warm-up step records the ISA path the kernels took; the timed steps run unrecorded
            if isa:
                return ws1_step(models["ws1"], ids, mask, completion, n)
            with ws1_ops.record() as rec:
                out = ws1_step(models["ws1"], ids, mask, completion, n)
            isa["arch"] = rec.arch_key()
            return out

        fns = {
            "ws1": ws1_row,
            "stock_bf16": lambda: stock_step(models["stock_bf16"], ids, mask, completion, n, keep),
            "stock_fp32": lambda: stock_step(models["stock_fp32"], ids, mask, completion, n, keep),
        }
        times, last = interleaved(fns, args.reps, errors, shape)
        attn = STOCK_ATTN
        models.clear()  # the weights and their gradients go before the next shape's are built
        gc.collect()

    tokens = int(mask.sum())
    med = {row: statistics.median(t) for row, t in times.items() if t}
    ref = last.get("stock_fp32")
    r = {
        "shape": shape,
        "preset": sz["preset"],
        "layers": cfg.num_hidden_layers,
        "params": cfg.n_parameters(),
        "vocab": cfg.vocab_size,
        "tied": cfg.tie_word_embeddings,
        "batch": ids.shape[0],
        "seq_len": ids.shape[1],
        "lengths": [p + c for p, c in zip(sz["prompts"], sz["completions"])],
        "tokens": tokens,
        "completion_tokens": n,
        "stock_logits": args.stock_logits,
        "stock_attn_implementation": attn,
        "ws1_isa": isa.get("arch"),
        "reps": args.reps,
        "load_avg_1min": [load_before, os.getloadavg()[0]],  # the host's load before and after: how noisy
        "median_ms": {row: v * 1e3 for row, v in med.items()},
        "runs_ms": {row: [v * 1e3 for v in t] for row, t in times.items()},
        "tokens_per_s": {row: tokens / v for row, v in med.items()},
        "ratios": {f"ws1/{c}": med["ws1"] / med[c] for c in CONTENDERS if "ws1" in med and c in med},
        "loss": {row: float(out[0]) for row, out in last.items()},
        "max_abs_dlogp_vs_fp32": {
            row: float((out[1] - ref[1]).abs().max()) for row, out in last.items() if ref is not None
        },
    }
    print_shape(r)
    return [r]


def print_shape(r: dict) -> None:
    print(
        f"\n{r['shape']} ({r['params'] / 1e6:.1f}M params, {r['layers']} layers, vocab {r['vocab']}"
        f"{' tied' if r['tied'] else ''}); B={r['batch']} left-padded to S={r['seq_len']} "
        f"(lengths {r['lengths']}): {r['tokens']} tokens, {r['completion_tokens']} scored; "
        f"ws1 ISA {r['ws1_isa']}; stock: {r['stock_attn_implementation']} attention, logits of "
        f"{'every position' if r['stock_logits'] == 'all' else 'the completion positions (logits_to_keep)'}"
    )
    print(
        f"  host load (1-min average) {r['load_avg_1min'][0]:.2f} before, {r['load_avg_1min'][1]:.2f} after "
        f"(the {r['reps']} steps' spread: min vs median below)"
    )
    print(f"  {'row':<12}{'median ms':>12}{'min ms':>12}{'tokens/s':>12}{'loss':>12}{'max|dlogp| vs fp32':>21}")
    for row in ROWS:
        if row not in r["median_ms"]:
            print(f"  {row:<12}{'failed':>12}")
            continue
        print(
            f"  {row:<12}{r['median_ms'][row]:12.1f}{min(r['runs_ms'][row]):12.1f}{r['tokens_per_s'][row]:12.0f}"
            f"{r['loss'][row]:12.5f}{r['max_abs_dlogp_vs_fp32'].get(row, float('nan')):21.3e}"
        )
    print("  " + "   ".join(f"{k} = {v:.2f}x" for k, v in r["ratios"].items()), flush=True)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="tiny", help=f"comma list of {', '.join(SHAPES)}")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument(
        "--stock-logits",
        choices=("all", "completion"),
        default="all",
        help="the stock rows' logits: every position (verl) or the completion's (TRL's logits_to_keep)",
    )
    ap.add_argument("--json", default=None, help="write the record here (default: evidence/bench/trainer.json)")
    harness.add_deadline(ap, "shape")
    args = ap.parse_args(argv)
    if harness.refuse_unknown("bench_trainer", args.shapes, SHAPES, "shape"):
        return 2
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    host = {
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "profile": PROFILE,
        "ratio": "ws1 median time / contender median time: > 1 means WS1 is slower",
    }
    print(
        f"bench_trainer on {host['cpu']} ({host['cpu_count']} CPUs), torch {host['torch']} with {host['threads']} "
        f"threads, transformers {host['transformers']}; WS1 profile {PROFILE}"
    )
    print(
        f"one trainer step = forward + completion log-probs + loss + backward; medians of {args.reps} interleaved "
        "steps after a warm-up; ratio = ws1 time / stock time (> 1: WS1 slower, < 1: WS1 faster)",
        flush=True,
    )
    path = args.json or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "evidence", "bench", "trainer.json"
    )
    run = harness.Run(path, lambda rows, errors: {"host": host, "cases": rows, "errors": errors}, args.deadline_s)
    for shape in args.shapes.split(","):
        run.group(shape, lambda shape=shape: bench_shape(shape, args, run.errors))
    complete = run.finish()
    print(f"\nwrote {path}{'' if complete else ' (incomplete: see its errors)'}")
    return 1 if run.errors else 0


if __name__ == "__main__":
    sys.exit(main())
