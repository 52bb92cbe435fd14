"""Load check of the torch-linked ws1_cuda library, runnable without a GPU (in .venv-cuda).

It imports ws1_kernels_cuda (the library links and registers), checks that every op of the registration
file is a torch.ops.ws1_cuda op with a CUDA and a Meta kernel, runs every op on Meta tensors (shapes and
dtypes of the cpu family's signatures; no kernel executes), checks that a CPU tensor is refused (no CPU
fallback), that every entry point called through its CUDA kernel with CPU tensors raises its own one-line
RuntimeError and the process lives on (the throw-and-unwind path the first H200 run's segfault took), and that
calls() starts empty (raising calls are not counted). Writes <out>/cuda_link.json. Exit 0 green, 1 red.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=PKG.parent / "evidence" / "build")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    import torch

    import ws1_kernels_cuda  # noqa: F401

    K = torch.ops.ws1_cuda
    problems: list[str] = []
    ops = re.findall(r'm\.def\("(\w+)\(', (PKG / "csrc" / "ws1_cuda.cpp").read_text())
    for op in ops:
        if not hasattr(K, op):
            problems.append(f"ws1_cuda::{op} is not registered")
            continue
        if op == "calls":
            continue
        for key in ("CUDA", "Meta"):
            if not torch._C._dispatch_has_kernel_for_dispatch_key(f"ws1_cuda::{op}", key):
                problems.append(f"ws1_cuda::{op} has no {key} kernel")

    m = dict(device="meta")
    bf, f32, i64 = torch.bfloat16, torch.float32, torch.int64
    x, w = torch.empty(59, 4096, dtype=bf, **m), torch.empty(12288, 4096, dtype=bf, **m)
    q, kv = torch.empty(19, 32, 128, dtype=bf, **m), torch.empty(19, 8, 128, dtype=bf, **m)
    cu, pos = torch.empty(2, dtype=i64, **m), torch.empty(19, dtype=i64, **m)
    lg, tg = torch.empty(4, 1000, dtype=f32, **m), torch.empty(4, dtype=i64, **m)
    expect = {
        "det_gemm": (K.det_gemm(x, w), [(59, 12288, bf)]),
        "lm_head": (K.lm_head(x, w), [(59, 12288, f32)]),
        "gemm": (K.gemm(x, w, True), [(59, 12288, f32)]),
        "embedding": (K.embedding(tg, lg), [(4, 1000, f32)]),
        "embedding_bwd": (K.embedding_bwd(lg, tg, 7), [(7, 1000, f32)]),
        "rms_norm": (K.rms_norm(x, x[0], 1e-6), [(59, 4096, bf), (59, f32)]),
        "qk_norm": (K.qk_norm(q, q[0, 0], 1e-6), [(19, 32, 128, bf), (19, 32, f32)]),
        "rope": (K.rope(q, pos, 1e6, False), [(19, 32, 128, bf)]),
        "attention": (K.attention(q, kv, kv, cu, cu, pos, 0.088), [(19, 32, 128, bf), (19, 32, f32)]),
        "swiglu": (K.swiglu(x, x), [(59, 4096, bf)]),
        "silu_bwd": (K.silu_bwd(x, x), [(59, 4096, f32)]),
        "logprob": (K.logprob(lg, tg), [(4, f32), (4, f32)]),
        "batch_invariant_logp": (K.batch_invariant_logp(lg), [(4, 1000, f32), (4, f32)]),
    }
    for op, (res, want) in expect.items():
        got = [(*t.shape, t.dtype) for t in (res if isinstance(res, (tuple, list)) else (res,))]
        if got != [tuple(w_) for w_ in want]:
            problems.append(f"ws1_cuda::{op} on Meta: got {got}, want {want}")
    try:
        K.silu(torch.zeros(4, dtype=bf))
        problems.append("ws1_cuda::silu accepted a CPU tensor (a CPU fallback)")
    except (RuntimeError, NotImplementedError) as exc:
        refused = str(exc).splitlines()[0][:200]
    # Every entry point's first argument check, reached through the CUDA dispatch key with CPU tensors: it must
    # raise a RuntimeError naming the op, and the process must live on. This is the path (a throw from inside
    # the library, unwinding through its nvcc-compiled frames into torch's error translation) that crashed the
    # first H200 run's unit tests with a segfault; here it runs without a GPU.
    raised = _entry_errors(K, ops, problems)
    config_errors = _config_errors(problems)
    calls = json.loads(K.calls())
    if calls != {}:
        problems.append(f"calls() after Meta-only use is {calls}, want {{}} (Meta kernels must not count as runs)")
    report = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "ops": ops,
        "meta_checked": sorted(expect),
        "entry_errors_raised": raised,
        "det_gemm_in_config_errors": config_errors,
        "cpu_tensor_refused": refused if "refused" in locals() else None,
        "problems": problems,
        "verdict": "green" if not problems else "red",
        "seconds": round(time.monotonic() - t0, 1),
        "note": "loaded and shape-checked only: no CUDA kernel executed",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_link.json").write_text(json.dumps(report, indent=1) + "\n")
    for p in problems:
        print(f"  RED: {p}")
    print(
        f"link_check: {len(ops)} ops, {len(expect)} Meta shape checks, "
        f"{raised} entry points raised their one-line error through the CUDA key -> "
        f"{args.out / 'cuda_link.json'}: {report['verdict']}"
    )
    return 0 if not problems else 1


def _entry_errors(K, ops: list[str], problems: list[str]) -> int:
    """Call each op's CUDA kernel with CPU tensors (DispatchKey.CUDA redispatch); count the one-line errors."""
    import torch

    bf, f32, i64 = torch.bfloat16, torch.float32, torch.int64
    x, w, q, kv = (
        torch.zeros(4, 8, dtype=bf),
        torch.zeros(6, 8, dtype=bf),
        torch.zeros(3, 4, 16, dtype=bf),
        torch.zeros(3, 2, 16, dtype=bf),
    )
    ids, cu, pos, lg, f = (
        torch.zeros(4, dtype=i64),
        torch.tensor([0, 3]),
        torch.arange(3),
        torch.zeros(4, 10),
        torch.zeros(4, 8, dtype=f32),
    )
    args = {
        "embedding": (ids, w),
        "embedding_bwd": (f, ids, 6),
        "rms_norm": (f, torch.ones(8, dtype=bf), 1e-6),
        "rms_norm_bwd": (f, f, torch.ones(8, dtype=bf), torch.ones(4)),
        "qk_norm": (q, torch.ones(16, dtype=bf), 1e-6),
        "qk_norm_bwd": (q.float(), q, torch.ones(16, dtype=bf), torch.ones(12)),
        "det_gemm": (x, w),
        "lm_head": (x, w),
        "gemm": (x, w, True),
        "rope": (q, pos, 1e6, False),
        "attention": (q, kv, kv, cu, cu, pos, 0.25),
        "attention_bwd": (q.float(), q, kv, kv, q, torch.zeros(3, 4), cu, cu, pos, 0.25),
        "swiglu": (x, x),
        "swiglu_bwd": (f, x, x),
        "silu": (x,),
        "silu_bwd": (f, x),
        "logprob": (lg, ids),
        "logprob_bwd": (torch.zeros(4), lg, torch.zeros(4), ids),
        "batch_invariant_logp": (lg,),
        "batch_invariant_logp_bwd": (lg, lg),
    }
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    raised = 0
    for op in ops:
        if op == "calls":
            continue
        if op not in args:
            problems.append(f"ws1_cuda::{op}: no CPU-argument case in link_check's entry-error table")
            continue
        try:
            getattr(K, op).default.redispatch(keys, *args[op])
            problems.append(f"ws1_cuda::{op} ran on CPU tensors through its CUDA kernel (no argument check)")
        except RuntimeError as exc:
            line = str(exc).splitlines()[0]
            if f"ws1_cuda::{op}" not in line or "CUDA tensor" not in line:
                problems.append(
                    f"ws1_cuda::{op}: raised {line[:160]!r}, expected a one-line 'must be a CUDA tensor' naming the op"
                )
            else:
                raised += 1
    return raised


def _config_errors(problems: list[str]) -> list[str]:
    """ws1_kernels_cuda._C.det_gemm_in_config (not an op: the tests' and benchmarks' handle on the sm_90a
    configurations): an unknown configuration name and a CPU tensor each raise a one-line error naming it."""
    import torch

    from ws1_kernels_cuda import _C

    fn = getattr(_C, "det_gemm_in_config", None)
    if fn is None:
        problems.append("ws1_kernels_cuda._C has no det_gemm_in_config")
        return []
    x, w = torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(6, 8, dtype=torch.bfloat16)
    lines = []
    for config, want in (("n64", "unknown configuration 'n64'"), ("narrow_n32", "CUDA tensor")):
        try:
            fn(x, w, config)
            problems.append(f"det_gemm_in_config(cpu, {config!r}) did not raise")
        except RuntimeError as exc:
            line = str(exc).splitlines()[0]
            lines.append(line)
            if "det_gemm_in_config" not in line or want not in line:
                problems.append(
                    f"det_gemm_in_config(cpu, {config!r}): raised {line[:160]!r}, expected {want!r} naming it"
                )
    return lines


if __name__ == "__main__":
    sys.exit(main())
