"""Bad input to every ws1_cuda entry point raises a Python RuntimeError naming the op and the problem, on the
device, and the process lives on.

The first H200 run (2026-12-04) lost the whole GPU unit-test session to a segmentation fault at the first
entry point that raised (``det_gemm`` with a K mismatch, test_calls_count_what_ran). Here every entry point's
argument checks are driven once each — dtype, rank, shape (K mismatch), device mismatch, non-contiguous
where a contiguous input is required, out-of-range values — in a CHILD process, so a crash is one failed
test with the child's output, not the end of the run; then the child checks that ``calls()`` counted none of
the raising calls and that a good call still works after all of them.

Skipped, with the reason, on a host without a CUDA device or without the built ws1_kernels_cuda (every CPU
host; ``kernels-cuda/tools/link_check.py`` drives the first check of each entry point there, through the
CUDA dispatch key with CPU tensors).
"""

import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_cuda_testpaths import gpu_unavailable  # noqa: E402

_WHY = gpu_unavailable()


# (op, the bad arguments as Python source over the names defined in CHILD's prologue, a substring of the message).
# Every case keeps at least one argument on the GPU: a call with CPU tensors only never reaches the entry point
# (the dispatcher refuses it, no CPU kernel). c10::toString names dtypes "Long", "Float", "BFloat16".
CASES = [
    ("embedding", "ids.float(), wb", "ids must be Long"),
    ("embedding", "ids, wb[0]", "weight must have rank 2"),
    ("embedding", "ids.cpu(), wb", "ids is on cpu"),
    ("embedding", "ids + 1000, wb", "token ids must be in [0, 50)"),
    ("embedding_bwd", "dy7.int(), ids, 50", "dy must be bfloat16 or float32"),
    ("embedding_bwd", "dy7[:5], ids, 50", "dy has 5 rows, ids 7"),
    ("embedding_bwd", "dy7, ids, 0", "num_embeddings must be > 0"),
    ("rms_norm", "x2.int(), wn, 1e-6", "x must be bfloat16 or float32"),
    ("rms_norm", "x2.t(), wn, 1e-6", "x must be contiguous"),
    ("rms_norm", "x2, wn[:3], 1e-6", "weight must have shape [64]"),
    ("rms_norm", "x2, wn.cpu(), 1e-6", "weight is on cpu"),
    ("rms_norm_bwd", "x2[:3].float(), x2, wn, rstd", "dy must have the shape of x"),
    ("rms_norm_bwd", "x2.float(), x2, wn, rstd.double()", "rstd must be Float"),
    ("qk_norm", "x2, wd, 1e-6", "x must have rank 3"),
    ("qk_norm", "x3, wn, 1e-6", "weight must have shape [16]"),
    ("qk_norm_bwd", "x3.float(), x3, wd, rstd", "rstd must be contiguous with"),
    ("det_gemm", "xa, wk9", "K mismatch"),
    ("det_gemm", "xa.float(), wk", "x must be BFloat16"),
    ("det_gemm", "xa[None], wk", "x must have rank 2"),
    ("det_gemm", "xa, wk.cpu()", "weight is on cpu"),
    ("lm_head", "xa, wk9", "K mismatch"),
    ("lm_head", "xa, wk.int()", "weight must be BFloat16"),
    ("gemm", "xa, wk9, True", "K mismatch"),
    ("gemm", "xa.int(), wk, True", "a must be bfloat16 or float32"),
    ("gemm", "xa, wk[None], True", "b must have rank 2"),
    ("rope", "x3[..., :15], pos3, 1e6, False", "head_dim must be even"),
    ("rope", "x3, pos3[:2], 1e6, False", "positions must be [4]"),
    ("rope", "x3, pos3.float(), 1e6, False", "positions must be Long"),
    ("rope", "x3, pos3 - 9, 1e6, False", "positions must be >= 0"),
    ("rope", "x3, pos3, -1.0, False", "theta must be > 0"),
    ("attention", "q.transpose(0, 1), k, v, cu, cu, pq, 0.1", "q must be contiguous"),
    ("attention", "q, k, v[:3], cu, cu, pq, 0.1", "k and v must have one shape"),
    ("attention", "q[:, :3].contiguous(), k, v, cu, cu, pq, 0.1", "must be a multiple of Hkv"),
    ("attention", "q, k, v, cu.int(), cu, pq, 0.1", "cu_seqlens_q must be Long"),
    ("attention", "q, k, v, cu, cu, pq + 5, 0.1", "at position"),
    ("attention", "q, k, v, cu - 1, cu, pq, 0.1", "cu_seqlens must start at 0"),
    ("attention", "q, k.cpu(), v, cu, cu, pq, 0.1", "k must be a CUDA tensor"),
    ("attention_bwd", "q.float()[:2], q, k, v, q, lse, cu, cu, pq, 0.1", "dout and out must have q's shape"),
    ("swiglu", "g, g[:1]", "gate and up must have one shape and dtype"),
    ("swiglu", "g.int(), g", "gate must be bfloat16 or float32"),
    ("swiglu_bwd", "g[:1].float(), g, g", "dy must have the shape of the input"),
    ("silu", "g.t()", "x must be contiguous"),
    ("silu_bwd", "g.float(), g.cpu()", "dy is on cuda:0, expected cpu"),
    ("logprob", "lg, tg + 1000", "target ids must be in [0, 100)"),
    ("logprob", "lg, tg.int()", "targets must be Long"),
    ("logprob", "lg.bfloat16(), tg", "logits must be Float"),
    ("logprob", "lg[0], tg", "logits must have rank 2"),
    ("logprob_bwd", "tg.float(), lg, tg.float()[:2], tg", "g and lse must have 3 elements"),
    ("batch_invariant_logp", "lg.double()", "logits must be Float"),
    ("batch_invariant_logp_bwd", "lg[:1], lg", "g and logp must have one shape"),
]

CHILD = textwrap.dedent("""
    import json, sys
    import torch, ws1_kernels_cuda
    K, dev, BF = torch.ops.ws1_cuda, "cuda", torch.bfloat16
    r = lambda *s, dt=BF: torch.randn(*s, device=dev).to(dt)
    ids, wb, dy7 = torch.tensor([3, 7, 3, 0, 49, 7, 3], device=dev), r(50, 64), r(7, 64, dt=torch.float32)
    x2, wn, wd, x3 = r(5, 64), r(64), r(16), r(4, 2, 16)
    rstd = torch.ones(5, device=dev)
    xa, wk, wk9 = r(2, 8), r(4, 8), r(4, 9)
    pos3 = torch.arange(4, device=dev)
    q, k, v = r(6, 4, 16), r(6, 2, 16), r(6, 2, 16)
    cu, pq = torch.tensor([0, 6], device=dev), torch.arange(6, device=dev)
    lse = torch.zeros(6, 4, device=dev)
    g, lg, tg = r(3, 10), torch.randn(3, 100, device=dev), torch.tensor([1, 50, 99], device=dev)
    before = json.loads(K.calls())
    bad = []
    for op, src, want in json.loads(sys.argv[1]):
        try:
            getattr(K, op)(*eval("(" + src + ",)"))
            bad.append(f"{op}({src}): did not raise")
        except RuntimeError as e:
            msg = str(e).splitlines()[0]
            if f"ws1_cuda::{op}" not in msg or want not in msg:
                bad.append(f"{op}({src}): raised {msg[:200]!r}, expected ws1_cuda::{op} and {want!r}")
    torch.cuda.synchronize()
    after = json.loads(K.calls())
    if after != before:
        bad.append(f"calls() counted raising calls: {before} -> {after}")
    y = K.det_gemm(xa, wk)       # the process and the device still work
    torch.cuda.synchronize()
    assert y.shape == (2, 4) and bool(torch.isfinite(y.float()).all())
    print(json.dumps({"checked": len(json.loads(sys.argv[1])), "bad": bad}))
""")


@pytest.mark.skipif(_WHY is not None, reason=str(_WHY))
def test_every_entry_point_raises_a_runtime_error_and_the_process_lives_on():
    import json

    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (
        f"the child died (exit {r.returncode}; -11 is a segfault):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["checked"] == len(CASES) and not out["bad"], "\n".join(out["bad"])


def test_every_entry_point_has_a_bad_input_case():  # runs everywhere: the table covers the registration file
    import re
    from pathlib import Path

    ops = re.findall(r'm\.def\("(\w+)\(', (Path(__file__).resolve().parents[1] / "csrc" / "ws1_cuda.cpp").read_text())
    missing = sorted(set(ops) - {"calls"} - {op for op, _, _ in CASES})
    assert not missing, f"entry points without a bad-input case: {missing}"
