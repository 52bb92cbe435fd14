"""batch_invariant_logp on Triton: the rollout's full log-softmax, FP32, with logprob's lse kernel.

Shapes: logits [T, V] FP32 -> (logp [T, V] FP32 = logits - lse, lse [T] FP32).
Backward: d[i, v] = g[i, v] - exp(logp[i, v]) * sum_v g[i, v] (the sum: per-lane over chunks of
LSE_BLOCK lanes by absolute index, then one fixed tree — the lse reduction's order).

lse comes from :func:`~ws1_ops.triton.logprob.row_lse` — the very kernel logprob launches — so
logprob(l, t)[i] == batch_invariant_logp(l)[i, t_i] bitwise. Rows are independent programs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import counted
from .logprob import LSE_BLOCK, ROW_BLOCK, check_logits, row_lse


@counted
@triton.jit(do_not_specialize=["T"])
def batch_invariant_logp_fwd_kernel(x_ptr, lse_ptr, out_ptr, T, V, s_xt, s_ot, BLOCK: tl.constexpr):
    """out[t, v] = x[t, v] - lse[t]."""
    t = tl.program_id(0).to(tl.int64)
    v = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = v < V
    x = tl.load(x_ptr + t * s_xt + v, mask=ok, other=0.0)
    tl.store(out_ptr + t * s_ot + v, x - tl.load(lse_ptr + t), mask=ok)


@counted
@triton.jit(do_not_specialize=["T"])
def batch_invariant_logp_bwd_kernel(g_ptr, lp_ptr, d_ptr, T, V, s_gt, s_lt, s_dt, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    sv = tl.zeros((BLOCK,), dtype=tl.float32)
    for v0 in range(0, V, BLOCK):
        sv += tl.load(g_ptr + t * s_gt + v0 + lanes, mask=v0 + lanes < V, other=0.0)
    s = tl.sum(sv, 0)
    for v0 in range(0, V, BLOCK):
        ok = v0 + lanes < V
        g = tl.load(g_ptr + t * s_gt + v0 + lanes, mask=ok, other=0.0)
        lp = tl.load(lp_ptr + t * s_lt + v0 + lanes, mask=ok, other=0.0)
        tl.store(d_ptr + t * s_dt + v0 + lanes, g - tl.exp(lp) * s, mask=ok)


def batch_invariant_logp(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_logits("batch_invariant_logp", logits)
    logits = logits.contiguous()
    T, V = logits.shape
    lse = row_lse(logits)
    out = torch.empty_like(logits)
    if T:
        batch_invariant_logp_fwd_kernel[(T, triton.cdiv(V, ROW_BLOCK))](
            logits, lse, out, T, V, logits.stride(0), out.stride(0), BLOCK=ROW_BLOCK, num_warps=4
        )
    return out, lse


def batch_invariant_logp_bwd(g: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    check_logits("batch_invariant_logp_bwd", logp)
    g, logp = g.float().contiguous(), logp.contiguous()
    T, V = logp.shape
    d = torch.empty_like(logp)
    if T:
        batch_invariant_logp_bwd_kernel[(T,)](
            g, logp, d, T, V, g.stride(0), logp.stride(0), d.stride(0), BLOCK=LSE_BLOCK, num_warps=8
        )
    return d
