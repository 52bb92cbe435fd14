"""attention on Triton: causal GQA over packed varlen sequences; one kernel for prefill, chunked
prefill and decode.

Shapes: q [Tq, Hq, D] BF16, k, v [Tk, Hkv, D] BF16 (Hq % Hkv == 0), cu_seqlens_q / cu_seqlens_k
[B+1] int64, q_pos [Tq] int64 (query i sees keys 0..q_pos[i] of its sequence)
-> (out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32). Backward -> dq [Tq, Hq, D], dk, dv [Tk, Hkv, D] FP32.

Forward (one program per (query tile of BM rows of one sequence, query head)):
* Key tiles of BN keys are aligned to absolute key position 0 of the sequence: tile j is keys
  [j*BN, (j+1)*BN) in prefill, in a 7-token chunk and in a decode step alike.
* Per tile, in FP32: s = (q . k) * scale; keys past the query's position get -inf, so p = 0;
  m_new = max(m, rowmax s); alpha = exp(m - m_new); p = bf16(exp(s - m_new)) (the P@V operand,
  RNE), l = l * alpha + rowsum p; acc = dot(p, v, acc * alpha).
* A tile that lies wholly past a query's position leaves that query's (m, l, acc) untouched
  (a select, not an update with zeros), so a query's sequence of operations is exactly tiles
  0..q_pos // BN — fixed by its position and its keys, not by the other queries in its tile.
* out = bf16(acc / l) (IEEE divide, RNE); lse = m + log(l).
The row reductions (max, sum) run along the key axis of one query's row, and an MMA computes a
row of its output from that row of its operand: a query's bits do not depend on which row of the
tile it occupies or on who else is in the tile.

Backward (FP32, no atomics, per sequence):
* delta[i, h] = sum_d dout * out (one program per query token; heads are the tile's rows).
* dq: one program per (query tile, head), key tiles 0.. ascending as in the forward;
  ds = p * (dp - delta), dq += bf16(ds) @ k; dq *= scale.
* dk, dv: one program per (tile of BN_KV = 32 keys of one sequence, kv head); it loops over the group's query
  heads ascending, then the sequence's query tiles ascending (tiles aligned to the sequence's first
  query), dv += bf16(p)^T @ dout, dk += bf16(ds)^T @ q; dk *= scale. The order is fixed per
  sequence, so packing, batch order and the other sequences cannot change a bit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import bf16_round_f32, check_device, counted, dot_f32, index_on, next_pow2, rne_bf16

BM, BN = 64, 64            # query rows, keys per tile (fixed)
# dk/dv: keys per program. 32, not BN: a program holds its keys' k, v, dk, dv for the whole loop,
# and at head_dim 128 four [64, 128] tiles spilled (sm_90a: 255 registers, 252 B of spill stores);
# with 32 keys, 243 (sm_90a) / 250 (sm_80) registers and no spill. Which keys share a program does
# not change a key's operations (its rows of dk, dv come from its own row of k and v).
BN_KV = 32
# 8 warps in the forward too: with 4, head_dim 128 spilled on sm_80 (48 B); 8 also on sm_90a (wgmma)
FWD_WARPS, BWD_WARPS = 8, 8


@triton.jit
def _dot_operand(x, DOT_F32: tl.constexpr):
    """An FP32 tile holding BF16-representable values as a dot operand: FP32 in the interpreter,
    BF16 on the GPU (exact either way)."""
    if not DOT_F32:
        x = x.to(tl.bfloat16)
    return x


@triton.jit
def _load_rows(ptr, rows, ok, row_stride, col0, d, D, DOT_F32: tl.constexpr):
    """[len(rows), BD] tile of a [T, H, D] tensor at head offset col0; FP32 under DOT_F32."""
    t = tl.load(ptr + rows.to(tl.int64)[:, None] * row_stride + col0 + d[None, :],
                mask=ok[:, None] & (d < D)[None, :], other=0.0)
    if DOT_F32:
        t = t.to(tl.float32)
    return t


@triton.jit
def _query_tile(q_ptr, cu_q_ptr, cu_k_ptr, pos_ptr, tile_ptr, HQ, HKV, D, BM: tl.constexpr, BD: tl.constexpr,
                DOT_F32: tl.constexpr):
    """What a (query tile, head) program of the forward and of dq starts from: the tile's head,
    its sequence's keys (first row, count, kv head), its rows, their mask and positions, and q."""
    tile = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.load(tile_ptr + 2 * tile)
    r0 = tl.load(tile_ptr + 2 * tile + 1)
    q_end = tl.load(cu_q_ptr + b + 1)
    k0 = tl.load(cu_k_ptr + b)
    k_len = tl.load(cu_k_ptr + b + 1) - k0
    kh = h // (HQ // HKV)
    rows = r0 + tl.arange(0, BM)
    r_ok = rows < q_end
    pos = tl.load(pos_ptr + rows, mask=r_ok, other=-1)
    d = tl.arange(0, BD)
    q = _load_rows(q_ptr, rows, r_ok, HQ * D, h * D, d, D, DOT_F32)
    return h, k0, k_len, kh, rows, r_ok, pos, d, q


@counted
@triton.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, pos_ptr, tile_ptr, scale,
                         HQ, HKV, D, BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, DOT_F32: tl.constexpr):
    h, k0, k_len, kh, rows, r_ok, pos, d, q = _query_tile(q_ptr, cu_q_ptr, cu_k_ptr, pos_ptr, tile_ptr, HQ, HKV, D,
                                                          BM, BD, DOT_F32)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, BD), dtype=tl.float32)
    n_tiles = tl.max(pos, 0) // BN + 1
    for j in range(0, n_tiles):
        kj = j * BN + tl.arange(0, BN)
        k_ok = kj < k_len
        kt = _load_rows(k_ptr, k0 + kj, k_ok, HKV * D, kh * D, d, D, DOT_F32)
        vt = _load_rows(v_ptr, k0 + kj, k_ok, HKV * D, kh * D, d, D, DOT_F32)
        s = tl.dot(q, tl.trans(kt), input_precision="ieee") * scale
        live = kj[None, :] <= pos[:, None]
        s = tl.where(live, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = bf16_round_f32(tl.where(live, tl.exp(s - m_new[:, None]), 0.0))
        l_new = l_i * alpha + tl.sum(p, 1)
        acc_new = tl.dot(_dot_operand(p, DOT_F32), vt, acc * alpha[:, None], input_precision="ieee")
        seen = j * BN <= pos                    # the tile holds a key this query sees
        m_i = tl.where(seen, m_new, m_i)
        l_i = tl.where(seen, l_new, l_i)
        acc = tl.where(seen[:, None], acc_new, acc)
    out = tl.div_rn(acc, l_i[:, None])
    tl.store(o_ptr + rows.to(tl.int64)[:, None] * (HQ * D) + h * D + d[None, :], rne_bf16(out),
             mask=r_ok[:, None] & (d < D)[None, :])
    tl.store(lse_ptr + rows.to(tl.int64) * HQ + h, m_i + tl.log(l_i), mask=r_ok)


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
def attention_bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, cu_q_ptr, cu_k_ptr, pos_ptr,
                            tile_ptr, scale, HQ, HKV, D, BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
                            DOT_F32: tl.constexpr):
    h, k0, k_len, kh, rows, r_ok, pos, d, q = _query_tile(q_ptr, cu_q_ptr, cu_k_ptr, pos_ptr, tile_ptr, HQ, HKV, D,
                                                          BM, BD, DOT_F32)
    do = _load_rows(do_ptr, rows, r_ok, HQ * D, h * D, d, D, DOT_F32)
    lse = tl.load(lse_ptr + rows.to(tl.int64) * HQ + h, mask=r_ok, other=0.0)
    delta = tl.load(delta_ptr + rows.to(tl.int64) * HQ + h, mask=r_ok, other=0.0)
    dq = tl.zeros((BM, BD), dtype=tl.float32)
    n_tiles = tl.max(pos, 0) // BN + 1
    for j in range(0, n_tiles):
        kj = j * BN + tl.arange(0, BN)
        k_ok = kj < k_len
        kt = _load_rows(k_ptr, k0 + kj, k_ok, HKV * D, kh * D, d, D, DOT_F32)
        vt = _load_rows(v_ptr, k0 + kj, k_ok, HKV * D, kh * D, d, D, DOT_F32)
        s = tl.dot(q, tl.trans(kt), input_precision="ieee") * scale
        live = kj[None, :] <= pos[:, None]
        p = tl.where(live, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(vt), input_precision="ieee")
        ds = bf16_round_f32(p * (dp - delta[:, None]))
        dq_new = tl.dot(_dot_operand(ds, DOT_F32), kt, dq, input_precision="ieee")
        dq = tl.where((j * BN <= pos)[:, None], dq_new, dq)
    tl.store(dq_ptr + rows.to(tl.int64)[:, None] * (HQ * D) + h * D + d[None, :], dq * scale,
             mask=r_ok[:, None] & (d < D)[None, :])


@counted
@triton.jit
def attention_bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, cu_q_ptr, cu_k_ptr,
                              pos_ptr, ktile_ptr, scale, HQ, HKV, D, BM: tl.constexpr, BN: tl.constexpr,
                              BD: tl.constexpr, DOT_F32: tl.constexpr):
    tile = tl.program_id(0)
    kh = tl.program_id(1)
    b = tl.load(ktile_ptr + 2 * tile)
    j0 = tl.load(ktile_ptr + 2 * tile + 1)
    k0 = tl.load(cu_k_ptr + b)
    k_len = tl.load(cu_k_ptr + b + 1) - k0
    q0 = tl.load(cu_q_ptr + b)
    q_len = tl.load(cu_q_ptr + b + 1) - q0
    kj = j0 + tl.arange(0, BN)
    k_ok = kj < k_len
    d = tl.arange(0, BD)
    kt = _load_rows(k_ptr, k0 + kj, k_ok, HKV * D, kh * D, d, D, DOT_F32)
    vt = _load_rows(v_ptr, k0 + kj, k_ok, HKV * D, kh * D, d, D, DOT_F32)
    dk = tl.zeros((BN, BD), dtype=tl.float32)
    dv = tl.zeros((BN, BD), dtype=tl.float32)
    group = HQ // HKV
    for g in range(0, group):
        h = kh * group + g
        for i0 in range(0, q_len, BM):
            ii = i0 + tl.arange(0, BM)
            i_ok = ii < q_len
            rows = q0 + ii
            pos = tl.load(pos_ptr + rows, mask=i_ok, other=-1)
            q = _load_rows(q_ptr, rows, i_ok, HQ * D, h * D, d, D, DOT_F32)
            do = _load_rows(do_ptr, rows, i_ok, HQ * D, h * D, d, D, DOT_F32)
            lse = tl.load(lse_ptr + rows.to(tl.int64) * HQ + h, mask=i_ok, other=0.0)
            delta = tl.load(delta_ptr + rows.to(tl.int64) * HQ + h, mask=i_ok, other=0.0)
            st = tl.dot(kt, tl.trans(q), input_precision="ieee") * scale          # [BN, BM]
            live = kj[:, None] <= pos[None, :]
            pt = tl.where(live, tl.exp(st - lse[None, :]), 0.0)
            dv = tl.dot(_dot_operand(bf16_round_f32(pt), DOT_F32), do, dv, input_precision="ieee")
            dpt = tl.dot(vt, tl.trans(do), input_precision="ieee")
            dst = bf16_round_f32(pt * (dpt - delta[None, :]))
            dk = tl.dot(_dot_operand(dst, DOT_F32), q, dk, input_precision="ieee")
    out = (k0 + kj).to(tl.int64)[:, None] * (HKV * D) + kh * D + d[None, :]
    ok = k_ok[:, None] & (d < D)[None, :]
    tl.store(dk_ptr + out, dk * scale, mask=ok)
    tl.store(dv_ptr + out, dv, mask=ok)


def _meta(op: str, q, k, v, cu_q, cu_k, q_pos) -> tuple[list[int], list[int], list[int], list[int]]:
    """Validate on the host (as ws1_cpu does) and return per-sequence query/key starts and lengths."""
    check_device(op, q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3 or t.dtype != torch.bfloat16:
            raise ValueError(f"triton {op}: {name} must be BF16 [T, heads, D], got {t.dtype} {tuple(t.shape)}")
    if k.shape != v.shape or q.shape[2] != k.shape[2] or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"triton {op}: bad head layout q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
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


def _common_args(q, k) -> dict:
    # BD >= 16: a tl.dot needs every dimension >= 16 on the GPU (masked columns add zeros)
    return dict(BM=BM, BN=BN, BD=max(16, next_pow2(q.shape[2])), DOT_F32=dot_f32(q, k))


def plan(q, k, v, cu_q, cu_k, q_pos) -> torch.Tensor:
    """Validate on the host and return the forward's query-tile table (one host sync); a decode
    loop or a benchmark can reuse it with :func:`attention_planned` (e.g. inside a CUDA graph)."""
    qs, lq, _, _ = _meta("attention", q, k, v, cu_q, cu_k, q_pos)
    return _tiles(qs, lq, BM, False, q.device)


def attention(q, k, v, cu_q, cu_k, q_pos, scale):
    """-> (out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32)."""
    cu_q, cu_k, q_pos = index_on(q, cu_q, cu_k, q_pos)
    return attention_planned(q, k, v, cu_q, cu_k, q_pos, scale, plan(q, k, v, cu_q, cu_k, q_pos))


def attention_planned(q, k, v, cu_q, cu_k, q_pos, scale, tiles):
    """The forward launch for a tile table from :func:`plan` (no host sync, no validation)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    Tq, HQ, D = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(Tq, HQ, dtype=torch.float32, device=q.device)
    if tiles.shape[0] and HQ and D:
        attention_fwd_kernel[(tiles.shape[0], HQ)](q, k, v, out, lse, cu_q, cu_k, q_pos.contiguous(), tiles, float(scale),
                                                   HQ, k.shape[1], D, **_common_args(q, k), num_warps=FWD_WARPS,
                                                   num_stages=2)
    return out, lse


def attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, q_pos, scale):
    """-> (dq [Tq, Hq, D], dk [Tk, Hkv, D], dv [Tk, Hkv, D]) FP32, as ws1_cpu::attention_bwd."""
    cu_q, cu_k, q_pos = index_on(q, cu_q, cu_k, q_pos)
    qs, lq, ks, lk = _meta("attention_bwd", q, k, v, cu_q, cu_k, q_pos)
    dout, q, k, v, out = (t.contiguous() for t in (dout, q, k, v, out))
    if dout.dtype != torch.bfloat16:
        dout = dout.to(torch.bfloat16)      # the gradient of a BF16 output is BF16 (exact)
    lse, q_pos = lse.float().contiguous(), q_pos.contiguous()
    Tq, HQ, D = q.shape
    HKV = k.shape[1]
    delta = torch.empty(Tq, HQ, dtype=torch.float32, device=q.device)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
    dv = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
    if Tq == 0 or D == 0:
        return dq, dk, dv
    args = _common_args(q, k)
    attention_bwd_delta_kernel[(Tq,)](dout, out, delta, Tq, HQ, D, BH=next_pow2(HQ), BD=args["BD"], num_warps=4)
    qt = _tiles(qs, lq, BM, False, q.device)
    attention_bwd_dq_kernel[(qt.shape[0], HQ)](q, k, v, dout, lse, delta, dq, cu_q, cu_k, q_pos, qt, float(scale),
                                               HQ, HKV, D, **args, num_warps=BWD_WARPS, num_stages=2)
    kt = _tiles(ks, lk, BN_KV, True, q.device)
    if kt.shape[0]:
        attention_bwd_dkdv_kernel[(kt.shape[0], HKV)](q, k, v, dout, lse, delta, dk, dv, cu_q, cu_k, q_pos, kt,
                                                      float(scale), HQ, HKV, D, **dict(args, BN=BN_KV),
                                                      num_warps=BWD_WARPS, num_stages=2)
    return dq, dk, dv
