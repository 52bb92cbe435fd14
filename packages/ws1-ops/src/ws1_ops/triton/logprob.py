"""logprob on Triton: the trainer's selected-token log-probability, FP32, with the one shared lse.

Shapes: logits [T, V] FP32, targets [T] int64 -> (logp [T] FP32, lse [T] FP32),
logp[i] = logits[i, t_i] - lse_i. Backward: dlogits[i, v] = g_i * (onehot(v == t_i) - exp(logits[i, v] - lse_i)).

One lse routine for both log-prob nodes: :data:`row_lse_kernel` is a single compiled kernel
that logprob and batch_invariant_logp both launch, so their lse values are the same bits, and
logprob(l, t)[i] == batch_invariant_logp(l)[i, t_i] is the same FP32 subtraction of the same
operands. Per row, lanes are fixed by absolute index (lane = v mod LSE_BLOCK): pass 1 keeps a
per-lane max over the V/LSE_BLOCK chunks, pass 2 a per-lane sum of exp(x - m); each is folded by
one fixed tree at the end. The order depends on V alone; one program per row, rows independent.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check_device, counted, index_on

LSE_BLOCK = 4096  # lanes of the lse reduction (fixed; the order depends on V only)
ROW_BLOCK = 2048  # columns per program of the elementwise passes (any value: no reduction)


@counted
@triton.jit(do_not_specialize=["T"])
def row_lse_kernel(x_ptr, lse_ptr, T, V, s_xt, BLOCK: tl.constexpr):
    """lse[t] = m + log(sum_v exp(x[t, v] - m)), m = max_v x[t, v]."""
    t = tl.program_id(0).to(tl.int64)
    row = x_ptr + t * s_xt
    lanes = tl.arange(0, BLOCK)
    mv = tl.full((BLOCK,), float("-inf"), tl.float32)
    for v0 in range(0, V, BLOCK):
        x = tl.load(row + v0 + lanes, mask=v0 + lanes < V, other=float("-inf"))
        mv = tl.maximum(mv, x)
    m = tl.max(mv, 0)
    sv = tl.zeros((BLOCK,), dtype=tl.float32)
    for v0 in range(0, V, BLOCK):
        x = tl.load(row + v0 + lanes, mask=v0 + lanes < V, other=float("-inf"))
        sv += tl.exp(x - m)
    tl.store(lse_ptr + t, m + tl.log(tl.sum(sv, 0)))


@counted
@triton.jit(do_not_specialize=["T"])
def logprob_fwd_kernel(x_ptr, tgt_ptr, lse_ptr, out_ptr, T, s_xt, BLOCK: tl.constexpr):
    """out[t] = x[t, tgt[t]] - lse[t] (the same subtraction batch_invariant_logp does at t_i)."""
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = t < T
    tgt = tl.load(tgt_ptr + t, mask=ok, other=0)
    x = tl.load(x_ptr + t * s_xt + tgt, mask=ok, other=0.0)
    tl.store(out_ptr + t, x - tl.load(lse_ptr + t, mask=ok, other=0.0), mask=ok)


@counted
@triton.jit(do_not_specialize=["T"])
def logprob_bwd_kernel(g_ptr, x_ptr, lse_ptr, tgt_ptr, d_ptr, T, V, s_xt, s_dt, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    v = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = v < V
    x = tl.load(x_ptr + t * s_xt + v, mask=ok, other=0.0)
    g = tl.load(g_ptr + t)
    lse = tl.load(lse_ptr + t)
    tgt = tl.load(tgt_ptr + t)
    onehot = tl.where(v == tgt, 1.0, 0.0)
    tl.store(d_ptr + t * s_dt + v, g * (onehot - tl.exp(x - lse)), mask=ok)


def check_logits(op: str, logits: torch.Tensor) -> None:
    check_device(op, logits)
    if logits.dim() != 2 or logits.dtype != torch.float32 or logits.shape[1] == 0:
        raise ValueError(
            f"triton {op}: logits must be FP32 [T, V] with V > 0, got {logits.dtype} {tuple(logits.shape)}"
        )


def row_lse(logits: torch.Tensor) -> torch.Tensor:
    """[T, V] FP32 (row stride any, unit column stride) -> lse [T] FP32."""
    T, V = logits.shape
    lse = torch.empty(T, dtype=torch.float32, device=logits.device)
    if T:
        row_lse_kernel[(T,)](logits, lse, T, V, logits.stride(0), BLOCK=LSE_BLOCK, num_warps=8)
    return lse


def logprob(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_logits("logprob", logits)
    (targets,) = index_on(logits, targets)
    logits = logits.contiguous()
    T = logits.shape[0]
    lse = row_lse(logits)
    out = torch.empty(T, dtype=torch.float32, device=logits.device)
    if T:
        logprob_fwd_kernel[(triton.cdiv(T, 128),)](
            logits, targets, lse, out, T, logits.stride(0), BLOCK=128, num_warps=4
        )
    return out, lse


def logprob_bwd(g: torch.Tensor, logits: torch.Tensor, lse: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    check_logits("logprob_bwd", logits)
    logits = logits.contiguous()
    (targets,) = index_on(logits, targets)
    T, V = logits.shape
    d = torch.empty_like(logits)
    if T:
        logprob_bwd_kernel[(T, triton.cdiv(V, ROW_BLOCK))](
            g.float().contiguous(),
            logits,
            lse.float().contiguous(),
            targets,
            d,
            T,
            V,
            logits.stride(0),
            d.stride(0),
            BLOCK=ROW_BLOCK,
            num_warps=4,
        )
    return d
