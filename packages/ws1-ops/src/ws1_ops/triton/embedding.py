"""embedding on Triton: an exact row gather; dE a segmented sum per token id in canonical row order.

Shapes: ids [T] int64, weight [V, H] -> y [T, H] (weight's dtype, BF16 in the chain).
Backward: dE [V, H] FP32; dE[v] = sum over the rows r with ids[r] == v, in canonical order, of dy[r].

Invariance: the forward copies bits. The backward groups the canonical row order by id with a
*stable* sort (rows of one id keep their canonical order; a stable sort has one answer, so the
grouping is deterministic), then one program per (id, column block) adds that id's rows serially
from +0 — the same order whatever the batch layout was. No atomics.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check_device, counted, index_on

BLOCK_H = 256


@counted
@triton.jit(do_not_specialize=["T"])
def embedding_fwd_kernel(ids_ptr, w_ptr, y_ptr, T, H, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < H
    row = tl.load(ids_ptr + t).to(tl.int64)
    tl.store(y_ptr + t * H + cols, tl.load(w_ptr + row * H + cols, mask=ok), mask=ok)


@counted
@triton.jit
def embedding_bwd_kernel(dy_ptr, rows_ptr, seg_start_ptr, seg_len_ptr, seg_id_ptr, de_ptr, H, BLOCK: tl.constexpr):
    """Segment s (one token id): dE[id] = ((0 + dy[rows[start]]) + dy[rows[start + 1]]) + ..."""
    s = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < H
    start = tl.load(seg_start_ptr + s)
    n = tl.load(seg_len_ptr + s)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, n):
        r = tl.load(rows_ptr + start + i).to(tl.int64)
        acc += tl.load(dy_ptr + r * H + cols, mask=ok, other=0.0).to(tl.float32)
    v = tl.load(seg_id_ptr + s).to(tl.int64)
    tl.store(de_ptr + v * H + cols, acc, mask=ok)


def embedding(ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """ids [T] int64, w [V, H] -> [T, H] (w's dtype)."""
    (ids,) = index_on(w, ids)
    check_device("embedding", ids, w)
    w = w.contiguous()
    T, H = ids.shape[0], w.shape[1]
    y = torch.empty(T, H, dtype=w.dtype, device=w.device)
    if T and H:
        embedding_fwd_kernel[(T, triton.cdiv(H, BLOCK_H))](ids.contiguous(), w, y, T, H, BLOCK=BLOCK_H, num_warps=2)
    return y


def embedding_dw(dy: torch.Tensor, ids: torch.Tensor, V: int, perm: torch.Tensor) -> torch.Tensor:
    """param_grad: dy [T, H], ids [T], perm [R] (canonical rows, padding dropped) -> dE [V, H] FP32."""
    ids, perm = index_on(dy, ids, perm.to(torch.int64))
    check_device("embedding_dw", dy, ids, perm)
    dy = dy.contiguous()
    H = dy.shape[1]
    de = torch.zeros(V, H, dtype=torch.float32, device=dy.device)
    if perm.numel() == 0 or H == 0:
        return de
    ids_c = ids.index_select(0, perm)
    order = torch.sort(ids_c, stable=True).indices  # by id; canonical order kept within an id
    rows = perm.index_select(0, order).contiguous()
    seg_id, seg_len = torch.unique_consecutive(ids_c.index_select(0, order), return_counts=True)
    seg_start = torch.cumsum(seg_len, 0) - seg_len
    embedding_bwd_kernel[(seg_id.numel(), triton.cdiv(H, BLOCK_H))](
        dy, rows, seg_start.contiguous(), seg_len.contiguous(), seg_id.contiguous(), de, H, BLOCK=BLOCK_H, num_warps=2
    )
    return de
