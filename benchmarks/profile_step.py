"""The overhead per chain node of one step: counts and host time per node, before a GPU times it.

    python benchmarks/profile_step.py [--profile cpu_bf16] [--model tiny] [--phase train,decode,chain] [--json PATH]

Phases:

* ``train``  — the trainer step: teacher forcing (packed, every token's log-prob) of ``--seqs`` x ``--len`` tokens,
  loss, backward inside ``canonical_grads()``;
* ``decode`` — the rollout: ``generate()`` of ``--batch`` requests x ``--new`` tokens (prompts of ``--prompt``
  tokens); counts are also given per generated token; ``decode_static`` the same through a contiguous cache with
  the static decode step (what a GPU captures into CUDA graphs and replays: there, no Python runs per step);
* ``chain``  — the fixture chain of the chain benchmark (bench_triton.chain_phases, forward+backward): the
  launch-overhead probe.

Every op the step dispatches is attributed to the chain node running it — the node's public function
(forward), its autograd backward (``<node>.bwd``), its parameter gradient inside ``canonical_grads()``
(``<node>.dW``) — or to ``model`` (the glue between nodes: residual adds, row selection) / ``sampling`` /
``engine``. Per node: Python function calls, aten ops dispatched (``launch-like``: what is a kernel launch on
a GPU; views and bare allocations are listed apart), the kernel package's own calls, dtype casts, copies
(clone / copy_ / cat / index_select / contiguous), host syncs (what forces a device -> host round trip on a
GPU: ``_local_scalar_dense`` (item, int(t), bool(t)), nonzero, unique, equal, tolist/numpy/cpu of a tensor),
and host wall time (on a GPU, reads of host tensors are counted apart as ``host_reads``: nobody waits for
them; on a CPU every read is counted as a sync, an upper bound). The counts are what a GPU runs too (the
same Python, the same ops), so the table made on a CPU is the table of launches, copies and syncs a GPU
step pays; the times on a CPU are compute, on a GPU (``--profile cuda_bf16``) they are the host's launch
time per node (device time: ``--torch-profiler``, the kernels' CUDA time per node from torch.profiler).

Not a test and not a gate; its output is evidence for issue 25 (docs/model.md, "Overhead per node").
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib
import json
import os
import sys
import threading
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VIEWS = {
    "view",
    "_unsafe_view",
    "t",
    "transpose",
    "permute",
    "as_strided",
    "_reshape_alias",
    "reshape",
    "expand",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "detach",
    "alias",
    "split",
    "split_with_sizes",
    "unbind",
    "lift_fresh",
    "_to_copy_view",
    "view_as",
    "unflatten",
    "flatten",
    "narrow",
}
ALLOCS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
COPIES = {"clone", "copy_", "cat", "index_select", "contiguous", "_to_copy", "stack", "gather"}
SYNCS = {
    "_local_scalar_dense",
    "nonzero",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "_unique",
    "equal",
    "is_nonzero",
    "masked_select",
    "repeat_interleave",
}


class Counts:
    def __init__(self):
        self.by = collections.defaultdict(collections.Counter)  # label -> field -> n
        self.time = collections.Counter()  # label -> host seconds (exclusive)
        self.ops = collections.defaultdict(collections.Counter)  # label -> aten op -> n


_stack: list[str] = []
_lock = threading.Lock()


def _label() -> str:
    return _stack[-1] if _stack else "model"


class _Timer:
    """Exclusive host time per label (a nested label's time is not its parent's); with ``package``, also the
    kernel package's own call count (its self-report, ws1_ops.registry) attributed to the label that ran."""

    def __init__(self, counts: Counts, package=None):
        self.c, self.t0, self.package = counts, time.perf_counter(), package
        self.seen = package() if package else None

    def switch(self):
        now = time.perf_counter()
        self.c.time[_label()] += now - self.t0
        if self.package:
            cur = self.package()
            n = sum(cur.values()) - sum(self.seen.values())
            if n:
                self.c.by[_label()]["kernel_package_calls"] += n
                self.c.by[_label()]["launch_like"] += n
                for key, v in cur.items():
                    if v != self.seen.get(key, 0):
                        self.c.ops[_label()][key[0]] += v - self.seen.get(key, 0)
            self.seen = cur
        self.t0 = time.perf_counter()


@contextlib.contextmanager
def _scope(label: str, timer: _Timer | None):
    if timer:
        timer.switch()
    _stack.append(label)
    try:
        yield
    finally:
        if timer:
            timer.switch()
        _stack.pop()


class _Dispatch(TorchDispatchMode):
    """Counts every op the step dispatches under the current node label."""

    def __init__(self, counts: Counts, on_device: str):
        super().__init__()
        self.c, self.dev = counts, on_device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ns = func.namespace
        name = func._opname
        if ns != "aten" and name == "calls":  # the profiler's own read of the package's self-count
            return func(*args, **kwargs)
        lab = _label()
        by = self.c.by[lab]
        self.c.ops[lab][f"{ns}::{name}"] += 1
        if ns not in ("aten", "prim"):
            by["kernel_package_calls"] += 1
            by["launch_like"] += 1
        elif name in VIEWS:
            by["views"] += 1
        elif name in ALLOCS:
            by["allocs"] += 1
        else:
            by["launch_like"] += 1
        if ns == "aten":
            if name == "_to_copy":
                src = args[0]
                dst_dtype = kwargs.get("dtype", src.dtype)
                dst_dev = kwargs.get("device", src.device)
                if dst_dtype is not None and dst_dtype != src.dtype:
                    by["casts"] += 1
                if dst_dev is not None and torch.device(dst_dev).type == "cpu" and src.device.type != "cpu":
                    by["host_syncs"] += 1  # a device -> host copy
                elif dst_dev is not None and torch.device(dst_dev).type != src.device.type:
                    by["host_to_device"] += 1
            if name in COPIES:
                by["copies"] += 1
            if name in SYNCS:
                # on a GPU run, a read of a host tensor (row metadata) makes nobody wait: counted apart
                dev_arg = next((a for a in args if isinstance(a, torch.Tensor)), None)
                host_only = self.dev != "cpu" and dev_arg is not None and dev_arg.device.type == "cpu"
                by["host_reads" if host_only else "host_syncs"] += 1
        return func(*args, **kwargs)


def _patch(obj, attr, wrap):
    old = getattr(obj, attr)
    setattr(obj, attr, wrap(old))
    return (obj, attr, old)


@contextlib.contextmanager
def instrument(
    counts: Counts, on_device: str, python_calls: bool = True, family: str | None = None, count: bool = True
):
    """Label every node's forward, backward and parameter gradient; with ``count``, count ops, syncs, Python
    calls and the kernel package's calls (``family``'s self-report); without, only host time per label."""
    import ws1_ops
    from ws1_ops import grads, registry

    def package():  # the package's self-count, less its own counter reads (ws1_cpu::calls counts itself)
        return {k: v for k, v in (registry.package_counts(family) or {}).items() if not k[0].endswith("::calls")}

    package = package if count and family else None
    timer = _Timer(counts, package)
    undo = []
    nodes = list(ws1_ops.REQUIRED_NODES)
    for node in nodes:
        mod = importlib.import_module(f"ws1_ops.ops.{node}")

        def fwd(old, node=node):
            def run(*a, **k):
                with _scope(node, timer):
                    return old(*a, **k)

            return run

        undo.append(_patch(ws1_ops, node, fwd))
        undo.append(_patch(mod, node, fwd))
        for cls in [
            v
            for v in vars(mod).values()
            if isinstance(v, type) and issubclass(v, torch.autograd.Function) and "backward" in vars(v)
        ]:

            def bwd(old, node=node):
                def run(ctx, *a):
                    op = getattr(getattr(ctx, "k", None), "op", None) or getattr(ctx, "op", None) or node
                    with _scope(f"{op}.bwd", timer):
                        return old(ctx, *a)

                return staticmethod(run)

            undo.append(_patch(cls, "backward", lambda old, b=bwd: b(old)))

    def finalize(old):
        def run(self):
            timer.switch()
            _stack.append("canonical_grads")
            depth = len(_stack)
            try:
                return old(self)
            finally:
                timer.switch()
                del _stack[depth - 1 :]

        return run

    def note(old):
        def run(k, direction, dev):
            # inside canonical_grads(): each parameter's reduction is "<op>.dW" until the next one
            if _stack and (_stack[-1] == "canonical_grads" or _stack[-1].endswith(".dW")):
                timer.switch()
                if _stack[-1].endswith(".dW"):
                    _stack.pop()
                _stack.append(f"{k.op}.dW")
            return old(k, direction, dev)

        return run

    undo.append(_patch(grads.CanonicalGrads, "finalize", finalize))
    undo.append(_patch(grads, "note", note))
    for meth in ("tolist", "numpy", "item"):

        def host(old, meth=meth):
            def run(self, *a, **k):
                if meth != "item":  # item() dispatches _local_scalar_dense (counted there)
                    counts.by[_label()]["host_syncs"] += 1
                    counts.ops[_label()][f"Tensor.{meth}"] += 1
                return old(self, *a, **k)

            return run

        if count:
            undo.append(_patch(torch.Tensor, meth, host))
    # the glue outside the nodes: the sampler, the engine's per-step work, the KV cache's bookkeeping
    for modname, fn, label in (
        ("ws1_qwen3.sampling", "sample", "sampling"),
        ("ws1_qwen3.generate", "sample_token", "sampling"),
        ("ws1_qwen3.engine", "Engine.sample", "sampling"),
        *[("ws1_kv.base", f"KVCache.{m}", "kv_cache") for m in ("reserve", "write", "gather", "commit")],
    ):
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        owner, _, fn = fn.rpartition(".")
        mod = getattr(mod, owner, None) if owner else mod
        if mod is not None and fn in vars(mod):

            def lab(old, label=label):
                def run(*a, **k):
                    with _scope(label, timer):
                        return old(*a, **k)

                return run

            undo.append(_patch(mod, fn, lab))

    def prof(frame, event, arg):
        if event == "call":
            counts.by[_label()]["python_calls"] += 1
        elif event == "c_call":
            counts.by[_label()]["builtin_calls"] += 1

    mode = _Dispatch(counts, on_device) if count else contextlib.nullcontext()
    base = len(_stack)
    try:
        with mode:
            timer.switch()
            if python_calls and count:
                sys.setprofile(prof)
            try:
                yield
            finally:
                sys.setprofile(None)
                timer.switch()
    finally:
        del _stack[base:]
        for obj, attr, old in reversed(undo):
            setattr(obj, attr, old)


# ---- the steps ---------------------------------------------------------------------------------------------


def _samples(n: int, length: int, vocab: int, seed: int = 0):
    import ws1_qwen3

    g = torch.Generator(device="cpu").manual_seed(seed)
    return [
        ws1_qwen3.Sample(i, tuple(torch.randint(vocab, (length,), generator=g, device="cpu").tolist()), 1)
        for i in range(n)
    ]


def train_step(model, samples):
    import ws1_ops
    import ws1_qwen3

    def run():
        model.zero_grad(set_to_none=True)
        tf = ws1_qwen3.teacher_forcing(model, samples, layout="packed", grad=True)
        with ws1_ops.canonical_grads():
            tf.loss.backward()

    return run


def decode_run(model, batch: int, prompt: int, new: int, **kw):
    import ws1_qwen3

    g = torch.Generator(device="cpu").manual_seed(1)
    reqs = [
        ws1_qwen3.Request(
            prompt=tuple(torch.randint(model.config.vocab_size, (prompt,), generator=g, device="cpu").tolist()),
            max_new_tokens=new,
            temperature=1.0,
            seed=i,
            request_id=f"r{i}",
        )
        for i in range(batch)
    ]

    def run():
        ws1_qwen3.generate(model, reqs, max_batch=batch, **kw)

    return run


def chain_run(model, dev):
    from bench_triton import chain_phases
    from plain_qwen3 import PlainQwen3

    import ws1_qwen3

    phases = chain_phases(model, PlainQwen3(model, device=dev), ws1_qwen3.fixture_samples(), dev)
    return dict((n, f) for n, f, _ in phases)["forward+backward"]


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def profile(fn, dev, family, python_calls=True) -> Counts:
    """Counts from one instrumented run; host times per label from another run with only the label timers
    (the counting itself, sys.setprofile above all, would dwarf the times)."""
    fn()  # warm-up (first-call compilation, caches)
    _sync(dev)
    c = Counts()
    with instrument(c, dev.type, python_calls, family, count=True):
        fn()
    _sync(dev)
    t = Counts()
    with instrument(t, dev.type, False, family, count=False):
        fn()
    _sync(dev)
    c.time = t.time
    return c


def host_time(fn, dev, reps=3) -> float:
    """Uninstrumented wall time of the step (median of reps), seconds."""
    ts = []
    for _ in range(reps):
        _sync(dev)
        t = time.perf_counter()
        fn()
        _sync(dev)
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


def device_time(fn, dev) -> dict[str, float]:
    """CUDA kernel time per node label (torch.profiler; labels as record_function ranges). GPU only."""
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as tprof

    c = Counts()
    ranges: list = []
    orig_scope = _scope

    @contextlib.contextmanager
    def scoped(label, timer):
        with orig_scope(label, timer), record_function(f"ws1node:{label}") as r:
            ranges.append(r)
            yield

    globals()["_scope"] = scoped
    try:
        with tprof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            with instrument(c, dev.type, python_calls=False, count=False):
                fn()
            _sync(dev)
    finally:
        globals()["_scope"] = orig_scope
    out: collections.Counter = collections.Counter()
    launches: collections.Counter = collections.Counter()

    def walk(ev, label):
        if ev.name.startswith("ws1node:"):
            label = ev.name[len("ws1node:") :]
        for k in getattr(ev, "kernels", []):
            out[label] += k.duration / 1e6
        if ev.name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"):
            launches[label] += 1
        for ch in ev.cpu_children:
            walk(ch, label)

    for ev in p.events():
        if ev.cpu_parent is None:
            walk(ev, "model")
    return {"device_s": dict(out), "launches": dict(launches)}


FIELDS = (
    "python_calls",
    "launch_like",
    "kernel_package_calls",
    "casts",
    "copies",
    "host_syncs",
    "host_reads",
    "host_to_device",
    "views",
    "allocs",
)


def table(name: str, c: Counts, per: int | None = None, per_what: str = "") -> dict:
    rows = sorted(c.by, key=lambda lab: (-c.time[lab], lab))
    tot = collections.Counter()
    for lab in rows:
        tot.update(c.by[lab])
    print(f"\n{name}: per node (host time exclusive; counts over the whole step)")
    hdr = f"  {'node':<26}" + "".join(f"{f.replace('_', ' ')[:11]:>12}" for f in FIELDS) + f"{'host ms':>10}"
    print(hdr)
    for lab in rows:
        print(f"  {lab:<26}" + "".join(f"{c.by[lab][f]:>12}" for f in FIELDS) + f"{c.time[lab] * 1e3:>10.2f}")
    print(f"  {'TOTAL':<26}" + "".join(f"{tot[f]:>12}" for f in FIELDS) + f"{sum(c.time.values()) * 1e3:>10.2f}")
    out = {
        "nodes": {lab: {**dict(c.by[lab]), "host_s": c.time[lab], "ops": dict(c.ops[lab])} for lab in rows},
        "total": {**dict(tot), "host_s": sum(c.time.values())},
    }
    if per:
        print(f"  per {per_what}: " + ", ".join(f"{f.replace('_', ' ')} {tot[f] / per:.2f}" for f in FIELDS if tot[f]))
        out["per"] = {"unit": per_what, "n": per, **{f: tot[f] / per for f in FIELDS}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="cpu_bf16")
    ap.add_argument("--model", default="tiny", help="a preset, or qwen3-8b-L<n> (8B shapes, n layers)")
    ap.add_argument("--phase", default="train,decode,chain")
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument(
        "--no-python-calls",
        dest="python_calls",
        action="store_false",
        help="skip the Python call count (sys.setprofile slows the host a lot)",
    )
    ap.add_argument("--torch-profiler", action="store_true", help="GPU: CUDA time and launches per node")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import ws1_accel
    import ws1_qwen3

    try:
        why = ws1_accel.unavailable_reason(args.profile)
    except Exception as exc:  # noqa: BLE001  an unknown profile: one line
        why = str(exc)
    if why:
        print(f"profile_step: {args.profile}: {why}", file=sys.stderr)
        return 2
    if args.model.startswith("qwen3-8b-L") and args.model not in ws1_qwen3.PRESETS:
        cfg = ws1_qwen3.preset("qwen3-8b").replace(
            num_hidden_layers=int(args.model[len("qwen3-8b-L") :]), name=args.model
        )
    else:
        cfg = ws1_qwen3.preset(args.model)
    model = ws1_qwen3.synthetic(cfg, args.profile)
    dev = model.device
    result = {
        "profile": args.profile,
        "model": cfg.name,
        "device": str(dev),
        "torch": torch.__version__,
        "git": os.popen("git rev-parse --short HEAD 2>/dev/null").read().strip(),
        "phases": {},
    }
    print(f"profile_step: {args.profile} on {dev}, model {cfg.name}, torch {torch.__version__}, {result['git']}")
    for phase in args.phase.split(","):
        if phase == "train":
            fn = train_step(model, _samples(args.seqs, args.len, cfg.vocab_size))
            name, per, what = f"train: {args.seqs} x {args.len} tokens, packed, fwd+bwd", args.seqs * args.len, "token"
        elif phase == "decode":
            fn = decode_run(model, args.batch, args.prompt, args.new)
            name, per, what = (
                f"decode: generate() {args.batch} requests, prompt {args.prompt}, {args.new} new tokens",
                args.batch * args.new,
                "generated token",
            )
        elif phase == "decode_static":
            fn = decode_run(model, args.batch, args.prompt, args.new, cache="contiguous", graphs=True)
            name, per, what = (
                f"decode_static: generate(cache='contiguous', graphs=True) {args.batch} requests, prompt "
                f"{args.prompt}, {args.new} new tokens (the CUDA-graph step, run directly here)",
                args.batch * args.new,
                "generated token",
            )
        elif phase == "chain":
            fn = chain_run(model, dev)
            name, per, what = "chain: fixture 4 x 20 right-padded, fwd+bwd", None, ""
        else:
            print(f"profile_step: unknown phase {phase!r}", file=sys.stderr)
            return 2
        c = profile(fn, dev, ws1_accel.family_of(args.profile), args.python_calls)
        res = table(name, c, per, what)
        res["step_s"] = host_time(fn, dev)
        print(f"  step wall time (uninstrumented, median of 3): {res['step_s'] * 1e3:.2f} ms")
        if args.torch_profiler and dev.type == "cuda":
            res["device"] = device_time(fn, dev)
        result["phases"][phase] = res
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
