"""attention: causal GQA attention over packed variable-length sequences, one kernel for prefill,
chunked prefill and decode.

Shapes: q [Tq, Hq, D] BF16, k, v [Tk, Hkv, D] BF16 (Hq % Hkv == 0), cu_seqlens_q / cu_seqlens_k
[B+1] int64, q_pos [Tq] int64 (each query's absolute position; it sees keys 0..q_pos) -> [Tq, Hq, D] BF16.

Keys are reduced in fixed tiles aligned to absolute key position 0 with an FP32 online softmax,
and keys past a query's position are never touched, so a query's output bits are the same
whether it is computed in a full prefill, in a 7-token chunk, or alone in a decode step.
Backward (dq, dk, dv) is per sequence; packing or batching cannot change its bits.

``chunk=c`` runs the forward the way chunked prefill does — queries in chunks of ``c`` absolute
positions, each chunk against keys 0..end of the chunk — so a training step can run (and be judged
on) the chunked arithmetic. Its backward is the canonical one (docs/design.md §7): dK/dV are row
reductions over queries, so they run over the whole sequence in one fixed order, exactly as after
a full prefill; autograd summing per-chunk partial dK would depend on the chunking.
"""

from __future__ import annotations

import math

import torch

from ..errors import check, check_float, check_rank, value_checks
from ._common import backward, start

OP = "attention"


class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, q_pos, scale):
        kern = start(OP, q, k, v)
        out, lse = kern.fwd(q, k, v, cu_q, cu_k, q_pos, scale)
        ctx.kern, ctx.scale = kern, scale
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, q_pos)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, cu_q, cu_k, q_pos = ctx.saved_tensors
        dq, dk, dv = backward(ctx.kern, dout.contiguous(), q, k, v, out, lse, cu_q, cu_k, q_pos, ctx.scale)
        return dq, dk, dv, None, None, None, None


class ChunkedAttention(Attention):
    """Forward in query chunks aligned to absolute positions; backward as :class:`Attention`."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, q_pos, scale, chunk):
        kern = start(OP, q, k, v)
        out = q.new_empty(q.shape)
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
        for idx, sub_q, sub_k in _chunks(cu_q, cu_k, q_pos, chunk):
            keys = torch.cat([torch.arange(int(cu_k[b]), int(cu_k[b]) + n, device=k.device) for b, n in sub_k])
            cu_sub_k = _offsets([n for _, n in sub_k], k.device)
            o, ls = kern.fwd(
                q.index_select(0, idx),
                k.index_select(0, keys),
                v.index_select(0, keys),
                sub_q,
                cu_sub_k,
                q_pos.index_select(0, idx),
                scale,
            )
            out.index_copy_(0, idx, o)
            lse.index_copy_(0, idx, ls)
        ctx.kern, ctx.scale = kern, scale
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, q_pos)
        return out

    @staticmethod
    def backward(ctx, dout):
        return (*Attention.backward(ctx, dout), None)


def _offsets(lengths: list[int], device) -> torch.Tensor:
    return torch.tensor([0, *lengths], dtype=torch.int64, device=device).cumsum(0)


def _chunks(cu_q: torch.Tensor, cu_k: torch.Tensor, q_pos: torch.Tensor, chunk: int):
    """Per chunk c (positions [c*chunk, (c+1)*chunk)): the query rows it holds, their cu_seqlens
    [B'+1], and (sequence, key count) pairs — keys 0..the chunk's last query position."""
    B = cu_q.numel() - 1
    last = int(q_pos.max()) if q_pos.numel() else -1
    for c in range(last // chunk + 1):
        rows, lens, keys = [], [], []
        for b in range(B):
            qs, qe = int(cu_q[b]), int(cu_q[b + 1])
            p = q_pos[qs:qe]
            sel = torch.nonzero((p >= c * chunk) & (p < (c + 1) * chunk)).flatten()
            if sel.numel():
                rows.append(sel + qs)
                lens.append(sel.numel())
                keys.append((b, int(p[sel].max()) + 1))
        if rows:
            yield torch.cat(rows), _offsets(lens, cu_q.device), keys


def attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    q_pos: torch.Tensor,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward kernel without autograd: (out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32), ``attention``'s bits and its
    log-sum-exp (m + log l). For code that runs its own backward (ws1_dist's context parallel)."""
    scale = _checked(q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale)
    kern = start(OP, q, k, v)
    with torch.no_grad():
        return kern.fwd(*_dense(q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos), scale)


def attention_bwd_partial(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    q_pos: torch.Tensor,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward kernel on the queries given, unrounded: (dq [Tq, Hq, D], dk, dv [Tk, Hkv, D]) FP32.

    dq is each query's own sum over its keys (the bits ``attention``'s backward gives that query). dk/dv are the
    sums over *these* queries only, in the kernel's order (heads of the group ascending, queries ascending): called on
    one aligned chunk of a sequence's queries at a time, they are the leaves of the context-parallel tree
    (``ws1_ops.tree_sum`` over the chunks, rounded once; docs/parallel.md). ``dout`` [Tq, Hq, D] BF16, ``out`` and
    ``lse`` what :func:`attention_lse` gave these queries (a query's out/lse do not depend on its neighbours)."""
    scale = _checked(q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale)
    check(dout.shape == q.shape and out.shape == q.shape, OP, "dout and out must have q's shape")
    check(lse.shape == q.shape[:2], OP, f"lse must be [{q.shape[0]}, {q.shape[1]}], got {tuple(lse.shape)}")
    kern = start(OP, q, k, v)
    with torch.no_grad():
        dq, dk, dv = backward(kern, *_dense(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, q_pos), scale)
    return dq.float(), dk.float(), dv.float()


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    q_pos: torch.Tensor,
    scale: float | None = None,
    chunk: int | None = None,
) -> torch.Tensor:
    """Causal varlen GQA attention -> [Tq, Hq, D] BF16 (see the module docstring for shapes).

    ``chunk``: run the forward as chunked prefill with chunks of ``chunk`` absolute positions."""
    scale = _checked(q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale)
    args = _dense(q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos)
    if chunk is not None:
        check(isinstance(chunk, int) and chunk > 0, OP, f"chunk must be a positive int, got {chunk!r}")
        return ChunkedAttention.apply(*args, scale, chunk)
    return Attention.apply(*args, scale)


def _dense(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The kernels read dense row-major tensors."""
    return tuple(t.contiguous() for t in ts)


def _checked(q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale) -> float:
    """Validate attention's inputs (one line naming the problem); the scale, 1/sqrt(D) by default."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float(t, OP, name, ("bfloat16",))
        check_rank(t, 3, OP, name, "[T, heads, D]")
    check(k.shape == v.shape, OP, f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    check(q.shape[2] == k.shape[2], OP, f"head_dim mismatch: q {q.shape[2]}, k {k.shape[2]}")
    check(
        k.shape[1] > 0 and q.shape[1] % k.shape[1] == 0,
        OP,
        f"Hq ({q.shape[1]}) must be a multiple of Hkv ({k.shape[1]})",
    )
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k), ("q_pos", q_pos)):
        check(
            isinstance(t, torch.Tensor) and t.dtype == torch.int64 and t.dim() == 1,
            OP,
            f"{name} must be a 1-D int64 tensor",
        )
    check(
        cu_seqlens_q.shape == cu_seqlens_k.shape and cu_seqlens_q.numel() >= 2,
        OP,
        "cu_seqlens_q and cu_seqlens_k must both be [B+1], "
        f"got {tuple(cu_seqlens_q.shape)} and {tuple(cu_seqlens_k.shape)}",
    )
    if value_checks(cu_seqlens_q, cu_seqlens_k):  # a host sync on a device: see ws1_ops.trusted_inputs
        end_q, end_k = int(cu_seqlens_q[-1]), int(cu_seqlens_k[-1])
        check(
            end_q == q.shape[0] and end_k == k.shape[0],
            OP,
            f"cu_seqlens end ({end_q}, {end_k}) must equal Tq={q.shape[0]}, Tk={k.shape[0]}",
        )
    check(q_pos.shape == (q.shape[0],), OP, f"q_pos must be [{q.shape[0]}], got {tuple(q_pos.shape)}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[2])
    return float(scale)
