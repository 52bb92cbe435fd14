"""``python -m ws1_matrix triton-aot`` — the Triton kernels through the real GPU compiler, no GPU needed.

    python -m ws1_matrix triton-aot [--arch 90,80] [--shapes test,qwen3-8b] [--kernels SUBSTR,...]
                                    [--no-execute] [--jobs N] [--cache-dir DIR] [--evidence-dir DIR] [--json]

1. **Record** (a child process under ``TRITON_INTERPRET=1``): every node of the triton family runs
   forward and backward through the public ``ws1_ops`` ops (autograd, parameter gradients in canonical
   row order), at the interpreter tests' shapes (executed, unless ``--no-execute``) and at Qwen3-8B's
   shapes (hidden 4096, intermediate 12288, 32/8 heads of 128, vocab 151936; a few rows; recorded, not
   executed: the interpreter would need hours; a launch's specialization depends on dtypes, integer
   values and alignment, never on the data). Each ``kernel[grid](...)`` launch is recorded as its kernel id, its
   arguments (tensor dtype and 16-byte alignment, integers, floats) and its keyword arguments
   (constexprs, num_warps, num_stages, enable_fp_fusion: ``_common.counted.options``).
2. **Compile** (this process, kernels as ``JITFunction``): each launch is specialized by Triton's own
   binder for the target, exactly as ``kernel[grid](...)`` would on that GPU (signature, integer
   specialization and divisibility, constexprs, options), the distinct configurations are compiled with
   ``triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))`` and ptxas from Triton's own
   bundle (``-v``), and the report is parsed: registers, spill stores/loads, shared memory, MMA
   instructions (``mma.sync`` / ``wgmma``) and FMAs in the PTX.
3. **Judge**: red on a compile error, on any spill in a det_gemm, lm_head or attention kernel, on an
   FMA the docs do not promise (a kernel compiled with fusion on; an ``fma.rn.f32`` outside
   ``_common.EXPLICIT_FMA``; any ``fma.rn.f64``), or on a promised FMA missing; on an sm_90a
   configuration of a GEMM or attention matrix kernel (``WGMMA_KERNELS``) without ``wgmma.mma_async``
   in its PTX and HGMMA in its SASS (cuobjdump), with any ``mma.sync`` / HMMA, or whose wgmma ptxas
   serialized; on a launch with TMA descriptors compiled without TMA loads (``cp.async.bulk.tensor``,
   UTMALDG); and when the configurations a kernel chooses by the batch shape (GEMM tiers, attention
   layouts) issue different wgmma shapes (``SAME_WGMMA_SHAPES``).

Launches are recorded once per configuration table (``_common.INTERPRET_ARCH``: the Hopper table
for --arch 90, the sm_80 one for 80 and any other) and compiled for the arch whose table made them.

``DOT_F32``: the interpreter upcasts every dot operand (``_common.dot_f32`` is True there, and only
there); a recorded launch is replayed with the GPU's value, False.

Writes ``<evidence-dir>/build/triton_aot.json`` and ``triton_aot.md``. Exit 0 green, 1 red, 2 triton
absent or bad arguments.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARCHS = (90, 80)
SHAPES = ("test", "qwen3-8b")
# kernels that must not spill (the GEMMs and attention: the hot loops)
NO_SPILL_MODULES = ("det_gemm", "lm_head", "attention")
# kernels whose every sm_90a configuration must run its dots as wgmma (PTX wgmma.mma_async, SASS HGMMA,
# no mma.sync, not serialized by ptxas): the GEMMs and attention's matrix kernels (issue 24)
WGMMA_KERNELS = (
    "det_gemm_fwd_kernel",
    "lm_head_fwd_kernel",
    "det_gemm_bwd_dx_kernel",
    "det_gemm_bwd_dw_kernel",
    "attention_fwd_kernel",
    "attention_bwd_dq_kernel",
    "attention_bwd_dkdv_kernel",
)
QWEN3_8B = dict(hidden=4096, inter=12288, heads=32, kv_heads=8, head_dim=128, vocab=151936)

# ---- 1. recording (child process, TRITON_INTERPRET=1) ----------------------------------------------


def _describe(a):
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    if isinstance(a, torch.Tensor):
        return {"tensor": str(a.dtype).removeprefix("torch."), "align16": a.data_ptr() % 16 == 0}
    if isinstance(a, TensorDescriptor):
        return {
            "tensordesc": str(a.base.dtype).removeprefix("torch."),
            "align16": a.base.data_ptr() % 16 == 0,
            "shape": [int(n) for n in a.shape],
            "strides": [int(n) for n in a.strides],
            "block": [int(n) for n in a.block_shape],
            "padding": a.padding,
        }
    if isinstance(a, bool) or isinstance(a, int) or isinstance(a, float) or a is None:
        return a
    raise TypeError(f"triton-aot: cannot record a kernel argument of type {type(a).__name__}")


def _cases(shapes: str):
    """(node, thunk) pairs: each thunk runs the node's forward and backward through ws1_ops."""
    import torch

    import ws1_ops

    g = torch.Generator().manual_seed(0)
    bf16, f32 = torch.bfloat16, torch.float32
    if shapes == "test":  # the interpreter tests' shapes (tests/cases.py, attention tests)
        n, H, V, NH, NKV, D, F, NOUT = 70, 256, 1000, 4, 2, 64, 512, 384
        make = lambda *s, dtype=bf16: torch.randn(*s, generator=g, device="cpu").to(dtype)  # noqa: E731
        weight = make
    else:  # Qwen3-8B, a few rows: weights are never read (the kernels do not run)
        c = QWEN3_8B
        n, H, V, NH, NKV, D, F = 5, c["hidden"], c["vocab"], c["heads"], c["kv_heads"], c["head_dim"], c["inter"]
        NOUT = H
        make = lambda *s, dtype=bf16: torch.randn(*s, generator=g, device="cpu").to(dtype)  # noqa: E731
        weight = lambda *s, dtype=bf16: torch.empty(*s, dtype=dtype, device="cpu")  # noqa: E731
    keys = ws1_ops.logical_keys(torch.zeros(n, dtype=torch.int64, device="cpu"), torch.arange(n, device="cpu"))

    def grads(out, *leaves):
        out.backward(
            torch.ones_like(out) if out.dtype != bf16 else torch.full(out.shape, 0.5, dtype=bf16, device="cpu")
        )

    def leaf(t):
        return t.requires_grad_(True)

    def gemm(N, K, m=n):
        def run():
            rk = ws1_ops.logical_keys(torch.zeros(m, dtype=torch.int64, device="cpu"), torch.arange(m, device="cpu"))
            x, w = leaf(make(m, K)), leaf(weight(N, K))
            grads(ws1_ops.det_gemm(x, w, rk), x, w)

        return run

    def cu_of(lens):
        return torch.tensor([0, *torch.tensor(lens, device="cpu").cumsum(0).tolist()], dtype=torch.int64, device="cpu")

    def attention(lens=None):
        lens = lens or ([n - 2, 2] if n > 4 else [n])
        cu = cu_of(lens)
        pos = torch.cat([torch.arange(m, device="cpu") for m in lens])
        T = sum(lens)
        q, k, v = leaf(make(T, NH, D)), leaf(make(T, NKV, D)), leaf(make(T, NKV, D))
        grads(ws1_ops.attention(q, k, v, cu, cu, pos))

    def decode(B, S):
        """B sequences of S keys, one query each at position S - 1 (the split-KV decode layout)."""
        q, k, v = make(B, NH, D), make(B * S, NKV, D), make(B * S, NKV, D)
        with torch.no_grad():
            ws1_ops.attention(q, k, v, cu_of([1] * B), cu_of([S] * B), torch.full((B,), S - 1, device="cpu"))

    def decode_graph_safe(B, S):
        """The same decode as a captured step runs it: planned on the device (ws1_ops.graph_safe)."""
        with ws1_ops.graph_safe():
            decode(B, S)

    def logits():
        return (make(n, V, dtype=f32) * 4).requires_grad_(True)

    out = [
        # the table's row count reaches no embedding kernel argument (only ids, H and the row plan do):
        # 1024 rows instead of 151936 keep the dE buffer (zeroed, FP32) at 16 MB instead of 2.5 GB
        (
            "embedding",
            lambda: grads(
                ws1_ops.embedding(
                    torch.randint(0, min(V, 1024), (n,), generator=g, device="cpu"), leaf(weight(min(V, 1024), H)), keys
                )
            ),
        ),
        ("rms_norm", lambda: grads(ws1_ops.rms_norm(leaf(make(n, H, dtype=f32)), leaf(make(H)), 1e-6, keys))),
        ("qk_norm", lambda: grads(ws1_ops.qk_norm(leaf(make(n, NH, D)), leaf(make(D)), 1e-6, keys))),
        ("qk_norm", lambda: grads(ws1_ops.qk_norm(leaf(make(n, NKV, D)), leaf(make(D)), 1e-6, keys))),
        ("det_gemm", gemm(NOUT, H)),
        ("det_gemm", gemm(NKV * D, H)),
        ("det_gemm", gemm(F, H)),
        ("det_gemm", gemm(H, F)),
        ("lm_head", lambda: grads(ws1_ops.lm_head(leaf(make(n, H)), leaf(weight(V, H)), keys))),
        (
            "rope",
            lambda: grads(
                ws1_ops.rope(leaf(make(n, NH, D)), torch.randint(0, 40960, (n,), generator=g, device="cpu"), 1e6)
            ),
        ),
        (
            "rope",
            lambda: grads(
                ws1_ops.rope(leaf(make(n, NKV, D)), torch.randint(0, 40960, (n,), generator=g, device="cpu"), 1e6)
            ),
        ),
        ("attention", attention),
        ("swiglu", lambda: grads(ws1_ops.swiglu(leaf(make(n, F)), leaf(make(n, F))))),
        ("silu", lambda: grads(ws1_ops.silu(leaf(make(n, F))))),
        ("logprob", lambda: grads(ws1_ops.logprob(logits(), torch.randint(0, V, (n,), generator=g, device="cpu")))),
        ("batch_invariant_logp", lambda: grads(ws1_ops.batch_invariant_logp(logits()))),
    ]
    if shapes != "test":
        # the other configurations the chain launches at these shapes: the GEMM tiers by M (Hopper:
        # M <= 64 above, 64 < M < 1024 at 300 rows, M >= 1024 at 2048; forward, dx, dW; lm_head forward
        # only, its backward's FP32-dy GEMMs have one configuration), attention's prefill layout with
        # one and two key chunks (the merge kernel), the split-KV decode layout across chunks, and that decode planned
        # on the device as a captured step runs it (the plan kernel, the checked merge)
        for m in (300, 2048):
            out += [
                ("det_gemm", gemm(NOUT, H, m)),
                ("det_gemm", gemm(NKV * D, H, m)),
                ("det_gemm", gemm(F, H, m)),
                ("det_gemm", gemm(H, F, m)),
                ("lm_head", lambda m=m: ws1_ops.lm_head(make(m, H), weight(V, H))),
            ]
        out += [
            ("attention", lambda: attention([300])),
            ("attention", lambda: attention([2100, 7])),
            ("attention", lambda: decode(4, 2100)),
            ("attention", lambda: decode(32, 2048)),
            ("attention", lambda: decode_graph_safe(32, 2100)),
        ]
    return out


def table_of(arch: int) -> str:
    """The configuration table (``ws1_ops.triton._common.ARCHS``) a device of compute capability
    ``arch`` (90, 80, 86, ...) launches with: the Hopper table for 9.x, the sm_80 one otherwise."""
    return "sm90" if arch // 10 == 9 else "sm80"


def record(shapes: list[str], execute: bool = True, tables: tuple[str, ...] = ("sm90", "sm80")) -> list[dict]:
    """Every launch of the chain's nodes (forward + backward) at each shape set, once per
    configuration table (the interpreter runs a table's logic when ``_common.INTERPRET_ARCH`` names
    it), as JSON records. Test shapes are executed with the first table only (the logic check)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("triton-aot record: run with TRITON_INTERPRET=1 (the child process does)")
    import warnings

    import numpy as np

    # the interpreter evaluates masked-out lanes too (exp(-inf - -inf)...); never stored: noise
    np.seterr(all="ignore")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")
    from ws1_ops import registry
    from ws1_ops.triton import _common

    launches: list[dict] = []
    state = {"execute": True, "shapes": "", "node": "", "table": ""}
    original = _common.counted.__getitem__

    def recording(self, grid):
        launch = original(self, grid)

        def run(*args, **kwargs):
            launches.append(
                {
                    "kernel": self.kernel_id,
                    "shapes": state["shapes"],
                    "node": state["node"],
                    "table": state["table"],
                    "args": [_describe(a) for a in args],
                    "kwargs": {k: _describe(v) for k, v in _common.counted.options(kwargs).items()},
                }
            )
            return launch(*args, **kwargs) if state["execute"] else None

        return run

    _common.counted.__getitem__ = recording
    table0 = _common.INTERPRET_ARCH
    try:
        with registry.activate("triton_aot_record", "triton"):
            for i, table in enumerate(tables):
                _common.INTERPRET_ARCH = state["table"] = table
                for s in shapes:
                    state["shapes"], state["execute"] = s, execute and s == "test" and i == 0
                    for node, thunk in _cases(s):
                        state["node"] = node
                        thunk()
    finally:
        _common.counted.__getitem__ = original
        _common.INTERPRET_ARCH = table0
    return launches


# ---- 2. compiling (this process, JITFunction) -------------------------------------------------------


class _Arg:
    """A recorded tensor argument as Triton's binder sees one: a dtype and a data pointer."""

    def __init__(self, dtype, aligned: bool):
        self.dtype = dtype
        self._ptr = 0 if aligned else 8

    def data_ptr(self):
        return self._ptr


def _kernel(kernel_id: str):
    module, name = kernel_id.split(":")
    return getattr(importlib.import_module(module), name)


def _replay_arg(a):
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    if not isinstance(a, dict):
        return a
    if "tensordesc" in a:  # a TMA descriptor: its dtype and block shape specialize the kernel
        return TensorDescriptor(
            _Arg(getattr(torch, a["tensordesc"]), a["align16"]), a["shape"], a["strides"], a["block"], a["padding"]
        )
    return _Arg(getattr(torch, a["tensor"]), a["align16"])


def _replay_args(rec: dict):
    args = [_replay_arg(a) for a in rec["args"]]
    kwargs = dict(rec["kwargs"])
    if "DOT_F32" in kwargs:  # the GPU's value (module docstring)
        kwargs["DOT_F32"] = False
    return args, kwargs


def specialize(rec: dict, arch: int):
    """(fn, signature, constexprs, attrs, options) exactly as ``kernel[grid](...)`` computes them
    (``JITFunction.run``: the same keyword defaults, binder and packing), so a compile here has the
    cache key of the launch: ``--cache-dir`` then pre-fills the cache the GPU run launches from."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = _kernel(rec["kernel"]).fn
    backend = make_backend(GPUTarget("cuda", arch, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    args, kwargs = _replay_args(rec)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    for knob in ("instrumentation_mode", "fpsan_homomorphic_casts"):  # Triton >= 3.7 adds these
        if hasattr(knobs.compilation, knob):
            kwargs[knob] = getattr(knobs.compilation, knob)
    bound, spec, opts = binder(*args, **kwargs)
    if hasattr(fn, "_pack_args"):
        options, signature, constexprs, attrs = fn._pack_args(backend, opts, bound, spec, opts)
    else:  # a Triton without _pack_args: inline in its JITFunction.run
        from triton._utils import find_paths_if, get_iterable_path

        options = backend.parse_options(opts)
        sigvals = [x[0] for x in spec]
        signature = dict(zip((p.name for p in fn.params), sigvals))
        constexprs = {
            path: get_iterable_path(list(bound.values()), path)
            for path in find_paths_if(sigvals, lambda _, val: val == "constexpr")
        }
        attrvals = [x[1] for x in spec]
        attrs = {
            k: backend.parse_attr(get_iterable_path(attrvals, k))
            for k in find_paths_if(attrvals, lambda _, x: isinstance(x, str))
        }
    return fn, signature, constexprs, attrs, options


def _ptxas_rerun(ptx: str, arch: int, fusion: bool) -> str:
    """ptxas -v on the PTX, for a Triton whose compile does not print its ptxas log."""
    from triton.backends.nvidia import compiler as nv

    ptxas = nv.get_ptxas(arch).path if hasattr(nv, "get_ptxas") else nv._path_to_binary("ptxas")[0]
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        cmd = [
            ptxas,
            "-v",
            *([] if fusion else ["--fmad=false"]),
            f"--gpu-name=sm_{arch}{'a' if arch >= 90 else ''}",
            str(src),
            "-o",
            str(Path(d) / "k.cubin"),
        ]
        return subprocess.run(cmd, capture_output=True, text=True).stderr


def config_key(rec: dict, arch: int) -> str:
    fn, signature, constexprs, attrs, options = specialize(rec, arch)
    return json.dumps(
        [
            rec["kernel"],
            arch,
            signature,
            sorted((str(k), repr(v)) for k, v in constexprs.items()),
            sorted((str(k), repr(v)) for k, v in attrs.items()),
            {k: options.__dict__[k] for k in ("num_warps", "num_stages", "enable_fp_fusion")},
        ]
    )


_PTXAS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _count(ptx: str, pattern: str) -> int:
    return len(re.findall(pattern, ptx))


def compile_one(rec: dict, arch: int, cache_dir: str, fp_fusion: bool | None = None) -> dict:
    """Compile one recorded launch for ``sm_<arch>``; ``fp_fusion`` overrides the launch's option
    (only the negative control does). Returns the resource record (or its error)."""
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, signature, constexprs, attrs, options = specialize(rec, arch)
    opts = dict(options.__dict__)
    if fp_fusion is not None:
        opts["enable_fp_fusion"] = fp_fusion
    knobs.nvidia.dump_ptxas_log = True
    knobs.compilation.always_compile = True  # ptxas runs (and reports) every time
    out = {
        "kernel": rec["kernel"],
        "arch": f"sm_{arch}{'a' if arch >= 90 else ''}",
        "signature": {k: v for k, v in signature.items() if v != "constexpr"},
        "div16": [fn.arg_names[k[0]] for k, v in attrs.items() if ["tt.divisibility", 16] in v],
        "constexprs": {
            fn.arg_names[k[0]]: (v if isinstance(v, (bool, int, float, str)) else repr(v))
            for k, v in constexprs.items()
        },
        "num_warps": opts["num_warps"],
        "num_stages": opts["num_stages"],
        "enable_fp_fusion": opts["enable_fp_fusion"],
    }
    log = io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(log):
            ck = triton.compile(
                ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", arch, 32), options=opts
            )
    except Exception as exc:  # noqa: BLE001 - a compile error is a red result with its reason
        out["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return out
    out["compile_s"] = round(time.perf_counter() - t0, 2)
    text, out["resources_from"] = log.getvalue(), "the compile's ptxas -v log"
    ptx = ck.asm["ptx"]
    if not _PTXAS.search(text):
        text, out["resources_from"] = _ptxas_rerun(ptx, arch, opts["enable_fp_fusion"]), "ptxas -v rerun on the PTX"
    regs, spill = _PTXAS.search(text), _SPILL.search(text)
    if not regs or not spill:
        out["error"] = f"no ptxas resource report: {text[-300:]!r}"
        return out
    out.update(
        regs=int(regs.group(1)),
        spill_stores=int(spill.group(1)),
        spill_loads=int(spill.group(2)),
        shared_bytes=int(ck.metadata.shared),
        mma={"wgmma": _count(ptx, r"\bwgmma\.mma_async"), "mma.sync": _count(ptx, r"\bmma\.sync")},
        # the wgmma instruction shapes (m64nNk16): what a row's bits may depend on (docs/triton.md)
        wgmma_shapes=sorted(set(re.findall(r"\bwgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx))),
        # TMA loads (cp.async.bulk.tensor) in the PTX
        tma_loads=_count(ptx, r"\bcp\.async\.bulk\.tensor"),
        # ptxas's "wgmma.mma_async instructions are serialized" (C7510-C7520): a Hopper kernel that
        # waits for every wgmma, far from the tensor cores' rate
        wgmma_serialized=bool(re.search(r"wgmma[^\n]*serialized", text)),
        # fma.rn.f32: tl.fma, an FP32 dot, or contraction; fma.rn.ftz.f32: libdevice's own
        # code (tl.log -> __nv_logf, built with ftz), never a contraction of ours
        fma={
            "f32": _count(ptx, r"\bfma\.rn\.f32\b"),
            "f64": _count(ptx, r"\bfma\.rn\.f64\b"),
            "libdevice_ftz_f32": _count(ptx, r"\bfma\.rn\.ftz\.f32\b"),
        },
    )
    if arch >= 90 and "cubin" in ck.asm:
        out["sass"] = _sass_counts(ck.asm["cubin"], arch)
    return out


def _sass_counts(cubin: bytes, arch: int) -> dict:
    """Tensor-core and TMA instructions in the SASS of a compiled kernel (cuobjdump from Triton's
    bundle): HGMMA (wgmma), HMMA (mma.sync), UTMALDG (TMA loads)."""
    from triton.backends.nvidia import compiler as nv

    tool = Path(nv.get_ptxas(arch).path).with_name("cuobjdump")
    if not tool.is_file():
        return {"error": f"no cuobjdump beside {tool.parent}"}
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(cubin)
        r = subprocess.run([str(tool), "-sass", str(f)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-200:]}
    return {op: len(re.findall(rf"\b{op}\b", r.stdout)) for op in ("HGMMA", "HMMA", "UTMALDG")}


# ---- 3. judging ----------------------------------------------------------------------------------


def verdict(r: dict) -> list[str]:
    """The reasons a compiled configuration is red (empty: green)."""
    from ws1_ops.triton._common import EXPLICIT_FMA

    if "error" in r:
        return [f"compile error: {r['error']}"]
    module, name = r["kernel"].rsplit(".", 1)[-1].split(":")
    bad = []
    if module in NO_SPILL_MODULES and (r["spill_stores"] or r["spill_loads"]):
        bad.append(f"spills {r['spill_stores']} B stores / {r['spill_loads']} B loads")
    if r["enable_fp_fusion"]:
        bad.append("compiled with FP fusion on (docs/triton.md: off for every kernel)")
    if r["fma"]["f64"]:
        bad.append(f"{r['fma']['f64']} fma.rn.f64 (the docs promise FP64 +, -, x only)")
    if name in EXPLICIT_FMA:
        if not r["fma"]["f32"]:
            bad.append("no fma.rn.f32, but the source writes tl.fma")
    elif r["fma"]["f32"]:
        bad.append(f"{r['fma']['f32']} fma.rn.f32 that the source does not write")
    if r["arch"] == "sm_90a" and name in WGMMA_KERNELS:
        sass = r.get("sass", {})
        if not r["mma"]["wgmma"] or r["mma"]["mma.sync"]:
            bad.append(
                f"a Hopper configuration without wgmma (wgmma {r['mma']['wgmma']}, mma.sync {r['mma']['mma.sync']})"
            )
        if "error" in sass or not sass.get("HGMMA") or sass.get("HMMA"):
            bad.append("SASS: " + (sass.get("error") or f"HGMMA {sass.get('HGMMA', 0)}, HMMA {sass.get('HMMA', 0)}"))
        if r.get("wgmma_serialized"):
            bad.append("ptxas serialized the wgmma instructions")
    if r["constexprs"].get("TMA") is True and r["arch"] == "sm_90a":
        if not r.get("tma_loads") or (r.get("sass") and not r["sass"].get("UTMALDG")):
            bad.append("launched with TMA descriptors but compiled without TMA loads")
    return bad


# kernels whose configurations chosen by the batch shape (the GEMM tiers by M, attention's prefill and
# decode layouts) must give a row the same bits: on sm_90a every configuration of one of them (at one
# head_dim, one operand dtype) must issue the same wgmma instruction shapes (docs/triton.md)
SAME_WGMMA_SHAPES = ("attention_fwd_kernel", "det_gemm_fwd_kernel", "lm_head_fwd_kernel", "det_gemm_bwd_dx_kernel")


def shape_agreement(results: list[dict]) -> None:
    """Add a red reason to every sm_90a configuration of a SAME_WGMMA_SHAPES kernel whose wgmma
    instruction shapes differ from another configuration's with the same BD and SPLIT_A."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        name = r["kernel"].split(":")[1]
        if name in SAME_WGMMA_SHAPES and r["arch"] == "sm_90a" and "error" not in r:
            groups.setdefault((name, r["constexprs"].get("BD"), r["constexprs"].get("SPLIT_A")), []).append(r)
    for (name, bd, split), rs in groups.items():
        shapes = {tuple(r["wgmma_shapes"]) for r in rs}
        if len(shapes) > 1:
            for r in rs:
                r["red"].append(
                    f"wgmma shapes {r['wgmma_shapes']} differ between {name}'s configurations "
                    f"(BD {bd}, SPLIT_A {split}): {sorted(shapes)}"
                )


def _table(results: list[dict]) -> str:
    rows = [
        "| kernel | arch | constexprs | int args % 16 == 0 | warps/stages | regs | spill st/ld B | smem B | MMA "
        "| fma f32/f64 | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        name = r["kernel"].split(":")[1]
        ints = [k for k in r.get("div16", []) if not r["signature"].get(k, "").startswith("*")]
        cx = ", ".join(f"{k}={v}" for k, v in r["constexprs"].items()) + f" | {' '.join(ints) or '-'}"
        if "error" in r:
            rows.append(
                f"| {name} | {r['arch']} | {cx} | {r['num_warps']}/{r['num_stages']} | | | | | | RED: {r['error']} |"
            )
            continue
        mma = (
            f"wgmma {' '.join(r['wgmma_shapes'])}"
            if r["mma"]["wgmma"]
            else "mma.sync"
            if r["mma"]["mma.sync"]
            else "no"
        ) + (f", TMA {r['tma_loads']}" if r.get("tma_loads") else "")
        v = "; ".join(r["red"]) or "ok"
        rows.append(
            f"| {name} | {r['arch']} | {cx} | {r['num_warps']}/{r['num_stages']} | {r['regs']} | "
            f"{r['spill_stores']}/{r['spill_loads']} | {r['shared_bytes']} | {mma} | "
            f"{r['fma']['f32']}/{r['fma']['f64']} | {'RED: ' + v if r['red'] else v} |"
        )
    return "\n".join(rows)


def record_in_child(shapes: list[str], execute: bool = True, archs: tuple[int, ...] = ARCHS) -> list[dict]:
    """:func:`record` in a fresh interpreter with ``TRITON_INTERPRET=1`` (Triton fixes interpreter vs
    GPU when a kernel is defined, once per process), for the tables of ``archs``."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as f:
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        cmd = [
            sys.executable,
            "-m",
            "ws1_matrix.triton_aot",
            "--record-to",
            f.name,
            "--shapes",
            ",".join(shapes),
            "--arch",
            ",".join(map(str, archs)),
            *([] if execute else ["--no-execute"]),
        ]
        subprocess.run(cmd, check=True, env=env)
        return json.load(open(f.name))


def _compile_job(job):
    rec, arch, cache_dir = job
    return compile_one(rec, arch, cache_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ws1_matrix triton-aot", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default=",".join(map(str, ARCHS)), help="compute capabilities (default 90,80)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"shape sets ({', '.join(SHAPES)})")
    ap.add_argument("--kernels", default="", help="only kernels whose id contains one of these (comma-separated)")
    ap.add_argument("--no-execute", action="store_true", help="record the test shapes' launches without running them")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    ap.add_argument("--cache-dir", default=None, help="Triton cache to fill (default: a temporary one)")
    ap.add_argument("--evidence-dir", default="evidence")
    ap.add_argument("--json", action="store_true", help="print the JSON record instead of the table")
    ap.add_argument("--record-to", default=None, help=argparse.SUPPRESS)  # the child process
    ns = ap.parse_args(argv)
    shapes = [s for s in ns.shapes.split(",") if s]
    if any(s not in SHAPES for s in shapes):
        print(f"triton-aot: unknown shape set in {ns.shapes!r} (choices: {', '.join(SHAPES)})", file=sys.stderr)
        return 2
    try:
        archs = [int(a) for a in ns.arch.split(",") if a]
    except ValueError:
        print(f"triton-aot: --arch takes integers such as 90,80, got {ns.arch!r}", file=sys.stderr)
        return 2
    try:
        import triton
    except ImportError as exc:
        print(f"triton-aot: triton is not installed ({exc})", file=sys.stderr)
        return 2
    tables = tuple(dict.fromkeys(table_of(a) for a in archs))
    if ns.record_to:
        json.dump(record(shapes, execute=not ns.no_execute, tables=tables), open(ns.record_to, "w"))
        return 0
    if os.environ.get("TRITON_INTERPRET") == "1":
        print(
            "triton-aot: unset TRITON_INTERPRET (the compile step needs the kernels as JITFunctions)", file=sys.stderr
        )
        return 2

    t0 = time.perf_counter()
    launches = record_in_child(shapes, execute=not ns.no_execute, archs=tuple(archs))
    t_rec = time.perf_counter() - t0
    wanted = [k for k in ns.kernels.split(",") if k]
    if wanted:
        launches = [r for r in launches if any(k in r["kernel"] for k in wanted)]
        if not launches:
            print(f"triton-aot: no recorded launch of a kernel matching {ns.kernels!r}", file=sys.stderr)
            return 2
    configs: dict[str, dict] = {}
    where: dict[str, set] = {}
    for rec in launches:
        for arch in archs:
            if table_of(arch) != rec["table"]:  # a launch is compiled for the arch whose table made it
                continue
            key = config_key(rec, arch)
            configs.setdefault(key, rec)
            where.setdefault(key, set()).add(f"{rec['node']}@{rec['shapes']}")
    with contextlib.ExitStack() as stack:
        cache_dir = ns.cache_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="ws1-triton-aot-"))
        jobs = [(rec, json.loads(key)[1], cache_dir) for key, rec in configs.items()]
        with cf.ProcessPoolExecutor(max_workers=max(1, ns.jobs)) as pool:
            results = list(pool.map(_compile_job, jobs))
    for key, r in zip(configs, results):
        r["used_by"] = sorted(where[key])
        r["red"] = verdict(r)
    shape_agreement(results)
    results.sort(key=lambda r: (r["kernel"], r["arch"], json.dumps(r["constexprs"], sort_keys=True)))
    wall = time.perf_counter() - t0
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = {a: get_ptxas(a).path for a in archs}
    doc = {
        "triton": triton.__version__,
        "ptxas": {f"sm_{a}": p for a, p in ptxas.items()},
        "archs": archs,
        "shapes": shapes,
        "launches_recorded": len(launches),
        "kernels": len({r["kernel"] for r in results}),
        "configs": len(results),
        "red": sum(bool(r["red"]) for r in results),
        "record_s": round(t_rec, 1),
        "wall_s": round(wall, 1),
        "results": results,
    }
    out = Path(ns.evidence_dir) / "build"
    out.mkdir(parents=True, exist_ok=True)
    (out / "triton_aot.json").write_text(json.dumps(doc, indent=1))
    table = _table(results)
    (out / "triton_aot.md").write_text(table + "\n")
    if ns.json:
        print(json.dumps(doc, indent=1))
    else:
        print(table)
    print(
        f"triton-aot: {doc['kernels']} kernels, {doc['configs']} configurations "
        f"for {', '.join(f'sm_{a}' for a in archs)} from {len(launches)} recorded launches "
        f"({', '.join(shapes)}); {doc['red']} red; "
        f"record {t_rec:.0f} s, total {wall:.0f} s (triton {triton.__version__}) -> {out / 'triton_aot.json'}"
    )
    return 1 if doc["red"] else 0


if __name__ == "__main__":
    sys.exit(main())
