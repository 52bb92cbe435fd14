"""The RL step and the rollout at the sizes RL runs, per GPU profile, side by side with plain PyTorch BF16 (issue 25).

Per profile (cuda_bf16, triton_cuda_bf16), one process, medians of ``--reps`` runs, the contenders alternating run by
run (CUDA events; the device synchronized around each timed run):

* ``train`` — the trainer step: teacher forcing forward+backward of 8 sequences x 2048 tokens (varlen, packed:
  lengths 1984..2176, 16384 tokens) through 8B shapes with 4 layers and the real 151936-token vocabulary head, the
  log-prob loss over every token after the first of each sequence, backward inside ``canonical_grads()`` — against
  the same model in plain PyTorch BF16 (benchmarks/plain_qwen3.py ``loss_packed``: F.linear (cuBLAS) on the packed
  rows, causal SDPA (flash) per sequence, FP32 ``log_softmax``). Target: time ratio ws1 / plain <= 1.3.
* ``decode`` — the rollout: 64 requests, 2048-token prompts, 256 new tokens each, temperature 1, through a
  contiguous KV cache (one cache for every run, so its CUDA-graph decode steps — where the profile's kernels can be
  captured — are made in the warm-up run and replayed in the timed ones), against plain PyTorch with the same
  cache layout (``PlainQwen3.generate``: slots of max_len rows read in place by SDPA, Gumbel-max with torch's
  generator, eager). Decode tokens/s (the tokens drawn after the
  prefill, over the decode phase's time) and end to end. Target: ws1 / plain decode tokens/s >= 0.7.
* ``chain`` — the fixture chain of bench_cuda / bench_triton (4 x 20 right-padded, qwen3-8b-L2, forward+backward):
  kept as the launch-overhead probe (no target here).

    python benchmarks/bench_rl.py [--profiles cuda_bf16,triton_cuda_bf16] [--only train,decode,chain] [--reps 5]
                                  [--json PATH]
    python benchmarks/bench_rl.py --cpu-logic       # the same code paths at tiny sizes on the CPU (cpu_bf16)

``--deadline-s S``: start no phase after S seconds. The JSON is rewritten after every phase (``complete`` false
until the last), so a run stopped by its caller's time limit keeps the phases it finished (harness.Run).

Without a CUDA device it prints one line and exits 2; ``--cpu-logic`` runs everything on the CPU at tiny sizes
(tiny model, 4 short sequences, 4 requests) with cpu_bf16 standing in for the GPU profiles and the static decode
step in place of the CUDA graph: it proves the plumbing, and its ratios mean nothing (marked, no MET/MISS).
Exit 1 when a phase failed (reported, never dropped).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

GPU_PROFILES = ("cuda_bf16", "triton_cuda_bf16")
PHASES = ("train", "decode", "chain")
TRAIN_TARGET, DECODE_TARGET = 1.3, 0.7


def sizes(cpu_logic: bool) -> dict:
    if cpu_logic:
        return {
            "preset": "tiny",
            "layers": None,
            "lengths": [20, 28, 16, 24],
            "batch": 4,
            "prompt": 12,
            "new": 6,
            "chain_preset": "tiny",
        }
    lengths = [1984, 2112, 2016, 2080, 2048, 2048, 1920, 2176]  # 8 x 2048 tokens, varlen
    return {
        "preset": "qwen3-8b",
        "layers": 4,
        "lengths": lengths,
        "batch": 64,
        "prompt": 2048,
        "new": 256,
        "chain_preset": "qwen3-8b-L2",
    }


def _config(sz: dict):
    import ws1_qwen3

    cfg = ws1_qwen3.preset(sz["preset"])
    if sz["layers"]:
        cfg = cfg.replace(num_hidden_layers=sz["layers"], name=f"{sz['preset']}-L{sz['layers']}")
    return cfg


class Timer:
    """Seconds of one run of fn: CUDA events around it on a GPU (device synchronized before and after)."""

    def __init__(self, dev: torch.device):
        self.cuda = dev.type == "cuda"

    def __call__(self, fn) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b) / 1e3
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t


def alternate(timer: Timer, fns: dict, reps: int) -> dict[str, list[float]]:
    for fn in fns.values():  # warm-up: compilation, graphs captured, allocator settled
        fn()
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            out[k].append(timer(fn))
    return out


# ---- the trainer step --------------------------------------------------------------------------------------


def train_case(model, plain, sz, dev, timer, reps) -> dict:
    import ws1_ops
    import ws1_qwen3

    g = torch.Generator(device="cpu").manual_seed(25)
    V = model.config.vocab_size
    toks = [torch.randint(V, (n,), generator=g, device="cpu").tolist() for n in sz["lengths"]]
    samples = [ws1_qwen3.Sample(i, tuple(t), 1) for i, t in enumerate(toks)]
    # plain: the same rows and targets (row p - 1 of each sequence predicts token p, p >= 1)
    ids = torch.tensor([t for ts in toks for t in ts], dtype=torch.int64, device="cpu").to(dev)
    rows, tgt, s = [], [], 0
    for ts in toks:
        rows += range(s, s + len(ts) - 1)
        tgt += ts[1:]
        s += len(ts)
    rows_d = torch.tensor(rows, dtype=torch.int64, device="cpu").to(dev)
    tgt_d = torch.tensor(tgt, dtype=torch.int64, device="cpu").to(dev)

    def ws1_step():
        model.zero_grad(set_to_none=True)
        tf = ws1_qwen3.teacher_forcing(model, samples, layout="packed", grad=True)
        with ws1_ops.canonical_grads():
            tf.loss.backward()

    def plain_step():
        plain.zero_grad(set_to_none=True)
        plain.loss_packed(ids, sz["lengths"], rows_d, tgt_d).backward()

    t = alternate(timer, {"ws1": ws1_step, "plain": plain_step}, reps)
    model.zero_grad(set_to_none=True)
    plain.zero_grad(set_to_none=True)
    ws1, ref = statistics.median(t["ws1"]), statistics.median(t["plain"])
    return {
        "case": "train",
        "tokens": sum(sz["lengths"]),
        "lm_head_rows": len(rows),
        "ws1_s": ws1,
        "plain_s": ref,
        "ws1_runs": t["ws1"],
        "plain_runs": t["plain"],
        "time_ratio": ws1 / ref,
    }


# ---- the rollout -----------------------------------------------------------------------------------------------


def decode_case(model, plain, sz, dev, timer, reps, graphs) -> dict:
    import ws1_qwen3

    g = torch.Generator(device="cpu").manual_seed(26)
    B, P, N = sz["batch"], sz["prompt"], sz["new"]
    prompts = torch.randint(model.config.vocab_size, (B, P), generator=g, device="cpu")
    reqs = [
        ws1_qwen3.Request(prompt=tuple(p), max_new_tokens=N, request_id=f"r{i}") for i, p in enumerate(prompts.tolist())
    ]
    prompts_d = prompts.to(dev)
    stats: list[dict] = []
    marks: list[list] = []

    # one contiguous cache for every run: its decode graphs are captured in the warm-up run and replayed after
    cache = model.new_cache("contiguous", max_seqs=B, max_len=P + N)

    def ws1_run():
        st: dict = {}
        ws1_qwen3.generate(model, reqs, max_batch=B, cache=cache, graphs=graphs, stats=st)
        stats.append(st)

    def plain_run():
        m: list = []
        plain.generate(prompts_d, N, marks=m)
        marks.append(m)

    t = alternate(timer, {"ws1": ws1_run, "plain": plain_run}, reps)
    st, mk = stats[1:], marks[1:]  # the warm-up run excluded

    def span(a, b):
        return a.elapsed_time(b) / 1e3 if dev.type == "cuda" else b - a

    dec_ws1 = statistics.median(s["decode_s"] for s in st)
    pre_ws1 = statistics.median(s["prefill_s"] for s in st)
    dec_plain = statistics.median(span(m[1], m[2]) for m in mk)
    pre_plain = statistics.median(span(m[0], m[1]) for m in mk)
    e2e_ws1, e2e_plain = statistics.median(t["ws1"]), statistics.median(t["plain"])
    drawn = B * (N - 1)  # tokens drawn after the prefill's first
    out = {
        "case": "decode",
        "batch": B,
        "prompt": P,
        "new_tokens": N,
        "graphs": st[-1]["graphs"],
        "buckets": st[-1]["buckets"],
        "host_syncs": st[-1]["host_syncs"],
        "decode_steps": st[-1]["decode_steps"],
        "graphs_made_in_timed_runs": sum(x["graphs_made"] for x in st),
        "ws1_prefill_s": pre_ws1,
        "ws1_decode_s": dec_ws1,
        "ws1_e2e_s": e2e_ws1,
        "plain_prefill_s": pre_plain,
        "plain_decode_s": dec_plain,
        "plain_e2e_s": e2e_plain,
        "ws1_decode_tok_s": drawn / dec_ws1,
        "plain_decode_tok_s": drawn / dec_plain,
        "ws1_e2e_tok_s": B * N / e2e_ws1,
        "plain_e2e_tok_s": B * N / e2e_plain,
    }
    out["decode_speed"] = out["ws1_decode_tok_s"] / out["plain_decode_tok_s"]
    out["e2e_speed"] = out["ws1_e2e_tok_s"] / out["plain_e2e_tok_s"]
    return out


# ---- the fixture chain -------------------------------------------------------------------------------------------


def chain_case(profile, sz, dev, timer, reps) -> dict:
    from bench_triton import chain_phases
    from plain_qwen3 import PlainQwen3

    import ws1_qwen3

    model = ws1_qwen3.synthetic(sz["chain_preset"], profile, device=dev)
    plain = PlainQwen3(model, device=dev)
    fns = {name: (a, b) for name, a, b in chain_phases(model, plain, ws1_qwen3.fixture_samples(), dev)}
    fwd, fb = fns["forward"], fns["forward+backward"]
    t = alternate(timer, {"ws1_fwd": fwd[0], "plain_fwd": fwd[1], "ws1_fb": fb[0], "plain_fb": fb[1]}, max(3, reps))
    m = {k: statistics.median(v) for k, v in t.items()}
    return {
        "case": "chain",
        "preset": sz["chain_preset"],
        **{f"{k}_s": v for k, v in m.items()},
        "forward_ratio": m["ws1_fwd"] / m["plain_fwd"],
        "forward_backward_ratio": m["ws1_fb"] / m["plain_fb"],
    }


# ---- main --------------------------------------------------------------------------------------------------------


def run_profile(profile: str, args, sz, dev, run: harness.Run) -> None:
    """Each phase of ``--only`` for one profile, as one group of ``run`` ("<profile>:<phase>"): a failed or cut-short
    phase is named in the run's errors, the others' rows are kept. The model is built once, by the first phase that
    needs it."""
    from plain_qwen3 import PlainQwen3

    import ws1_qwen3

    timer = Timer(dev)
    built: dict = {}

    def models():
        if "error" in built:
            raise RuntimeError(f"the model could not be built: {built['error']}")
        if "model" not in built:
            t0 = time.perf_counter()
            try:
                built["model"] = ws1_qwen3.synthetic(_config(sz), profile, device=dev)
                built["plain"] = PlainQwen3(built["model"], device=dev)
            except Exception as exc:
                built["error"] = f"{type(exc).__name__}: {exc}"
                raise
            print(f"[{profile}] {built['model'].config.name} built in {time.perf_counter() - t0:.1f} s", flush=True)
        return built["model"], built["plain"]

    graphs = True if args.cpu_logic else None  # on a GPU: the engine's default (graphs where they can be captured)

    def phase_rows(phase: str) -> list[dict]:
        if phase == "train":
            r = train_case(*models(), sz, dev, timer, args.reps)
            print(
                f"  train: {r['tokens']} tokens, ws1 {r['ws1_s'] * 1e3:.1f} ms, plain {r['plain_s'] * 1e3:.1f} ms, "
                f"ratio {r['time_ratio']:.3f}",
                flush=True,
            )
        elif phase == "decode":
            r = decode_case(*models(), sz, dev, timer, args.reps, graphs)
            print(
                f"  decode: B{r['batch']} P{r['prompt']} +{r['new_tokens']}, graphs {r['graphs']} {r['buckets']}, "
                f"{r['host_syncs']} host syncs / {r['decode_steps']} steps; "
                f"decode tok/s ws1 {r['ws1_decode_tok_s']:.0f} "
                f"plain {r['plain_decode_tok_s']:.0f} (x{r['decode_speed']:.3f}); end to end ws1 "
                f"{r['ws1_e2e_tok_s']:.0f} plain {r['plain_e2e_tok_s']:.0f}",
                flush=True,
            )
        else:
            r = chain_case(profile, sz, dev, timer, args.reps)
            print(
                f"  chain {r['preset']}: forward ws1 {r['ws1_fwd_s'] * 1e3:.2f} ms "
                f"plain {r['plain_fwd_s'] * 1e3:.2f} ms (x{r['forward_ratio']:.2f}); "
                f"fwd+bwd ws1 {r['ws1_fb_s'] * 1e3:.2f} ms plain {r['plain_fb_s'] * 1e3:.2f} ms "
                f"(x{r['forward_backward_ratio']:.2f})",
                flush=True,
            )
        r.update({"profile": profile, "logic_check_only": args.cpu_logic})
        return [r]

    for phase in args.only.split(","):
        run.group(f"{profile}:{phase}", lambda phase=phase: phase_rows(phase))
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def targets(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        if r["case"] == "train":
            out.append(
                {
                    "profile": r["profile"],
                    "target": f"trainer step time ratio <= {TRAIN_TARGET} vs plain PyTorch BF16",
                    "value": r["time_ratio"],
                    "met": None if r["logic_check_only"] else r["time_ratio"] <= TRAIN_TARGET,
                }
            )
        if r["case"] == "decode":
            out.append(
                {
                    "profile": r["profile"],
                    "target": f"rollout decode tokens/s >= {DECODE_TARGET}x plain PyTorch (same cache layout)",
                    "value": r["decode_speed"],
                    "met": None if r["logic_check_only"] else r["decode_speed"] >= DECODE_TARGET,
                }
            )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", default=",".join(GPU_PROFILES))
    ap.add_argument("--only", default="train,decode,chain")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None, help="write the results here (default: evidence/bench/rl.json)")
    ap.add_argument(
        "--cpu-logic", action="store_true", help="tiny sizes on the CPU, cpu_bf16: the plumbing, ratios meaningless"
    )
    harness.add_deadline(ap, "phase")
    args = ap.parse_args(argv)
    if harness.refuse_unknown("bench_rl", args.only, PHASES, "phase"):
        return 2
    if not args.cpu_logic and not torch.cuda.is_available():
        print(
            "bench_rl: no CUDA device on this host (the GPU profiles run on a GPU; --cpu-logic checks the plumbing)",
            file=sys.stderr,
        )
        return 2
    import ws1_accel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sz = sizes(args.cpu_logic)
    profiles = ["cpu_bf16"] if args.cpu_logic else args.profiles.split(",")
    host = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() and not args.cpu_logic else "cpu",
        "cpu_logic": args.cpu_logic,
        "sizes": sz,
    }
    print(
        f"bench_rl on {host['device']} (torch {host['torch']})"
        f"{' — CPU logic check: ratios mean nothing' if args.cpu_logic else ''}",
        flush=True,
    )
    path = args.json or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "evidence", "bench", "rl.json"
    )
    run = harness.Run(
        path,
        lambda rows, errors: {"host": host, "cases": rows, "targets": targets(rows), "errors": errors},
        args.deadline_s,
    )
    for profile in profiles:
        why = ws1_accel.unavailable_reason(profile)
        if why is None:
            from ws1_ops.registry import family_available

            why = family_available(ws1_accel.family_of(profile))
        if why:
            run.errors[profile] = f"not run: {why}"
            print(f"[{profile}] not run: {why}", flush=True)
            continue
        run_profile(profile, args, sz, ws1_accel.resolve_device(profile), run)
    for t in targets(run.rows):
        if t["met"] is None:
            print(
                f"  target n/a  [{t['profile']}] {t['target']}: {t['value']:.3f} (CPU logic check: ratio meaningless)"
            )
        else:
            print(f"  target {'MET ' if t['met'] else 'MISS'} [{t['profile']}] {t['target']}: {t['value']:.3f}")
    complete = run.finish()
    print(f"wrote {path}{'' if complete else ' (incomplete: see its errors)'}")
    return 1 if run.errors else 0


if __name__ == "__main__":
    sys.exit(main())
