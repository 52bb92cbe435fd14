"""Load check of the torch-linked ws1_cuda library, runnable without a GPU (in .venv-cuda).

It imports ws1_kernels_cuda (the library links and registers), checks that every op of the registration
file is a torch.ops.ws1_cuda op with a CUDA and a Meta kernel, runs every op on Meta tensors (shapes and
dtypes of the cpu family's signatures; no kernel executes), checks that a CPU tensor is refused (no CPU
fallback) and that calls() starts empty. Writes <out>/cuda_link.json. Exit 0 green, 1 red.
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
    calls = json.loads(K.calls())
    if calls != {}:
        problems.append(f"calls() after Meta-only use is {calls}, want {{}} (Meta kernels must not count as runs)")
    report = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "ops": ops, "meta_checked": sorted(expect),
              "cpu_tensor_refused": refused if "refused" in locals() else None, "problems": problems,
              "verdict": "green" if not problems else "red", "seconds": round(time.monotonic() - t0, 1),
              "note": "loaded and shape-checked only: no CUDA kernel executed"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_link.json").write_text(json.dumps(report, indent=1) + "\n")
    for p in problems:
        print(f"  RED: {p}")
    print(f"link_check: {len(ops)} ops, {len(expect)} Meta shape checks -> {args.out / 'cuda_link.json'}: {report['verdict']}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
