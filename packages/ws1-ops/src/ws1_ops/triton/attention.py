"""attention on Triton: causal GQA over packed varlen sequences; one set of kernels for prefill,
chunked prefill and decode.

Shapes: q [Tq, Hq, D] BF16, k, v [Tk, Hkv, D] BF16 (Hq % Hkv == 0), cu_seqlens_q / cu_seqlens_k
[B+1] int64, q_pos [Tq] int64 (query i sees keys 0..q_pos[i] of its sequence)
-> (out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32, in log2 units: lse2 = log2 sum_k 2^(s2_k), the
backward's own form). Backward -> dq [Tq, Hq, D], dk, dv [Tk, Hkv, D] FP32.

A query's per-element order (forward), the same in prefill, chunked prefill and decode:

* Scores in log2 units: s2 = (q . k) * qk_scale2, qk_scale2 = fp32(scale * log2(e)) (one constant;
  exp2 / log2 instead of exp / log: the scale multiply is the only one per score).
* The keys 0..pos are cut into chunks of KV_CHUNK = 2048 keys aligned to absolute key 0, and each
  chunk into key tiles of BN = 64 keys aligned to absolute key 0. For every chunk c the query
  starts fresh (m = -inf, l = 0, acc = 0) and runs the online softmax over the chunk's tiles in
  ascending order, tiles past its position left out; per tile, in FP32:
      m' = max(m, rowmax s2);  a = 2^(m - m');  p = bf16(2^(s2 - m'))  (RNE; the P.V operand)
      l' = l * a + rowsum p;  acc' = dot(p, v, acc * a)           (BN/16 k16 MMAs chained on acc * a)
* The chunks are merged in ascending order (chunk 0 as it is, then per chunk c >= 1):
      M' = max(M, m_c);  L' = L * 2^(M - M') + l_c * 2^(m_c - M');  A' = A * 2^(M - M') + acc_c * 2^(m_c - M')
  out = bf16(A / L) (IEEE divide, RNE), lse2 = M + log2(L). A query with one chunk (pos < 2048)
  is finalized in the kernel that computed it; others write (m_c, l_c, acc_c) to a workspace and
  ``attention_fwd_merge_kernel`` folds them. Written and read back in FP32, the partials are exact, so
  the fold is the same arithmetic wherever it runs (no FMA contraction: ``_common.FP_FUSION``).
  Prefill at S <= 2048 never touches the workspace; decode of a long context splits over the chunks
  (one program per (sequence, kv head, chunk)) and merges in the same order.
* Within a program, the tiles every query of the block sees wholly (tile end <= the block's
  smallest position) run without masks; the remaining tiles run with the key mask (s2 = -inf,
  p = 0 past the position). For a query that sees the whole tile the mask is an identity, so the
  two loops give it the same bits. A masked tile can lie wholly past one query's position while
  other queries of the block need it: for that query it is a *null update* — m' = m (its m is
  finite), a = 2^0 = 1, l' = l * 1 + 0 = l, acc' = acc * 1 + MMA(zeros, v) — so its result is that
  of its own tiles alone, whoever shares the block. In IEEE arithmetic every step is exact (x * 1,
  x + 0; acc is never -0: it starts at +0 and a sum that reaches zero is +0); that the tensor cores'
  MMA of an all-zero A row returns its accumulator unchanged is the one hardware assumption
  (it is also what FlashAttention's masked tiles rely on). Before issue 24 a select kept the old
  (m, l, acc) instead; at 64 rows per warpgroup that holds a second [64, 128] FP32 accumulator and
  spilled (triton-aot: 88-688 B). The GPU tests decide it (decode == prefill, chunked == prefill,
  packed == alone; test_null_update_with_tiny_values aims at denormal accumulators).
* Keys that a masked tile reaches but no query of the block sees (past the block's largest
  position: the sequence's later keys, the next sequence's rows through a TMA descriptor, rows of a
  cache not written yet) have their V rows zeroed by a select (pointer loads: masked to zero) and
  their scores replaced by -inf, so 0 * garbage never reaches acc: the same values as alone.

Layouts (which queries share a program; they change no query's operations):
* prefill: a block is BM queries of one head (BM 128, 8 warps on Hopper: two warpgroups of 64 rows);
* decode (every sequence of the call has at most BM / GP queries): a block is up to BM / GP queries
  x the GP heads of one kv head (GQA packed along M, GP = next_pow2(Hq / Hkv)), BM 64, 4 warps on
  Hopper: K/V are read once per kv head instead of once per query head, and one program per
  (sequence, kv head, chunk) runs in parallel (split-KV). Each warpgroup owns 64 rows in both
  layouts, so the tensor-core instructions are the same (wgmma m64n64k16 for q.k, m64n128k16 for
  p.v at D 128; ``python -m ws1_matrix triton-aot`` checks the shapes are equal), and a row's bits
  rest on what the single-layout design already relied on: an MMA computes a row of its output
  from that row of its operands. The GPU tests decide it (tests_triton in device mode: decode ==
  prefill == chunked, packed == alone).
* sm_80 (any non-Hopper device): BM 64, 8 warps, pointer loads, both layouts.

Backward (FP32, no atomics, per sequence; p recomputed from lse2, not chunked):
* delta[i, h] = sum_d dout * out (one program per query token; heads are the tile's rows).
* dq: one program per (query block, head), key tiles 0.. ascending; ds = p * (dp - delta),
  dq += bf16(ds) @ k; dq *= scale. Full tiles unmasked, the rest masked (ds = 0 past the position:
  the null update, as in the forward).
* dk, dv: one program per (key tile of BN_KV keys of one sequence, kv head); it loops over the group's
  query heads ascending, then the sequence's query tiles ascending from the first tile that can see
  the key tile (all earlier ones contribute nothing; which tile is first is fixed per sequence),
  dv += bf16(p)^T @ dout, dk += bf16(ds)^T @ q; dk *= scale. The order is fixed per sequence, so
  packing, batch order and the other sequences cannot change a bit; a key's rows of dk, dv come
  from its own rows of k, v, so the key tiling changes no key's operations.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ..errors import graph_safe_now
from ._common import arch, bf16_operand, check_device, counted, dot, dot_f32, index_on, next_pow2, rne_bf16

BN = 64  # keys per tile, every arch and path (part of every query's order)
KV_CHUNK = 2048  # keys per split-KV chunk, aligned to absolute key 0 (a multiple of BN; every path)
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class FwdConfig:
    BM: int  # rows (query, head) per program
    num_warps: int
    num_stages: int


# Forward configurations per arch and layout (fixed; see the module docstring). Hopper: 64 rows per
# warpgroup in both layouts (the same wgmma shapes). sm_80: 8 warps (4 spilled at head_dim 128).
FWD = {
    "sm90": {
        "prefill": FwdConfig(BM=128, num_warps=8, num_stages=2),
        "decode": FwdConfig(BM=64, num_warps=4, num_stages=3),
    },
    "sm80": {
        "prefill": FwdConfig(BM=64, num_warps=8, num_stages=2),
        "decode": FwdConfig(BM=64, num_warps=8, num_stages=2),
    },
}
MERGE_ROWS = 16  # (query, head) rows per program of the merge kernel
PLAN_LANES = 128  # sequences per step of the device plan's one program
WS_BUDGET_BYTES = 64 << 20  # a device plan's split-KV workspace sized for any input while within this


@dataclass(frozen=True)
class BwdConfig:
    BM: int  # dq: queries per program; dk/dv: queries per inner step
    BN_KV: int  # dk/dv: keys per program
    warps_dq: int
    warps_kv: int
    stages_kv: int


# Backward: dk/dv on Hopper with 64-key programs (wgmma needs 64 rows; 8 warps keep dk and dv at 32
# registers each) and one stage: with two, Triton 3.6 (the H200 image's) spilled 280 B at head_dim 128
# (3.9 did not); on sm_80 32-key programs (a 64-key program spilled at head_dim 128).
BWD = {
    "sm90": BwdConfig(BM=64, BN_KV=64, warps_dq=4, warps_kv=8, stages_kv=1),
    "sm80": BwdConfig(BM=64, BN_KV=32, warps_dq=8, warps_kv=8, stages_kv=2),
}


def qk_scale2(scale: float) -> float:
    """The scores' one multiplier, scale * log2(e), as the FP32 value the kernels use (rounded to nearest
    even, as torch's own FP64 -> FP32 conversion; on the host, no tensor)."""
    return struct.unpack("<f", struct.pack("<f", scale * LOG2E))[0]


# ---- tile loads --------------------------------------------------------------------------------


@triton.jit
def _rows(ptr, rows, ok, row_stride, col0, d, D, DOT_F32: tl.constexpr):
    """[len(rows), BD] tile of a [T, H, D] tensor at head offset col0 (pointer loads, zeros where not ok)."""
    t = tl.load(
        ptr + rows.to(tl.int64)[:, None] * row_stride + col0 + d[None, :],
        mask=ok[:, None] & (d < D)[None, :],
        other=0.0,
    )
    if DOT_F32:
        t = t.to(tl.float32)
    return t


@triton.jit
def _kv_tile(
    ptr,
    row0,
    end,
    col0,
    row_stride,
    D,
    BR: tl.constexpr,
    BD: tl.constexpr,
    TMA: tl.constexpr,
    ZERO_TAIL: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """Rows row0 .. row0 + BR of a [T, H, D] tensor (one head, col0 = head * D): a TMA block (Hopper;
    rows at or past ``end`` zeroed when ZERO_TAIL) or masked pointer loads (rows >= end give zeros)."""
    r = row0 + tl.arange(0, BR)
    if TMA:
        t = ptr.load([row0.to(tl.int32), col0])
        if ZERO_TAIL:
            t = tl.where((r < end)[:, None], t, 0.0)
        if DOT_F32:
            t = t.to(tl.float32)
    else:
        t = _rows(ptr, r, r < end, row_stride, col0, tl.arange(0, BD), D, DOT_F32)
    return t


@triton.jit
def _operand(x, DOT_F32: tl.constexpr):
    """An FP32 tile as a BF16 dot operand (RNE): BF16 on the GPU, its FP32 value in the interpreter."""
    if DOT_F32:
        out = bf16_operand(x).to(tl.float32)
    else:
        out = bf16_operand(x)
    return out


@triton.jit
def _scores(q, kt, qk_scale, BM: tl.constexpr, BN: tl.constexpr):
    """s2 = (q . k^T) * qk_scale2 for a [BM, BD] q and a [BN, BD] key tile."""
    return dot(q, tl.trans(kt), tl.zeros((BM, BN), dtype=tl.float32)) * qk_scale


# ---- forward -----------------------------------------------------------------------------------


@counted
@triton.jit
def attention_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    lse_ptr,
    ws_ptr,
    wml_ptr,
    cu_q_ptr,
    cu_k_ptr,
    pos_ptr,
    item_ptr,
    base_ptr,
    qk_scale,
    Tq,
    HQ,
    HKV,
    D,
    HPB,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    GP: tl.constexpr,
    KV_CHUNK: tl.constexpr,
    DOT_F32: tl.constexpr,
    TMA: tl.constexpr,
):
    """One program per (work item = (sequence, first query row, chunk), head block of HPB heads).

    Row r of the block is query r // GP of the item, head h0 + r % GP (prefill: GP = HPB = 1).
    TMA: k_ptr / v_ptr are descriptors over [Tk, Hkv * D] with blocks [BN, BD]. A row with several
    chunks writes chunk c's partial to workspace slot (base[row] + c) * HQ + head (the plan's base)."""
    item = tl.program_id(0)
    h0 = tl.program_id(1) * HPB
    # row and key indices in int32 (a [BM, BN] int64 mask costs twice the registers; T < 2^31),
    # int64 only where an index is multiplied by a row stride
    b = tl.load(item_ptr + 3 * item)
    r0 = tl.load(item_ptr + 3 * item + 1).to(tl.int32)
    c = tl.load(item_ptr + 3 * item + 2).to(tl.int32)
    q_end = tl.load(cu_q_ptr + b + 1).to(tl.int32)
    k0 = tl.load(cu_k_ptr + b).to(tl.int32)
    k_end = tl.load(cu_k_ptr + b + 1).to(tl.int32)
    kh = h0 // (HQ // HKV)
    r = tl.arange(0, BM)
    g = r % GP
    qrow = r0 + r // GP
    head = h0 + g
    r_ok = (qrow < q_end) & (g < HPB)
    pos = tl.load(pos_ptr + qrow, mask=r_ok, other=-1).to(tl.int32)
    d = tl.arange(0, BD)
    if TMA:
        # [BM / GP queries, GP heads, BD] from a [Tq, Hq, D] descriptor: rows (query, head) in the
        # block's order; rows past the sequence read other queries, which only their own rows see
        q = tl.reshape(q_ptr.load([r0, h0, 0]), (BM, BD))
        if DOT_F32:
            q = q.to(tl.float32)
    else:
        q = _rows(q_ptr, qrow, r_ok, HQ * D, head[:, None] * D, d, D, DOT_F32)
    kbeg = c * KV_CHUNK
    kend = tl.minimum(kbeg + KV_CHUNK, tl.max(pos, 0) + 1)  # exclusive, chunk-relative end
    min_pos = tl.min(tl.where(r_ok, pos, 2147483647), 0)
    full_end = tl.maximum(kbeg, tl.minimum(kend, (min_pos + 1) // BN * BN))  # tiles every row sees wholly
    has = r_ok & (pos >= kbeg)  # this chunk holds keys of the row
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, BD), dtype=tl.float32)
    col = kh * D
    for j in range(kbeg, full_end, BN):
        kt = _kv_tile(k_ptr, k0 + j, k_end, col, HKV * D, D, BN, BD, TMA, False, DOT_F32)
        vt = _kv_tile(v_ptr, k0 + j, k_end, col, HKV * D, D, BN, BD, TMA, False, DOT_F32)
        s = _scores(q, kt, qk_scale, BM, BN)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = _operand(tl.exp2(s - m_new[:, None]), DOT_F32)
        l_i = l_i * alpha + tl.sum(p.to(tl.float32), 1)
        acc = dot(p, vt, acc * alpha[:, None])
        m_i = m_new
    # V rows no query of the block sees (past the sequence, or past its largest position: other
    # sequences' rows, or cache rows not written yet) are zeroed, so 0 * garbage never reaches acc
    v_end = tl.minimum(k_end, k0 + kend)
    for j in range(full_end, kend, BN):
        kt = _kv_tile(k_ptr, k0 + j, k_end, col, HKV * D, D, BN, BD, TMA, False, DOT_F32)
        vt = _kv_tile(v_ptr, k0 + j, v_end, col, HKV * D, D, BN, BD, TMA, True, DOT_F32)
        live = (j + tl.arange(0, BN))[None, :] <= pos[:, None]
        s = tl.where(live, _scores(q, kt, qk_scale, BM, BN), float("-inf"))
        # a row this tile is wholly past (pos < j): alpha = 1 (its m is finite and unchanged), p = 0,
        # so l * 1 + 0 = l and acc * 1 + (an MMA of zeros) = acc (the null update; module docstring)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = _operand(tl.where(live, tl.exp2(s - m_new[:, None]), 0.0), DOT_F32)
        l_i = l_i * alpha + tl.sum(p.to(tl.float32), 1)
        acc = dot(p, vt, acc * alpha[:, None])
        m_i = m_new
    d = tl.arange(0, BD)
    dm = (d < D)[None, :]
    fin = has & (pos < KV_CHUNK)  # the row's only chunk (then c == 0): finalize here
    part = has & (pos >= KV_CHUNK)  # one of several chunks: a partial for the merge
    out_off = qrow.to(tl.int64)[:, None] * (HQ * D) + head[:, None] * D + d[None, :]
    tl.store(o_ptr + out_off, rne_bf16(tl.div_rn(acc, l_i[:, None])), mask=fin[:, None] & dm)
    tl.store(lse_ptr + qrow.to(tl.int64) * HQ + head, m_i + tl.log2(l_i), mask=fin)
    base = tl.load(base_ptr + qrow, mask=part, other=-1)
    part = part & (base >= 0)  # a device plan's bad or overflowing row has none (merge: NaN)
    slot = (base.to(tl.int64) + c) * HQ + head
    tl.store(ws_ptr + slot[:, None] * D + d[None, :], acc, mask=part[:, None] & dm)
    tl.store(wml_ptr + 2 * slot, m_i, mask=part)
    tl.store(wml_ptr + 2 * slot + 1, l_i, mask=part)


@counted
@triton.jit(do_not_specialize=["R"])
def attention_fwd_merge_kernel(
    ws_ptr,
    wml_ptr,
    o_ptr,
    lse_ptr,
    pos_ptr,
    base_ptr,
    stat_ptr,
    R,
    HQ,
    D,
    BR: tl.constexpr,
    BD: tl.constexpr,
    KV_CHUNK: tl.constexpr,
    CHECKED: tl.constexpr,
):
    """Rows (t, h) = t * HQ + h with more than one chunk: fold the chunks' (m, l, acc) from slots
    (base[t] + c) * HQ + h in ascending order (module docstring), then out = bf16(A / L), lse2 = M +
    log2(L). Single-chunk rows: skipped (the forward kernel finalized them). CHECKED (a plan made on
    the device, which no host validated): every row of a call whose plan is not ok (stat[0] == 0), and
    each row whose position lies outside its sequence's keys (base == -2), gets NaN out and lse."""
    rows = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    ok = rows < R
    t = rows // HQ
    h = rows % HQ
    pos = tl.load(pos_ptr + t, mask=ok, other=0)
    n = pos // KV_CHUNK + 1
    act = ok & (n > 1)
    if CHECKED:
        b_all = tl.load(base_ptr + t, mask=ok, other=0)
        st = tl.load(stat_ptr + 0 * t, mask=ok, other=0)  # the status as a row vector (one address)
        bad = ok & ((b_all == -2) | (st == 0))
        act = act & (b_all != -2) & (st != 0)
    base = tl.load(base_ptr + t, mask=act, other=0).to(tl.int64)
    d = tl.arange(0, BD)
    dm = (d < D)[None, :]
    slot0 = base * HQ + h
    m_i = tl.load(wml_ptr + 2 * slot0, mask=act, other=0.0)
    l_i = tl.load(wml_ptr + 2 * slot0 + 1, mask=act, other=1.0)
    acc = tl.load(ws_ptr + slot0[:, None] * D + d[None, :], mask=act[:, None] & dm, other=0.0)
    for c in range(1, tl.max(tl.where(act, n, 1), 0)):
        live = act & (c < n)
        slot = (base + c) * HQ + h
        mc = tl.load(wml_ptr + 2 * slot, mask=live, other=0.0)
        lc = tl.load(wml_ptr + 2 * slot + 1, mask=live, other=0.0)
        ac = tl.load(ws_ptr + slot[:, None] * D + d[None, :], mask=live[:, None] & dm, other=0.0)
        m_new = tl.maximum(m_i, mc)
        a = tl.exp2(m_i - m_new)
        bc = tl.exp2(mc - m_new)
        l_new = l_i * a + lc * bc
        acc_new = acc * a[:, None] + ac * bc[:, None]
        m_i = tl.where(live, m_new, m_i)
        l_i = tl.where(live, l_new, l_i)
        acc = tl.where(live[:, None], acc_new, acc)
    tl.store(o_ptr + rows[:, None] * D + d[None, :], rne_bf16(tl.div_rn(acc, l_i[:, None])), mask=act[:, None] & dm)
    tl.store(lse_ptr + rows, m_i + tl.log2(l_i), mask=act)
    if CHECKED:
        nan = float("nan")
        tl.store(
            o_ptr + rows[:, None] * D + d[None, :],
            tl.full((BR, BD), nan, tl.float32).to(tl.bfloat16),
            mask=bad[:, None] & dm,
        )
        tl.store(lse_ptr + rows, tl.full((BR,), nan, tl.float32), mask=bad)


# ---- the plan on the device (graph capture: ws1_ops.graph_safe) ----------------------------------

SENTINEL_CHUNK = 1 << 19  # a work item that does nothing: chunk start 2^30 lies past every position


@counted
@triton.jit(do_not_specialize=["B", "Tq", "Tk", "PER", "CAP", "CAP_SLOTS"])
def attention_plan_kernel(
    cu_q_ptr,
    cu_k_ptr,
    pos_ptr,
    item_ptr,
    base_ptr,
    stat_ptr,
    B,
    Tq,
    Tk,
    PER,
    CAP,
    CAP_SLOTS,
    SB: tl.constexpr,
    KV_CHUNK: tl.constexpr,
    SENT: tl.constexpr,
):
    """The forward's work items and workspace slots from cu_seqlens / q_pos, on the device (one program;
    no host sync, so a captured forward plans each replay from its own inputs). Sequences in blocks of SB
    (vector lanes), in order, with running totals (integers: exact):

    * sequence b (valid cu_seqlens): ntiles = ceil(lq / PER) query tiles of PER queries from cu_q[b];
      nch = (its largest valid position) // KV_CHUNK + 1 chunks (1 if it has none); its items are
      (b, cu_q[b] + i * PER, c) for i < ntiles, c < nch, tile-major, after the earlier sequences' items.
      An item whose chunk lies past a tile's positions computes nothing (the forward's loops are empty
      and its stores masked): the same rows get the same programs' work as in the host plan.
    * row t with a valid position p >= KV_CHUNK (several chunks): base[t] = its first of p // KV_CHUNK + 1
      workspace slots, after the earlier rows' slots; a valid single-chunk row: -1; a row whose position
      is outside its sequence's keys, or whose slots would lie past CAP_SLOTS: -2 (no partial is written;
      the merge writes NaN there).
    * items [total, CAP) are sentinels (0, max(Tq - 1, 0), SENT): a chunk past every position, so the
      program's loops are empty and it stores nothing (its first row is a real one: a TMA load of the
      query tile starts inside the tensor).
    * stat[0] = 1 if cu_seqlens are consistent (start 0, non-decreasing, end Tq / Tk) and the items and
      slots fit CAP / CAP_SLOTS, else 0: the merge then writes NaN to every row (nothing is raised on a
      device; NaN is what a bad input gives under capture, as in ws1_cuda)."""
    bad = (
        (tl.load(cu_q_ptr) != 0)
        | (tl.load(cu_k_ptr) != 0)
        | (tl.load(cu_q_ptr + B) != Tq)
        | (tl.load(cu_k_ptr + B) != Tk)
    )
    n_items = tl.full((), 0, tl.int64)
    n_slots = tl.full((), 0, tl.int64)
    lane = tl.arange(0, SB)
    for b0 in range(0, B, SB):
        b = b0 + lane
        okb = b < B
        q0 = tl.load(cu_q_ptr + b, mask=okb, other=0)
        q1 = tl.load(cu_q_ptr + b + 1, mask=okb, other=0)
        k0 = tl.load(cu_k_ptr + b, mask=okb, other=0)
        k1 = tl.load(cu_k_ptr + b + 1, mask=okb, other=0)
        seq_ok = (0 <= q0) & (q0 <= q1) & (q1 <= Tq) & (0 <= k0) & (k0 <= k1) & (k1 <= Tk)
        bad = bad | (tl.sum((okb & (seq_ok == 0)).to(tl.int32), 0) > 0)
        lq = tl.where(okb & seq_ok, q1 - q0, 0)
        kl = k1 - k0
        mp = tl.full((SB,), -1, tl.int64)
        slots = tl.zeros((SB,), tl.int64)
        for i in range(0, tl.max(lq, 0)):  # pass 1: largest position, slots per sequence
            live = i < lq
            p = tl.load(pos_ptr + q0 + i, mask=live, other=-1)
            valid = live & (p >= 0) & (p < kl)
            mp = tl.maximum(mp, tl.where(valid, p, -1))
            slots += tl.where(valid & (p >= KV_CHUNK), p // KV_CHUNK + 1, 0)
        ntiles = (lq + PER - 1) // PER
        nch = tl.where(mp >= 0, mp // KV_CHUNK + 1, 1)
        items = ntiles * nch
        first_item = n_items + tl.cumsum(items, 0) - items
        first_slot = n_slots + tl.cumsum(slots, 0) - slots
        run = first_slot
        for i in range(0, tl.max(lq, 0)):  # pass 2: each row's base
            live = i < lq
            p = tl.load(pos_ptr + q0 + i, mask=live, other=-1)
            valid = live & (p >= 0) & (p < kl)
            multi = valid & (p >= KV_CHUNK)
            need = tl.where(multi, p // KV_CHUNK + 1, 0)
            fits = run + need <= CAP_SLOTS  # never a slot past the workspace
            tl.store(
                base_ptr + q0 + i, tl.where(multi & fits, run, tl.where(valid & fits, -1, -2)).to(tl.int32), mask=live
            )
            run += need
        for i in range(0, tl.max(ntiles, 0)):  # the items, tile-major
            for c in range(0, tl.max(tl.where(i < ntiles, nch, 0), 0)):
                w = first_item + i * nch + c
                m = (i < ntiles) & (c < nch) & (w < CAP)
                tl.store(item_ptr + 3 * w, b.to(tl.int64), mask=m)
                tl.store(item_ptr + 3 * w + 1, q0 + i * PER, mask=m)
                tl.store(item_ptr + 3 * w + 2, tl.zeros((SB,), tl.int64) + c, mask=m)
        n_items += tl.sum(items, 0)
        n_slots += tl.sum(slots, 0)
    for w0 in range(0, CAP, SB):  # sentinels after the last item
        w = w0 + lane
        m = (w >= n_items) & (w < CAP)
        zero = tl.zeros((SB,), tl.int64)
        tl.store(item_ptr + 3 * w, zero, mask=m)
        tl.store(item_ptr + 3 * w + 1, zero + tl.maximum(Tq - 1, 0), mask=m)
        tl.store(item_ptr + 3 * w + 2, zero + SENT, mask=m)
    ok = (bad == 0) & (n_items <= CAP) & (n_slots <= CAP_SLOTS)
    tl.store(stat_ptr, ok.to(tl.int32))


# ---- backward ----------------------------------------------------------------------------------


@counted
@triton.jit(do_not_specialize=["T"])
def attention_bwd_delta_kernel(do_ptr, o_ptr, delta_ptr, T, HQ, D, BH: tl.constexpr, BD: tl.constexpr):
    """delta[t, h] = sum_d dout[t, h, d] * out[t, h, d] (FP32), one token per program."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BH)
    d = tl.arange(0, BD)
    ok = (h < HQ)[:, None] & (d < D)[None, :]
    offs = t * HQ * D + h[:, None] * D + d[None, :]
    do = tl.load(do_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    o = tl.load(o_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(delta_ptr + t * HQ + h, tl.sum(do * o, 1), mask=h < HQ)


@counted
@triton.jit
def attention_bwd_dq_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    do_ptr,
    lse_ptr,
    delta_ptr,
    dq_ptr,
    cu_q_ptr,
    cu_k_ptr,
    pos_ptr,
    tile_ptr,
    scale,
    qk_scale,
    HQ,
    HKV,
    D,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    DOT_F32: tl.constexpr,
    TMA: tl.constexpr,
):
    """One program per (query tile of BM rows of one sequence, head); key tiles 0.. ascending."""
    tile = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.load(tile_ptr + 2 * tile)
    r0 = tl.load(tile_ptr + 2 * tile + 1).to(tl.int32)  # int32 indices: see the forward
    q_end = tl.load(cu_q_ptr + b + 1).to(tl.int32)
    k0 = tl.load(cu_k_ptr + b).to(tl.int32)
    k_end = tl.load(cu_k_ptr + b + 1).to(tl.int32)
    kh = h // (HQ // HKV)
    rows = r0 + tl.arange(0, BM)
    r_ok = rows < q_end
    pos = tl.load(pos_ptr + rows, mask=r_ok, other=-1).to(tl.int32)
    d = tl.arange(0, BD)
    q = _rows(q_ptr, rows, r_ok, HQ * D, h * D, d, D, DOT_F32)
    do = _rows(do_ptr, rows, r_ok, HQ * D, h * D, d, D, DOT_F32)
    lse = tl.load(lse_ptr + rows.to(tl.int64) * HQ + h, mask=r_ok, other=0.0)
    delta = tl.load(delta_ptr + rows.to(tl.int64) * HQ + h, mask=r_ok, other=0.0)
    dq = tl.zeros((BM, BD), dtype=tl.float32)
    kend = tl.max(pos, 0) + 1
    min_pos = tl.min(tl.where(r_ok, pos, 2147483647), 0)
    # >= 0 as in the forward: a program with no row (a device plan's sentinel tile) has min_pos + 1 wrap to -2^31,
    # which without the clamp would start the masked loop there (2^25 empty tiles); with a row it changes nothing
    full_end = tl.maximum(0, tl.minimum(kend, (min_pos + 1) // BN * BN))
    col = kh * D
    for j in range(0, full_end, BN):
        kt = _kv_tile(k_ptr, k0 + j, k_end, col, HKV * D, D, BN, BD, TMA, False, DOT_F32)
        vt = _kv_tile(v_ptr, k0 + j, k_end, col, HKV * D, D, BN, BD, TMA, False, DOT_F32)
        p = tl.exp2(_scores(q, kt, qk_scale, BM, BN) - lse[:, None])
        dp = dot(do, tl.trans(vt), tl.zeros((BM, BN), dtype=tl.float32))
        ds = _operand(p * (dp - delta[:, None]), DOT_F32)
        dq = dot(ds, kt, dq)
    v_end = tl.minimum(k_end, k0 + kend)  # rows no query of the block sees: zeroed (as the forward)
    for j in range(full_end, kend, BN):
        kt = _kv_tile(k_ptr, k0 + j, v_end, col, HKV * D, D, BN, BD, TMA, True, DOT_F32)
        vt = _kv_tile(v_ptr, k0 + j, v_end, col, HKV * D, D, BN, BD, TMA, True, DOT_F32)
        live = (j + tl.arange(0, BN))[None, :] <= pos[:, None]
        p = tl.exp2(_scores(q, kt, qk_scale, BM, BN) - lse[:, None])
        dp = dot(do, tl.trans(vt), tl.zeros((BM, BN), dtype=tl.float32))
        ds = _operand(tl.where(live, p * (dp - delta[:, None]), 0.0), DOT_F32)
        dq = dot(ds, kt, dq)  # a row the tile is wholly past: ds = 0, the null update
    tl.store(
        dq_ptr + rows.to(tl.int64)[:, None] * (HQ * D) + h * D + d[None, :],
        dq * scale,
        mask=r_ok[:, None] & (d < D)[None, :],
    )


@counted
@triton.jit
def attention_bwd_dkdv_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    do_ptr,
    lse_ptr,
    delta_ptr,
    dk_ptr,
    dv_ptr,
    cu_q_ptr,
    cu_k_ptr,
    pos_ptr,
    ktile_ptr,
    scale,
    qk_scale,
    HQ,
    HKV,
    D,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    DOT_F32: tl.constexpr,
    TMA: tl.constexpr,
):
    """One program per (tile of BN keys of one sequence, kv head): the group's heads ascending, then
    the sequence's query tiles ascending from the first that sees the key tile.
    TMA: q_ptr / do_ptr are descriptors over [Tq, Hq * D] with blocks [BM, BD] (query rows past the
    sequence zeroed), k_ptr / v_ptr over [Tk, Hkv * D] with blocks [BN, BD]."""
    tile = tl.program_id(0)
    kh = tl.program_id(1)
    b = tl.load(ktile_ptr + 2 * tile)
    j0 = tl.load(ktile_ptr + 2 * tile + 1).to(tl.int32)  # int32 indices: see the forward
    k0 = tl.load(cu_k_ptr + b).to(tl.int32)
    k_end = tl.load(cu_k_ptr + b + 1).to(tl.int32)
    q0 = tl.load(cu_q_ptr + b).to(tl.int32)
    q_end = tl.load(cu_q_ptr + b + 1).to(tl.int32)
    q_len = q_end - q0
    kj = j0 + tl.arange(0, BN)
    k_ok = (k0 + kj) < k_end
    d = tl.arange(0, BD)
    kt = _kv_tile(k_ptr, k0 + j0, k_end, kh * D, HKV * D, D, BN, BD, TMA, True, DOT_F32)
    vt = _kv_tile(v_ptr, k0 + j0, k_end, kh * D, HKV * D, D, BN, BD, TMA, True, DOT_F32)
    # the first query tile that sees a key of this tile (positions need not be monotone; a tile after
    # it that sees none adds p = 0); a property of the sequence alone
    first = q_len
    for i0 in range(0, q_len, BM):
        ii = i0 + tl.arange(0, BM)
        mx = tl.max(tl.load(pos_ptr + q0 + ii, mask=ii < q_len, other=-1).to(tl.int32), 0)
        first = tl.where((mx >= j0) & (first == q_len), i0, first)
    dk = tl.zeros((BN, BD), dtype=tl.float32)
    dv = tl.zeros((BN, BD), dtype=tl.float32)
    group = HQ // HKV
    for g in range(0, group):
        h = kh * group + g
        for i0 in range(first, q_len, BM):
            ii = i0 + tl.arange(0, BM)
            i_ok = ii < q_len
            rows = q0 + ii
            pos = tl.load(pos_ptr + rows, mask=i_ok, other=-1).to(tl.int32)
            q = _kv_tile(q_ptr, q0 + i0, q_end, h * D, HQ * D, D, BM, BD, TMA, True, DOT_F32)
            do = _kv_tile(do_ptr, q0 + i0, q_end, h * D, HQ * D, D, BM, BD, TMA, True, DOT_F32)
            lse = tl.load(lse_ptr + rows.to(tl.int64) * HQ + h, mask=i_ok, other=0.0)
            delta = tl.load(delta_ptr + rows.to(tl.int64) * HQ + h, mask=i_ok, other=0.0)
            live = kj[:, None] <= pos[None, :]
            st = dot(kt, tl.trans(q), tl.zeros((BN, BM), dtype=tl.float32)) * qk_scale  # [BN, BM]
            pt = tl.where(live, tl.exp2(st - lse[None, :]), 0.0)
            dv = dot(_operand(pt, DOT_F32), do, dv)
            dpt = dot(vt, tl.trans(do), tl.zeros((BN, BM), dtype=tl.float32))
            dst = _operand(pt * (dpt - delta[None, :]), DOT_F32)
            dk = dot(dst, q, dk)
    out = (k0 + kj).to(tl.int64)[:, None] * (HKV * D) + kh * D + d[None, :]
    ok = k_ok[:, None] & (d < D)[None, :]
    tl.store(dk_ptr + out, dk * scale, mask=ok)
    tl.store(dv_ptr + out, dv, mask=ok)


# ---- host side ---------------------------------------------------------------------------------


def _check_shapes(op: str, q, k, v) -> None:
    """Device, dtype and shape checks: no value is read (what a graph-safe call still checks)."""
    check_device(op, q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3 or t.dtype != torch.bfloat16:
            raise ValueError(f"triton {op}: {name} must be BF16 [T, heads, D], got {t.dtype} {tuple(t.shape)}")
    if k.shape != v.shape or q.shape[2] != k.shape[2] or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"triton {op}: bad head layout q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")


def _meta(op: str, q, k, v, cu_q, cu_k, q_pos) -> tuple[list[int], list[int], list[int], list[int]]:
    """Validate on the host (as ws1_cpu does) and return per-sequence query/key starts and lengths."""
    _check_shapes(op, q, k, v)
    cq, ck = cu_q.tolist(), cu_k.tolist()
    if len(cq) != len(ck) or len(cq) < 2 or cq[0] != 0 or ck[0] != 0 or cq[-1] != q.shape[0] or ck[-1] != k.shape[0]:
        raise ValueError(f"triton {op}: cu_seqlens must start at 0 and end at Tq={q.shape[0]}, Tk={k.shape[0]}")
    if any(b < a for a, b in zip(cq, cq[1:])) or any(b < a for a, b in zip(ck, ck[1:])):
        raise ValueError(f"triton {op}: cu_seqlens must be non-decreasing")
    lq = [b - a for a, b in zip(cq, cq[1:])]
    lk = [b - a for a, b in zip(ck, ck[1:])]
    if q_pos.numel():
        klen = torch.repeat_interleave(torch.tensor(lk, device=q_pos.device), torch.tensor(lq, device=q_pos.device))
        bad = (q_pos < 0) | (q_pos >= klen)
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            raise ValueError(f"triton {op}: query {i} at position {int(q_pos[i])} outside its sequence's keys")
    return cq[:-1], lq, ck[:-1], lk


def _tiles(starts: list[int], lengths: list[int], block: int, relative: bool, device) -> torch.Tensor:
    """[n, 2] int64 (sequence, first row) of every tile; rows absolute, or relative to the sequence."""
    t = [(b, (0 if relative else s) + i) for b, (s, n) in enumerate(zip(starts, lengths)) for i in range(0, n, block)]
    return torch.tensor(t, dtype=torch.int64, device=device).reshape(-1, 2)


def _tiles_on_device(cu: torch.Tensor, block: int, cap: int, relative: bool) -> torch.Tensor:
    """:func:`_tiles` built on the device from cu [B+1] (no host sync): the same rows in the same order, then
    sentinels up to ``cap`` rows (a bound from the shapes: sum_b ceil(n_b / block) <= T // block + B). A sentinel is
    (sequence 0, its end): a program on it finds no row of its sequence at or past the end, so it loads nothing
    unmasked and stores nothing."""
    B = cu.shape[0] - 1
    n = (cu[1:] - cu[:-1] + block - 1) // block  # tiles per sequence
    ends = torch.cumsum(n, 0)
    t = torch.arange(cap, dtype=torch.int64, device=cu.device)
    b = torch.searchsorted(ends, t, right=True)  # the first sequence whose tiles end past t (B: a sentinel)
    bc = b.clamp(max=B - 1)
    first = (t - (ends[bc] - n[bc])) * block + (0 if relative else cu[bc])
    end0 = cu[1] - cu[0] if relative else cu[1]
    real = b < B
    return torch.stack([torch.where(real, bc, 0), torch.where(real, first, end0)], 1)


def bwd_tiles_on_device(cu_q, cu_k, q_pos, Tq: int, Tk: int, cfg: BwdConfig):
    """The backward's plan on the device, for a graph-safe call (no host sync, nothing validated on the host):
    (cu_q, cu_k, query tiles, key tiles). What a host would refuse — cu_seqlens that do not start at 0, end at Tq / Tk
    and never decrease, a position outside its sequence's keys — is found here as a device-side flag, and the call's
    cu_seqlens are then replaced by zeros: every sequence empty, every tile a sentinel, so no kernel reads or writes
    a row and dq, dk, dv keep the NaN they start with in a graph-safe call (never a wrong value, never an
    out-of-bounds read). Valid input gives the host plan's tiles (then sentinels): the same programs, the same bits."""
    B = cu_q.shape[0] - 1
    lq, lk = cu_q[1:] - cu_q[:-1], cu_k[1:] - cu_k[:-1]
    ok = (cu_q[0] == 0) & (cu_k[0] == 0) & (cu_q[-1] == Tq) & (cu_k[-1] == Tk) & (lq >= 0).all() & (lk >= 0).all()
    if Tq:
        seq = torch.searchsorted(cu_q[1:], torch.arange(Tq, dtype=torch.int64, device=cu_q.device), right=True)
        ok = ok & ((q_pos >= 0) & (q_pos < lk[seq.clamp(max=B - 1)])).all()
    cu_q, cu_k = torch.where(ok, cu_q, 0), torch.where(ok, cu_k, 0)
    return (
        cu_q,
        cu_k,
        _tiles_on_device(cu_q, cfg.BM, Tq // cfg.BM + B, False),
        _tiles_on_device(cu_k, cfg.BN_KV, Tk // cfg.BN_KV + B, True),
    )


def _bd(D: int) -> int:
    # BD >= 16: a tl.dot needs every dimension >= 16 on the GPU (masked columns add zeros)
    return max(16, next_pow2(D))


def _tma(arch_: str, D: int, *tensors: torch.Tensor) -> bool:
    """TMA descriptors for the K/V (and, backward, Q/dO) tiles: Hopper, a power-of-two head_dim >= 16
    (a block is exactly one head), 16-byte rows and aligned bases. A function of the shapes (and of
    the allocation's alignment, which only an odd view changes); the values loaded are the same."""
    return (
        arch_ == "sm90"
        and D == _bd(D)
        and all(
            t.is_contiguous() and (t.shape[1] * D * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
            for t in tensors
        )
    )


def _desc(t: torch.Tensor, rows: int, D: int) -> TensorDescriptor:
    """A descriptor over a contiguous [T, H, D] tensor viewed as [T, H * D], blocks of one head."""
    T, H = t.shape[0], t.shape[1]
    return TensorDescriptor(t, [T, H * D], [H * D, 1], [rows, D])


@dataclass(frozen=True)
class Plan:
    """The forward's launch plan for one call (``plan`` on the host, ``plan_on_device``): layout,
    configuration, work items, workspace slots."""

    arch: str
    layout: str  # "prefill" or "decode"
    cfg: FwdConfig
    GP: int  # rows per query (heads packed along M; 1 in prefill)
    HPB: int  # heads per block
    items: torch.Tensor  # [n, 3] int64 (sequence, first query row, chunk), on the device
    base: torch.Tensor  # [Tq] int32: a several-chunk row's first workspace slot (else -1; -2 bad row)
    slots: int  # workspace slots (a slot: one (query, chunk) partial of every head)
    merge: bool  # the merge kernel runs (a row has several chunks, or the plan is unchecked)
    status: torch.Tensor | None = None  # [1] int32 of a device plan (1 ok; 0: every row NaN); None: host-checked


def _layout(q, k, decode: bool) -> tuple[str, FwdConfig, int, int]:
    """(layout, config, GP, HPB) for a call on ``q``'s device: the decode layout when asked and the
    group fits a block, else prefill. A choice of speed only: both give every row the same bits."""
    a = arch(q)
    G = q.shape[1] // k.shape[1]
    GP = next_pow2(G)
    if decode and GP <= FWD[a]["decode"].BM:
        return "decode", FWD[a]["decode"], GP, G
    return "prefill", FWD[a]["prefill"], 1, 1


def plan(q, k, v, cu_q, cu_k, q_pos) -> Plan:
    """Validate on the host and build the forward's work items (one host sync); a benchmark can reuse
    it with :func:`attention_planned`. The decode layout when every sequence has at most BM / GP
    queries."""
    qs, lq, _, _ = _meta("attention", q, k, v, cu_q, cu_k, q_pos)
    GP = next_pow2(q.shape[1] // k.shape[1])
    layout, cfg, gp, hpb = _layout(q, k, max(lq, default=0) * GP <= FWD[arch(q)]["decode"].BM)
    per = cfg.BM // gp  # queries per block
    pos = q_pos.to("cpu").tolist()
    items = []
    for bi, (s, n) in enumerate(zip(qs, lq)):
        for r0 in range(s, s + n, per):
            top = max(pos[r0 : min(s + n, r0 + per)]) // KV_CHUNK + 1
            items += [(bi, r0, c) for c in range(top)]
    base, slots = [], 0
    for p in pos:  # several-chunk rows, in row order
        n = p // KV_CHUNK + 1
        base.append(slots if n > 1 else -1)
        slots += n if n > 1 else 0
    dev = q.device
    return Plan(
        arch(q),
        layout,
        cfg,
        gp,
        hpb,
        torch.tensor(items, dtype=torch.int64, device=dev).reshape(-1, 3),
        torch.tensor(base, dtype=torch.int32, device=dev),
        slots,
        slots > 0,
    )


def plan_on_device(q, k, v, cu_q, cu_k, q_pos) -> Plan:
    """The same work on the device (``attention_plan_kernel``; no host sync, nothing validated on the
    host): what a captured forward uses (and :func:`ws1_ops.graph_safe`). Sizes come from the shapes
    alone — the launch grid is CAP items, the workspace CAP_SLOTS slots:

    * CAP = (B + Tq // per) + ceil(Tq / per) * (Tk // KV_CHUNK) >= every call's item count: a sequence
      has nt_b <= ceil(lq_b / per) tiles, nt_b summed <= B + Tq // per, and nch_b <= 1 + k_len_b //
      KV_CHUNK chunks with the k_len_b summing to Tk, so sum nt_b * nch_b <= sum nt_b + max nt_b * sum
      (k_len_b // KV_CHUNK). Items past the call's own are sentinels that do nothing.
    * CAP_SLOTS = Tq * (Tk // KV_CHUNK + 1) >= every call's slots (a row at position p < k_len_b <= Tk
      takes p // KV_CHUNK + 1 slots) where that workspace stays within WS_BUDGET_BYTES; else Tq + Tk //
      KV_CHUNK: the slots of a call with at most one query per sequence (a decode step; the positions of
      one sequence's keys sum to less than Tk). A call that needs more (several queries per sequence past
      KV_CHUNK keys, at such sizes) gets status 0: NaN rows, never a write past the workspace.

    The decode layout for calls with Tq <= B (a decode step's shape), prefill otherwise."""
    check_device("attention", q, k, v)
    B, Tq, Tk = cu_q.shape[0] - 1, q.shape[0], k.shape[0]
    layout, cfg, gp, hpb = _layout(q, k, Tq <= B)
    per = cfg.BM // gp
    cap = max(1, B + Tq // per + -(-Tq // per) * (Tk // KV_CHUNK))
    HQ, D = q.shape[1], q.shape[2]
    cap_slots = Tq * (Tk // KV_CHUNK + 1)
    if cap_slots * HQ * (D + 2) * 4 > WS_BUDGET_BYTES:
        cap_slots = Tq + Tk // KV_CHUNK
    dev = q.device
    items = torch.empty(cap, 3, dtype=torch.int64, device=dev)
    base = torch.empty(Tq, dtype=torch.int32, device=dev)
    status = torch.empty(1, dtype=torch.int32, device=dev)
    attention_plan_kernel[(1,)](
        cu_q,
        cu_k,
        q_pos,
        items,
        base,
        status,
        B,
        Tq,
        Tk,
        per,
        cap,
        cap_slots,
        SB=PLAN_LANES,
        KV_CHUNK=KV_CHUNK,
        SENT=SENTINEL_CHUNK,
        num_warps=4,
    )
    return Plan(arch(q), layout, cfg, gp, hpb, items, base, cap_slots, True, status)


def attention(q, k, v, cu_q, cu_k, q_pos, scale):
    """-> (out [Tq, Hq, D] BF16, lse2 [Tq, Hq] FP32). Planned on the host (validated, one sync), or on
    the device inside :func:`ws1_ops.graph_safe` and under CUDA graph capture."""
    cu_q, cu_k, q_pos = index_on(q, cu_q, cu_k, q_pos)
    make = plan_on_device if graph_safe_now(q) else plan
    return attention_planned(q, k, v, cu_q, cu_k, q_pos, scale, make(q, k, v, cu_q, cu_k, q_pos))


def attention_planned(q, k, v, cu_q, cu_k, q_pos, scale, p: Plan):
    """The forward launches for a plan from :func:`plan` or :func:`plan_on_device` (no host sync, no
    validation)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    Tq, HQ, D = q.shape
    HKV = k.shape[1]
    out = torch.empty_like(q)
    lse = torch.empty(Tq, HQ, dtype=torch.float32, device=q.device)
    if p.items.shape[0] == 0 or Tq == 0 or HQ == 0 or D == 0:
        return out, lse
    BD = _bd(D)
    ws_rows = max(1, p.slots * HQ)
    ws = torch.empty(ws_rows, D, dtype=torch.float32, device=q.device)
    wml = torch.empty(ws_rows, 2, dtype=torch.float32, device=q.device)
    tma = _tma(p.arch, D, q, k, v)
    qa, ka, va = q, k, v
    if tma:
        qa = TensorDescriptor(q, [Tq, HQ, D], [HQ * D, D, 1], [p.cfg.BM // p.GP, p.GP, D])
        ka, va = _desc(k, BN, D), _desc(v, BN, D)
    q_pos = q_pos.contiguous()
    attention_fwd_kernel[(p.items.shape[0], HQ // p.HPB)](
        qa,
        ka,
        va,
        out,
        lse,
        ws,
        wml,
        cu_q,
        cu_k,
        q_pos,
        p.items,
        p.base,
        qk_scale2(scale),
        Tq,
        HQ,
        HKV,
        D,
        p.HPB,
        BM=p.cfg.BM,
        BN=BN,
        BD=BD,
        GP=p.GP,
        KV_CHUNK=KV_CHUNK,
        DOT_F32=dot_f32(q, k),
        TMA=tma,
        num_warps=p.cfg.num_warps,
        num_stages=p.cfg.num_stages,
    )
    if p.merge:
        R = Tq * HQ
        checked = p.status is not None
        attention_fwd_merge_kernel[(max(1, triton.cdiv(R, MERGE_ROWS)),)](
            ws,
            wml,
            out,
            lse,
            q_pos,
            p.base,
            p.status if checked else p.base,
            R,
            HQ,
            D,
            BR=MERGE_ROWS,
            BD=BD,
            KV_CHUNK=KV_CHUNK,
            CHECKED=checked,
            num_warps=4,
        )
    return out, lse


def attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, q_pos, scale):
    """-> (dq [Tq, Hq, D], dk [Tk, Hkv, D], dv [Tk, Hkv, D]) FP32, as ws1_cpu::attention_bwd. Planned on the host
    (validated, one sync), or on the device inside :func:`ws1_ops.graph_safe` and under CUDA graph capture
    (:func:`bwd_tiles_on_device`: the same bits; refused input gives NaN in every element of dq, dk, dv)."""
    cu_q, cu_k, q_pos = index_on(q, cu_q, cu_k, q_pos)
    on_device = graph_safe_now(q, dout)
    if on_device:
        _check_shapes("attention_bwd", q, k, v)
    else:
        qs, lq, ks, lk = _meta("attention_bwd", q, k, v, cu_q, cu_k, q_pos)
    dout, q, k, v, out = (t.contiguous() for t in (dout, q, k, v, out))
    if dout.dtype != torch.bfloat16:
        dout = dout.to(torch.bfloat16)  # the gradient of a BF16 output is BF16 (exact)
    lse, q_pos = lse.float().contiguous(), q_pos.contiguous()
    Tq, HQ, D = q.shape
    HKV = k.shape[1]
    delta = torch.empty(Tq, HQ, dtype=torch.float32, device=q.device)
    if Tq == 0 or D == 0:  # no query: every gradient is zero
        return (
            torch.zeros(q.shape, dtype=torch.float32, device=q.device),
            torch.zeros(k.shape, dtype=torch.float32, device=q.device),
            torch.zeros(k.shape, dtype=torch.float32, device=q.device),
        )
    # valid input: the kernels write every element (every query row is in a query tile, every key in a key tile);
    # a device plan that refused its input writes none, so there they start as NaN
    fill = float("nan") if on_device else 0.0
    dq = torch.full(q.shape, fill, dtype=torch.float32, device=q.device)
    dk = torch.full(k.shape, fill, dtype=torch.float32, device=q.device)
    dv = torch.full(k.shape, fill, dtype=torch.float32, device=q.device)
    a = arch(q)
    cfg = BWD[a]
    if on_device:
        cu_q, cu_k, qt, kt = bwd_tiles_on_device(cu_q, cu_k, q_pos, Tq, k.shape[0], cfg)
    else:
        qt, kt = _tiles(qs, lq, cfg.BM, False, q.device), _tiles(ks, lk, cfg.BN_KV, True, q.device)
    BD = _bd(D)
    s2 = qk_scale2(scale)
    f32 = dot_f32(q, k)
    attention_bwd_delta_kernel[(Tq,)](dout, out, delta, Tq, HQ, D, BH=next_pow2(HQ), BD=BD, num_warps=4)
    tma_kv = _tma(a, D, k, v)
    ka, va = (_desc(k, BN, D), _desc(v, BN, D)) if tma_kv else (k, v)
    attention_bwd_dq_kernel[(qt.shape[0], HQ)](
        q,
        ka,
        va,
        dout,
        lse,
        delta,
        dq,
        cu_q,
        cu_k,
        q_pos,
        qt,
        float(scale),
        s2,
        HQ,
        HKV,
        D,
        BM=cfg.BM,
        BN=BN,
        BD=BD,
        DOT_F32=f32,
        TMA=tma_kv,
        num_warps=cfg.warps_dq,
        num_stages=2,
    )
    if kt.shape[0]:
        tma = tma_kv and _tma(a, D, q, dout)
        qa, da = (_desc(q, cfg.BM, D), _desc(dout, cfg.BM, D)) if tma else (q, dout)
        kb, vb = (_desc(k, cfg.BN_KV, D), _desc(v, cfg.BN_KV, D)) if tma else (k, v)
        attention_bwd_dkdv_kernel[(kt.shape[0], HKV)](
            qa,
            kb,
            vb,
            da,
            lse,
            delta,
            dk,
            dv,
            cu_q,
            cu_k,
            q_pos,
            kt,
            float(scale),
            s2,
            HQ,
            HKV,
            D,
            BM=cfg.BM,
            BN=cfg.BN_KV,
            BD=BD,
            DOT_F32=f32,
            TMA=tma,
            num_warps=cfg.warps_kv,
            num_stages=cfg.stages_kv,
        )
    return dq, dk, dv


__all__ = [
    "BN",
    "KV_CHUNK",
    "FWD",
    "BWD",
    "Plan",
    "plan",
    "plan_on_device",
    "attention",
    "attention_planned",
    "attention_bwd",
    "bwd_tiles_on_device",
    "qk_scale2",
]
