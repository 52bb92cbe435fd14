"""Context parallel for WS1's attention in the parallel-invariant order: one long sequence's tokens across ranks,
the same attention output, log-sum-exp, dq, dk and dv at CP 1, 2, 4 (and the same log-probs through the model).

    cp = ws1_dist.ContextParallel(seq_len, group)          # rank r holds tokens cp.tokens (an aligned block)
    out = cp.attention(q, k, v)                             # q [n, Hq, D], k, v [n, Hkv, D]: this rank's tokens
    logp = ws1_dist.cp_logprobs(model, ids, cp)             # the model on this rank's tokens, every layer through it

The sequence is cut into query chunks of :data:`CP_CHUNK` positions aligned to position 0; rank r of W holds the
aligned block ``dp_block(n_chunks, W, r)`` of chunks (B = a power of two chunks each, the last rank's cut at the
sequence's end). Which reductions does the split cut?

* **Forward: none.** The ranks all-gather K and V (BF16 copies: the bits cross unchanged) and each rank runs WS1's
  attention kernel on its own queries against keys 0..its last position. The kernel's per-query order depends only
  on the query's position and the keys before it (key tiles aligned to key 0, one FP32 online softmax in ascending
  tiles: the "merge in ascending chunk order" of docs/parallel.md, done where the query lives), so every query's
  out and lse are the one-device default bits at any CP degree. No (m, l, acc) partial has to cross: shipping
  K and V (Hkv heads, BF16) moves fewer bytes than FP32 (m, l, acc) of Hq heads would.
* **Backward dq: none** (a query's own sum over its keys, local).
* **Backward dk, dv: a sum over the queries, which the split cuts.** Each query chunk's FP32 partial
  (``ws1_ops.attention_bwd_partial``: the kernel's own order, group heads then queries ascending, over that chunk)
  is a leaf; the leaves are summed by the one pairwise tree over the chunk index (``ws1_ops.tree_sum``), so a
  rank's sum is its block's node. The nodes cross by one all-to-all (each rank receives every rank's partial of
  its own keys: a reduce-scatter's bytes, a copy, not the process group's sum), the same tree finishes them over the
  block index, and dk, dv are rounded to BF16 once. CP 1 runs the same chunk tree: the reference. This order is
  not the default backward's (one serial fold over all queries): a different order, chosen by using this module.

``cross`` (docs/parallel.md's negative controls): ``"tree"`` the order above; ``"serial_split"`` the default order
under the split (each rank one kernel call over its queries, the partials summed by the process group);
``"sum"`` (the chunk tree per rank, the process group's sum across ranks); ``"rank_fold"`` (the chunk tree per
rank, folded left to right in rank order). ``merge="ring"``: the forward of ring attention as torch's
``context_parallel`` runs it — each K/V block's BF16 output and lse merged in the order the ring delivers them
(rank r sees its own block first, then r − 1, ...) by its _SDPAMerger formula, in FP32 — our emulation, since
torch's does not run on CPU (a control: it changes the bits with the degree).

Rules: world ≤ the number of chunks and every rank holds at least one chunk; one sequence per call (pack several
sequences' CP by running one ContextParallel per sequence); the local q, k, v rows are exactly ``tokens``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import ws1_ops

from .errors import DistError
from .fsdp import dp_block

# query positions per leaf of the dK/dV tree, aligned to position 0 (fixed: never the world size); the weight
# gradients' chunk_tree order has the same leaves
CP_CHUNK = ws1_ops.TREE_CHUNK
CROSS = ("tree", "serial_split", "sum", "rank_fold")
MERGE = ("gather", "ring")


def cp_tokens(seq_len: int, world: int, rank: int) -> range:
    """The positions rank ``rank`` of ``world`` holds: an aligned block of :data:`CP_CHUNK`-position chunks."""
    if seq_len < 1:
        raise DistError(f"ws1_dist: context parallel needs a sequence of >= 1 token, got {seq_len}")
    n_chunks = -(-seq_len // CP_CHUNK)
    if world > n_chunks:
        raise DistError(
            f"ws1_dist: {seq_len} tokens are {n_chunks} chunks of {CP_CHUNK}: at most {n_chunks} context-parallel "
            f"ranks, got {world}"
        )
    block = dp_block(n_chunks, world, rank)
    if not len(block):
        raise DistError(
            f"ws1_dist: {n_chunks} chunks of {CP_CHUNK} in aligned blocks leave rank {rank} of {world} without one: "
            "use fewer ranks or a longer sequence"
        )
    return range(block.start * CP_CHUNK, min(seq_len, block.stop * CP_CHUNK))


class ContextParallel:
    """One sequence of ``seq_len`` tokens across the ranks of ``group`` (None: one device, CP 1 — the same order).
    Collective to build (the ranks' lengths are checked to agree)."""

    def __init__(self, seq_len: int, group=None, *, cross: str = "tree", merge: str = "gather"):
        if cross not in CROSS:
            raise DistError(f"ws1_dist: cross must be one of {CROSS}, got {cross!r}")
        if merge not in MERGE:
            raise DistError(f"ws1_dist: merge must be one of {MERGE}, got {merge!r}")
        distributed = group is not None or (dist.is_available() and dist.is_initialized())
        self.group = group if group is not None else (dist.group.WORLD if distributed else None)
        self.world = dist.get_world_size(self.group) if distributed else 1
        self.rank = dist.get_rank(self.group) if distributed else 0
        self.seq_len, self.cross, self.merge = seq_len, cross, merge
        self.tokens = cp_tokens(seq_len, self.world, self.rank)
        # every rank's block, in rows of the padded gather (all blocks padded to the first one's length)
        self.blocks = [cp_tokens(seq_len, self.world, r) for r in range(self.world)]
        self.rows = len(self.blocks[0])
        if self.world > 1:
            mine = torch.tensor([seq_len], dtype=torch.int64, device="cpu")
            every = [torch.empty_like(mine) for _ in range(self.world)]
            dist.all_gather(every, mine, group=self.group)
            lengths = [int(t) for t in every]
            if len(set(lengths)) != 1:
                raise DistError(f"ws1_dist: the ranks disagree on the sequence length: {lengths}")

    @property
    def positions(self) -> torch.Tensor:
        """[n] int64: this rank's positions (rope's and attention's), on the host."""
        return torch.arange(self.tokens.start, self.tokens.stop, dtype=torch.int64, device="cpu")

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal GQA attention of this rank's queries over the whole sequence's keys: q [n, Hq, D], k, v [n, Hkv, D]
        BF16 (this rank's tokens) -> [n, Hq, D] BF16, differentiable in q, k and v. Collective."""
        n = len(self.tokens)
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 3 or t.shape[0] != n:
                raise DistError(
                    f"ws1_dist: {name} must be [{n}, heads, head_dim] (this rank's tokens), got {tuple(t.shape)}"
                )
        return _CPAttention.apply(q, k, v, self)

    # ---- pieces --------------------------------------------------------------------------------

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's rows of ``t`` [n_r, ...] in sequence order -> [seq_len, ...] (a copy: the bits unchanged)."""
        if self.world == 1:
            return t
        padded = t.new_zeros((self.rows, *t.shape[1:]))
        padded[: t.shape[0]] = t
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded.contiguous(), group=self.group)
        return torch.cat([p[: len(b)] for p, b in zip(parts, self.blocks)])

    def chunks(self) -> list[tuple[int, int, int]]:
        """This rank's query chunks: (global chunk index, first local row, end local row)."""
        start, stop = self.tokens.start, self.tokens.stop
        return [(c // CP_CHUNK, c - start, min(c + CP_CHUNK, stop) - start) for c in range(start, stop, CP_CHUNK)]

    def finish(self, node: torch.Tensor) -> torch.Tensor:
        """``node`` [X, seq_len, ...] FP32: this rank's partial of every key's sum -> [X, n, ...] FP32, the whole sum
        of this rank's keys (``cross``'s order). Collective."""
        mine = slice(self.tokens.start, self.tokens.stop)
        if self.world == 1:
            return node[:, mine]
        if self.cross in ("serial_split", "sum"):
            dist.all_reduce(node, op=dist.ReduceOp.SUM, group=self.group)
            return node[:, mine]
        # each rank sends rank o the rows of o's block, padded to one length: all_to_all of equal pieces
        send = node.new_zeros((self.world, node.shape[0], self.rows, *node.shape[2:]))
        for o, b in enumerate(self.blocks):
            send[o, :, : len(b)] = node[:, b.start : b.stop]
        parts = torch.empty_like(send)  # parts[r]: rank r's partial of this rank's keys
        dist.all_to_all_single(parts.view(self.world, -1), send.view(self.world, -1), group=self.group)
        n = len(self.tokens)
        if self.cross == "tree":
            return ws1_ops.tree_sum([(r, parts[r, :, :n]) for r in range(self.world)])
        total = parts[0, :, :n].clone()  # rank_fold: left to right in rank order
        for r in range(1, self.world):
            total = total + parts[r, :, :n]
        return total


class _CPAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cp: ContextParallel):
        keys_k, keys_v = cp.gather(k.detach()), cp.gather(v.detach())
        end = cp.tokens.stop  # this rank's queries see keys 0..end-1
        pos = cp.positions.to(q.device)
        if cp.merge == "ring":
            out, lse = _ring_forward(cp, q.detach(), keys_k, keys_v, pos)
        else:
            out, lse = ws1_ops.attention_lse(
                q.detach(), keys_k[:end], keys_v[:end], _cu(q.shape[0], q.device), _cu(end, q.device), pos
            )
        ctx.cp, ctx.kernels = cp, ws1_ops.in_force()  # the backward's kernel calls run on the forward's kernels
        ctx.save_for_backward(q, keys_k, keys_v, out, lse, pos)
        return out

    @staticmethod
    def backward(ctx, dout):
        with ctx.kernels():
            return _backward(ctx, dout)


def _backward(ctx, dout):
    """_CPAttention's backward (see the module docstring), on the forward's kernels."""
    cp: ContextParallel = ctx.cp
    q, keys_k, keys_v, out, lse, pos = ctx.saved_tensors
    dout = dout.contiguous()
    seq, dev = cp.seq_len, q.device
    dq = torch.empty(q.shape, dtype=torch.float32, device=dev)

    def leaf(first: int, stop: int) -> torch.Tensor:
        """The FP32 (dk, dv) partial of local query rows [first, stop) over keys 0..seq-1: [2, seq, Hkv, D]."""
        e = int(pos[stop - 1]) + 1
        dq_c, dk_c, dv_c = ws1_ops.attention_bwd_partial(
            dout[first:stop],
            q[first:stop],
            keys_k[:e],
            keys_v[:e],
            out[first:stop],
            lse[first:stop],
            _cu(stop - first, dev),
            _cu(e, dev),
            pos[first:stop],
        )
        dq[first:stop] = dq_c
        node = torch.zeros((2, seq, *keys_k.shape[1:]), dtype=torch.float32, device=dev)
        node[0, :e], node[1, :e] = dk_c, dv_c
        return node

    if cp.cross == "serial_split":
        node = leaf(0, q.shape[0])  # the default order under the split: one serial fold over this rank's queries
    else:
        node = ws1_ops.tree_sum(
            [(c, lambda a=first, b=stop: leaf(a, b)) for c, first, stop in cp.chunks()]  # noqa: B023
        )
    dkv = cp.finish(node)
    return dq.to(q.dtype), dkv[0].to(keys_k.dtype), dkv[1].to(keys_v.dtype), None


def _cu(n: int, device) -> torch.Tensor:
    return torch.tensor([0, n], dtype=torch.int64, device=device)


def _ring_forward(cp: ContextParallel, q, keys_k, keys_v, pos):
    """The negative control: ring attention's forward as torch's ``context_parallel`` merges it — per K/V block in ring
    arrival order (this rank's own first, then rank − 1, ...), the block's BF16 output and lse, merged in FP32 by
    out ← out − sigmoid(lse_b − lse)·(out − out_b), lse ← lse − logsigmoid(lse − lse_b)."""
    out = lse = None
    for step in range(cp.world):
        b = cp.blocks[(cp.rank - step) % cp.world]
        sel = torch.nonzero(pos >= b.start).flatten()  # the queries that see part of the block
        if not sel.numel():
            continue
        local = torch.clamp(pos.index_select(0, sel) - b.start, max=len(b) - 1)
        o_b, l_b = ws1_ops.attention_lse(
            q.index_select(0, sel).contiguous(),
            keys_k[b.start : b.stop].contiguous(),
            keys_v[b.start : b.stop].contiguous(),
            _cu(sel.numel(), q.device),
            _cu(len(b), q.device),
            local.contiguous(),
        )
        if out is None:  # step 0 is this rank's own block: every query sees it
            out, lse = o_b.float(), l_b.float()
            continue
        o_sel, l_sel = out.index_select(0, sel), lse.index_select(0, sel)
        o_new = o_sel - torch.sigmoid(l_b - l_sel)[..., None] * (o_sel - o_b.float())
        l_new = l_sel - torch.nn.functional.logsigmoid(l_sel - l_b)
        out.index_copy_(0, sel, o_new)
        lse.index_copy_(0, sel, l_new)
    return out.to(q.dtype), lse


def cp_logprobs(model, ids: torch.Tensor, cp: ContextParallel) -> torch.Tensor:
    """WS1's Qwen3 on this rank's tokens of one sequence ``ids`` [seq_len] int64 (every rank holds all ids), every
    layer's attention through ``cp`` -> FP32 [m] the log-probs of the tokens this rank's rows predict (row p predicts
    ids[p + 1]; the sequence's last row predicts nothing). Differentiable; collective."""
    from ws1_qwen3 import Rows
    from ws1_qwen3.teacher import selected_logprobs

    if ids.dim() != 1 or ids.dtype != torch.int64 or ids.numel() != cp.seq_len:
        raise DistError(f"ws1_dist: ids must be int64 [{cp.seq_len}], got {ids.dtype} {tuple(ids.shape)}")
    pos = cp.positions
    keys = ws1_ops.logical_keys(torch.zeros_like(pos), pos)
    rows = Rows(ids[cp.tokens.start : cp.tokens.stop].cpu(), pos, keys, _cu(pos.numel(), "cpu"))
    predict = torch.nonzero(pos < cp.seq_len - 1).flatten()
    targets = ids.cpu().index_select(0, pos.index_select(0, predict) + 1)
    with model.activate():
        hidden = model.hidden(rows, attend=lambda _layer, q, k, v: cp.attention(q, k, v))
        return selected_logprobs(model, hidden, predict, keys.index_select(0, predict), targets)
