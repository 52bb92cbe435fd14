"""Benchmark vLLM serving WS1's model (the ws1-vllm plugin on) against stock vLLM (plugin off), in one run.

Same checkpoint (synthetic weights of a ``ws1_qwen3`` preset, saved once to a temporary directory), same engine
settings, same token-id prompts. The plugin registers process-wide (``WS1_VLLM_PROFILE`` is read when vLLM starts),
so each contender is its own worker process holding its own in-process ``LLM`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``:
engine core and model in that process); this process drives both over pipes and interleaves their repetitions
(ws1, stock, ws1, stock, ...) after a warm-up, so background load hits them alike; medians.

Per model preset (``--models``, default ``tiny``), two batches of 64 requests, every request asking for
``logprobs=1`` (an RL rollout needs the sampled tokens' log-probs; with the plugin on they are WS1's
``batch_invariant_logp``, the log-probs its teacher forcing recomputes), temperature 1, unseeded,
``min_tokens = max_tokens`` (no tokenizer, no EOS: every request makes exactly its tokens):

* decode — prompts of ``--prompt-tokens`` (16) tokens, ``--decode-tokens`` N (32) new tokens each. The prefill step
  makes each request's first token; the N-1 steps after it are the decode. Decode tok/s = 64 x (N-1) / decode time,
  where the decode time is read from vLLM's own per-request step timestamps (``RequestOutput.metrics``, a
  ``RequestStateStats``, filled when the engine logs stats: ``disable_log_stats=False`` for both contenders):
  ``max(last_token_ts) - min(first_token_ts)`` over the batch, i.e. from the end of the prefill step to the end of
  the last decode step, as the engine core stamped them (``EngineCoreOutputs.timestamp``). That is the wall time of
  the N-1 decode iterations (scheduling, forward, logits, sampling, log-probs, and the frontend's handling of each
  step's outputs in between), measured in the same run. It is used instead of "generate time minus a prefill-only
  run's time": the difference of two separately timed runs carries the noise of both (on a shared CPU), and it
  costs a third timed batch per repetition.
* prefill — prompts of ``--prefill-tokens`` L (128) tokens, ``max_tokens=1``. Prefill tok/s = 64 x L / prefill time,
  the prefill time being ``max(first_token_ts) - min(scheduled_ts)`` (the scheduler's stamp of the step to its
  outputs' stamp: forward, the 64 last rows' logits, sampling, log-probs).
* end to end — 64 x N / the ``llm.generate`` wall time of the decode batch (request intake and output handling
  included); no target, printed for scale.

The step budget (``max_num_batched_tokens`` = 64 x the longer prompt) fits each batch's prefill in one step (checked
per repetition: one ``first_token_ts`` across the batch); prefix caching off (the same prompts every repetition
must be computed every time); ``enforce_eager=True``, ``block_size=32``, ``dtype=bfloat16``, ``seed=0``, the KV cache
sized for the batches (``VLLM_CPU_KVCACHE_SPACE``).

Decode's verdict is against issue target ws1 / stock decode tok/s >= 0.7. The target is stated for a GPU; on a CPU
the verdict is printed but labelled "GPU target, CPU measured". No target for prefill or end to end.

Before any ratio is printed the run checks that the contenders ran what they claim: the ws1 contender's
``ws1_vllm.provenance()`` (everything the plugin ran in its process) names the profile's declared kernel (the
manifest's, e.g. ``ws1_cpu::det_gemm``, ``ws1_cpu::attention``) for every node of the vLLM chain, and a
``ws1_ops.record()`` around its first (untimed) generate agrees; in the stock contender the plugin is inert and no
ws1 kernel ran (the same recorder empty). Otherwise the tok/s are printed, the ratios refused, and the exit code
is 1. The ISA path of the ws1 kernels is the kernel package's own count (``arch_key_of`` of the provenance), not a
guess from the CPU's flags.

    .venv-vllm/bin/python benchmarks/bench_vllm.py [--models tiny,qwen3-8b-L2] [--reps 5] [--warmup 1]
                                                   [--decode-tokens 32] [--prompt-tokens 16] [--prefill-tokens 128]
                                                   [--ws1-isa amx] [--json PATH]

Stock vLLM's BF16 GEMMs are oneDNN's, which take AMX where the CPU has it; the ws1 kernels' default path is
``avx512`` (the profile's bits) even there. ``--ws1-isa P`` sets ``WS1_CPU_ISA=P`` in the ws1 worker only (``amx``:
det_gemm / lm_head on AMX tiles, batch-invariant, bits of their own); the ISA line then shows the path taken.

Progress lines go to stderr; each worker's own output (vLLM's logs) to a log file whose tail is printed if the
worker fails. Exit 2 on bad input (an unknown preset, a preset the two workers cannot hold in memory together, vLLM
not importable: run ``bash ci/setup_vllm.sh``), 1 when a worker failed or a contender's kernels were not what it
claims, 0 otherwise. Time on 2 cores: ``tiny`` about 40 s with the defaults (its kernels are tiny: the ratios
measure each model's host cost per step, not its kernels); ``qwen3-8b-L2`` (1.6 B parameters, the 8B shapes with 2
layers, 3.3 GB of BF16 weights per worker) about 160 s with ``--reps 1 --warmup 0`` (30 s of it writing the
synthetic checkpoint), about 7 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import multiprocessing as mp
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import available_bytes  # noqa: E402

PROFILE = "cpu_bf16"
CONTENDERS = ("ws1", "stock")  # interleaved in this order; ratios ws1 / stock
BATCH = 64
DECODE_TARGET = 0.7
TARGET_WHERE = "GPU target, CPU measured"
METRICS = ("decode", "prefill", "end_to_end")
PROG = "bench_vllm"


def log(msg: str) -> None:
    from ws1_contract import progress

    progress.log(f"{PROG}: {msg}")


# ---- the worker: one contender, its own process and LLM -------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"


UNSET = ("WS1_VLLM_PROFILE", "WS1_VLLM_CANDIDATE", "WS1_CPU_ISA")  # a contender's own, never inherited


def contender_env(plugin: bool, kv_gib: int, ws1_isa: str | None) -> dict[str, str]:
    """What a worker sets before it imports vLLM (the plugin reads ``WS1_VLLM_PROFILE`` when vLLM loads its plugins):
    vLLM in that process, a KV cache of ``kv_gib`` GiB, its logs at ERROR; the plugin on (with ``WS1_CPU_ISA`` if
    ``--ws1-isa`` forces a path of the ws1 kernels) or off. Everything else is the same for both."""
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": str(kv_gib), "VLLM_LOGGING_LEVEL": "ERROR"}
    if plugin:
        env["WS1_VLLM_PROFILE"] = PROFILE
        if ws1_isa:
            env["WS1_CPU_ISA"] = ws1_isa
    return env


def _run_batch(llm, prompts: list[list[int]], new_tokens: int, record: bool = False) -> dict:
    """One ``llm.generate`` of the batch; its wall time and the engine's step stamps (module docstring)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    import ws1_ops

    params = SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, temperature=1.0, logprobs=1, detokenize=False)
    inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    gc.collect()
    rec = None
    t0 = time.perf_counter()
    if record:
        with ws1_ops.record() as rec:
            outs = llm.generate(inputs, params, use_tqdm=False)
    else:
        outs = llm.generate(inputs, params, use_tqdm=False)
    wall = time.perf_counter() - t0
    stats = [o.metrics for o in outs]
    if any(s is None for s in stats):
        raise RuntimeError("vLLM returned no RequestOutput.metrics (are the engine's stats off?)")
    short = [i for i, o in enumerate(outs) if len(o.outputs[0].token_ids) != new_tokens]
    no_lp = [i for i, o in enumerate(outs) if len(o.outputs[0].logprobs or []) != new_tokens]
    if short or no_lp:
        raise RuntimeError(f"requests {short or no_lp} did not return {new_tokens} tokens with their log-probs")
    first = [s.first_token_ts for s in stats]
    out = {
        "wall_s": wall,
        "prefill_s": max(first) - min(s.scheduled_ts for s in stats),
        "decode_s": max(s.last_token_ts for s in stats) - min(first),
        "prefill_steps": len(set(first)),
        "preemptions": sum(s.num_preemptions for s in stats),
    }
    if rec is not None:
        out["recorded"] = rec.summary()
    return out


def worker(name: str, env: dict, model_dir: str, engine_kw: dict, log_path: str, conn) -> None:
    """A contender's process: build the LLM, then answer the parent's commands until ``stop``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)  # vLLM's logs and warnings: to the log file, not between the parent's progress lines
    os.dup2(fd, 2)
    for k in UNSET:
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        import torch
        import vllm
        from vllm import LLM

        import ws1_vllm

        t0 = time.perf_counter()
        llm = LLM(
            model=model_dir,
            skip_tokenizer_init=True,
            dtype="bfloat16",
            enforce_eager=True,
            block_size=32,
            seed=0,
            **engine_kw,
        )
        conn.send(
            (
                "ok",
                {
                    "llm_s": time.perf_counter() - t0,
                    "vllm": vllm.__version__,
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "plugin": str(ws1_vllm.enabled()) if ws1_vllm.enabled() else None,
                    "pid": os.getpid(),
                },
            )
        )
        while True:
            cmd, arg = conn.recv()
            if cmd == "stop":
                return
            if cmd == "run":
                conn.send(("ok", _run_batch(llm, arg["prompts"], arg["new_tokens"], arg.get("record", False))))
            elif cmd == "provenance":
                conn.send(("ok", {"enabled": ws1_vllm.enabled() is not None, "provenance": ws1_vllm.provenance()}))
            else:
                raise ValueError(f"unknown command {cmd!r}")
    except BaseException as exc:  # noqa: BLE001 (any failure goes to the parent as one line)
        import traceback

        traceback.print_exc()
        conn.send(("error", _one_line(exc)))


class WorkerFailed(RuntimeError):
    pass


class Contender:
    """The parent's handle on one worker process."""

    def __init__(self, name: str, env: dict, model_dir: str, engine_kw: dict, log_dir: str):
        ctx = mp.get_context("spawn")  # a fresh interpreter: the environment is set before vLLM is imported
        self.name, self.log_path = name, os.path.join(log_dir, f"{name}.log")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=worker,
            args=(name, env, model_dir, engine_kw, self.log_path, child),
            name=f"bench_vllm-{name}",
            daemon=True,
        )
        self.proc.start()
        child.close()

    def _recv(self, what: str):
        while not self.conn.poll(0.5):
            if not self.proc.is_alive():
                raise WorkerFailed(f"{self.name} worker exited (code {self.proc.exitcode}) during {what}")
        try:
            kind, value = self.conn.recv()
        except EOFError:
            raise WorkerFailed(f"{self.name} worker closed its pipe during {what}") from None
        if kind == "error":
            raise WorkerFailed(f"{self.name} worker failed during {what}: {value}")
        return value

    def ready(self) -> dict:
        return self._recv("LLM()")

    def call(self, cmd: str, what: str, **arg):
        self.conn.send((cmd, arg))
        return self._recv(what)

    def log_tail(self, n: int = 15) -> str:
        try:
            return "".join(Path(self.log_path).read_text(errors="replace").splitlines(keepends=True)[-n:])
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(("stop", {}))
            except OSError:
                pass
            self.proc.join(30)
        if self.proc.is_alive():
            self.proc.terminate()  # this worker only (our child, by its handle)
            self.proc.join(10)


# ---- the parent ---------------------------------------------------------------------------------------------------


def host() -> dict:
    import torch

    import ws1_accel

    return {
        "cpu": ws1_accel.device_name("cpu"),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def shapes(args, config) -> dict:
    """The engine settings both contenders get, and the KV cache they need."""
    longest = max(args.prompt_tokens + args.decode_tokens, args.prefill_tokens + 1)
    max_model_len = -(-longest // 32) * 32
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2  # K and V, BF16
    kv_bytes = BATCH * max_model_len * per_token
    return {
        "engine": {
            "max_model_len": max_model_len,
            "max_num_seqs": BATCH,
            "max_num_batched_tokens": BATCH * max(args.prompt_tokens, args.prefill_tokens),
            "enable_chunked_prefill": False,
            "enable_prefix_caching": False,
            "disable_log_stats": False,
        },
        "kv_gib": max(1, math.ceil(2 * kv_bytes / 2**30)),
    }


def prompts(seed: int, vocab: int, n: int, length: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, min(vocab, 100_000)) for _ in range(length)] for _ in range(n)]


def check_kernels(ws1_rec: dict, ws1_prov: dict, stock_rec: dict, stock_prov: dict) -> list[str]:
    """What keeps the ratios from being printed: the ws1 contender did not run the profile's declared kernel for every
    node of vLLM's chain, or the stock contender ran any ws1 kernel."""
    from ws1_contract import load_manifest
    from ws1_matrix.vllm_gate import CHAIN

    manifest = load_manifest()
    problems = []
    for node in CHAIN:
        want = manifest.kernel_id(PROFILE, node)
        for where, summ in (("provenance()", ws1_prov["provenance"]), ("record() of its first generate", ws1_rec)):
            e = summ.get(node) or {}
            if e.get("kernel_ids") != [want] or e.get("variant"):
                problems.append(f"ws1: {node} in {where} ran {e.get('kernel_ids') or 'nothing'}, not {want}")
    if not ws1_prov["enabled"]:
        problems.append("ws1: the plugin is not enabled in its worker")
    if stock_prov["enabled"] or stock_prov["provenance"]:
        problems.append(f"stock: the plugin ran in its worker: {sorted(stock_prov['provenance'])}")
    if stock_rec:
        problems.append(f"stock: ws1 kernels ran inside vLLM: {sorted(stock_rec)}")
    return problems


def bench(name: str, args, tmp: str) -> dict:
    import ws1_qwen3
    from ws1_ops.registry import arch_key_of

    config = ws1_qwen3.preset(name)
    t0 = time.perf_counter()
    model_dir = os.path.join(tmp, name)
    model = ws1_qwen3.synthetic(name, PROFILE, seed=args.seed)
    ws1_qwen3.save_pretrained(model, model_dir)
    del model
    gc.collect()
    log(f"{name}: synthetic checkpoint, {config.n_parameters() / 1e6:.1f}M parameters, {time.perf_counter() - t0:.1f}s")
    sh = shapes(args, config)
    work = {
        "decode": {
            "prompts": prompts(args.seed, config.vocab_size, BATCH, args.prompt_tokens),
            "new_tokens": args.decode_tokens,
        },
        "prefill": {"prompts": prompts(args.seed + 1, config.vocab_size, BATCH, args.prefill_tokens), "new_tokens": 1},
    }
    env = {c: contender_env(c == "ws1", sh["kv_gib"], args.ws1_isa) for c in CONTENDERS}
    workers: dict[str, Contender] = {}
    out: dict = {
        "model": name,
        "params": config.n_parameters(),
        "settings": {
            **sh,
            "batch": BATCH,
            "prompt_tokens": args.prompt_tokens,
            "decode_tokens": args.decode_tokens,
            "prefill_tokens": args.prefill_tokens,
            "logprobs": 1,
            "temperature": 1.0,
            "reps": args.reps,
            "warmup": args.warmup,
            "seed": args.seed,
            "env": env,
        },
    }
    try:
        info = {}
        for c in CONTENDERS:  # one after the other: each LLM() start is timed alone
            log(f"{name}: {c}: starting LLM() (plugin {'on' if c == 'ws1' else 'off'}) in its worker process")
            workers[c] = Contender(c, env[c], model_dir, sh["engine"], tmp)
            info[c] = workers[c].ready()
            log(f"{name}: {c}: LLM() in {info[c]['llm_s']:.1f}s (pid {info[c]['pid']}, {info[c]['threads']} threads)")
        out["workers"] = info
        # the first (untimed) generate of each under ws1_ops.record(): what ran inside vLLM
        recorded = {}
        for c in CONTENDERS:
            recorded[c] = workers[c].call("run", f"{c} first generate", **work["decode"], record=True)["recorded"]
        for w in range(args.warmup):
            for metric in ("decode", "prefill"):
                for c in CONTENDERS:
                    workers[c].call("run", f"{c} warm-up", **work[metric])
            log(f"{name}: warm-up {w + 1}/{args.warmup} done")
        raw: dict = {m: {c: [] for c in CONTENDERS} for m in ("decode", "prefill")}
        for r in range(args.reps):
            for metric in ("decode", "prefill"):
                for c in CONTENDERS:
                    res = workers[c].call("run", f"{c} {metric} repetition {r + 1}", **work[metric])
                    raw[metric][c].append(res)
                    tps = tokens(metric, args) / res[f"{metric}_s"]
                    log(f"{name}: rep {r + 1}/{args.reps} {metric} {c}: {tps:.1f} tok/s, {res['wall_s']:.2f}s wall")
        prov = {c: workers[c].call("provenance", f"{c} provenance") for c in CONTENDERS}
    except WorkerFailed as exc:
        for c, w in workers.items():
            if not w.proc.is_alive() or c in str(exc):
                tail = w.log_tail()
                if tail:
                    print(f"--- {c} worker log ({w.log_path}), last lines:\n{tail}", file=sys.stderr)
        raise
    finally:
        for w in workers.values():
            w.close()
    out["raw"] = raw
    out.update(summarize(raw, args))
    out["ws1_isa"] = arch_key_of([prov["ws1"]["provenance"]])
    out["provenance"] = {c: prov[c]["provenance"] for c in CONTENDERS}
    out["recorded_first_generate"] = recorded
    out["problems"] = check_kernels(recorded["ws1"], prov["ws1"], recorded["stock"], prov["stock"])
    out["problems"] += [
        f"{c}: {m} repetition {i + 1} prefilled in {r['prefill_steps']} steps (one expected)"
        for m in raw
        for c in CONTENDERS
        for i, r in enumerate(raw[m][c])
        if r["prefill_steps"] != 1
    ]
    return out


def tokens(metric: str, args) -> int:
    if metric == "decode":
        return BATCH * (args.decode_tokens - 1)
    if metric == "prefill":
        return BATCH * args.prefill_tokens
    return BATCH * args.decode_tokens


def summarize(raw: dict, args) -> dict:
    """Median seconds and tok/s per metric and contender; ws1 / stock tok/s."""
    times = {
        "decode": {c: [r["decode_s"] for r in raw["decode"][c]] for c in CONTENDERS},
        "prefill": {c: [r["prefill_s"] for r in raw["prefill"][c]] for c in CONTENDERS},
        "end_to_end": {c: [r["wall_s"] for r in raw["decode"][c]] for c in CONTENDERS},
    }
    med = {m: {c: statistics.median(v) for c, v in t.items()} for m, t in times.items()}
    tps = {m: {c: tokens(m, args) / s for c, s in t.items()} for m, t in med.items()}
    return {
        "tokens": {m: tokens(m, args) for m in METRICS},
        "median_s": med,
        "tok_per_s": tps,
        "ratio": {m: tps[m]["ws1"] / tps[m]["stock"] for m in METRICS},
    }


def print_result(r: dict, args) -> None:
    s = r["settings"]
    print(
        f"\n{r['model']} ({r['params'] / 1e6:.1f}M params): {BATCH} requests, logprobs=1, temperature 1; "
        f"{args.reps} reps interleaved after {args.warmup} warm-up, medians"
    )
    rows = {
        "decode": f"decode ({s['prompt_tokens']}+{s['decode_tokens']} tok)",
        "prefill": f"prefill ({s['prefill_tokens']} tok)",
        "end_to_end": f"end to end ({s['prompt_tokens']}+{s['decode_tokens']})",
    }
    print(f"  {'metric':<26}{'ws1 tok/s':>12}{'stock tok/s':>13}{'ws1/stock':>11}  target")
    for m in METRICS:
        t = r["tok_per_s"][m]
        if r["problems"]:
            ratio, verdict = f"{'refused':>11}", "-"
        else:
            ratio = f"{r['ratio'][m]:10.2f}x"
            verdict = "-"
            if m == "decode":
                met = "MET" if r["ratio"][m] >= DECODE_TARGET else "MISS"
                verdict = f">= {DECODE_TARGET}x: {met} ({TARGET_WHERE})"
        print(f"  {rows[m]:<26}{t['ws1']:12.1f}{t['stock']:13.1f}{ratio}  {verdict}")
    if r["problems"]:
        print("  ratios refused: the contenders did not run what they claim:")
        for p in r["problems"]:
            print(f"    {p}")
    else:
        prov = r["provenance"]["ws1"]
        print(
            f"  ws1 ran WS1's kernels for all {len(prov)} nodes (det_gemm {prov['det_gemm']['kernel_ids'][0]}, "
            f"attention {prov['attention']['kernel_ids'][0]}; ISA path {r['ws1_isa']}); stock ran no ws1 kernel"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny", help="comma list of ws1_qwen3 presets (tiny, qwen3-8b-L2, ...)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per metric and contender (medians)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds of both batches before the repetitions")
    ap.add_argument("--decode-tokens", type=int, default=32, help="new tokens per request of the decode batch")
    ap.add_argument("--prompt-tokens", type=int, default=16, help="prompt tokens per request of the decode batch")
    ap.add_argument("--prefill-tokens", type=int, default=128, help="prompt tokens per request of the prefill batch")
    ap.add_argument("--seed", type=int, default=0, help="the synthetic weights' and the prompts' seed")
    ap.add_argument(
        "--ws1-isa",
        default=None,
        help="force the ws1 kernels' path in the ws1 worker (WS1_CPU_ISA, e.g. amx: its own bits); default theirs",
    )
    ap.add_argument("--json", default=None, help="write every median, repetition, setting and the host here")
    args = ap.parse_args(argv)

    import ws1_qwen3

    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in ws1_qwen3.PRESETS]
    if unknown or not models:
        print(
            f"{PROG}: unknown model preset(s) {unknown or models}; expected {sorted(ws1_qwen3.PRESETS)}",
            file=sys.stderr,
        )
        return 2
    small = [
        k
        for k in ("reps", "decode_tokens", "prompt_tokens", "prefill_tokens")
        if getattr(args, k) < (2 if k == "decode_tokens" else 1)
    ]
    if small or args.warmup < 0:
        print(f"{PROG}: --{(small or ['warmup'])[0].replace('_', '-')} is too small", file=sys.stderr)
        return 2
    for m in models:
        need = 2 * 2 * ws1_qwen3.preset(m).n_parameters() * 1.25  # two workers, BF16 weights, 25% slack
        if need > available_bytes():
            print(
                f"{PROG}: {m} needs ~{need / 2**30:.0f} GiB for its two workers, "
                f"{available_bytes() / 2**30:.0f} GiB available",
                file=sys.stderr,
            )
            return 2
    if importlib.util.find_spec("vllm") is None:
        print(f"{PROG}: vllm is not importable in {sys.executable}: run `bash ci/setup_vllm.sh`", file=sys.stderr)
        return 2
    from ws1_matrix.vllm_gate import why_not

    why, _ = why_not(PROFILE)  # the profile's device, and a vLLM built for it
    if why is not None:
        print(f"{PROG}: {why}", file=sys.stderr)
        return 2
    import vllm

    h = host()
    h["vllm"] = vllm.__version__
    print(
        f"host: {h['cpu']}, {h['cores_usable']}/{h['cores']} cores usable; vllm {h['vllm']}, torch {h['torch']}, "
        f"python {h['python']}; profile {PROFILE}"
    )
    results, code = [], 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ws1-bench-vllm-") as tmp:
        for name in models:
            try:
                r = bench(name, args, tmp)
            except WorkerFailed as exc:
                print(f"{PROG}: {name}: {exc}", file=sys.stderr)
                results.append({"model": name, "error": str(exc)})
                code = 1
                continue
            results.append(r)
            print_result(r, args)
            if r["problems"]:
                code = 1
    print(f"\nwall {time.perf_counter() - t0:.0f}s")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "benchmark": PROG,
                    "profile": PROFILE,
                    "host": h,
                    "decode_target": DECODE_TARGET,
                    "target_note": TARGET_WHERE,
                    "results": results,
                },
                indent=1,
            )
        )
        print(f"wrote {path}")
    return code


if __name__ == "__main__":
    sys.exit(main())
