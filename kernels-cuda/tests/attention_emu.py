"""A CPU emulator of the attention kernels (kernels-cuda/csrc/attention_*.cu / .cuh; attention.cu lists the files),
statement by statement, for the tests that run without a GPU.

What it executes: the kernels' control flow (the device plan, the item decoding, the chunk loop, the chunk-mode
partials and attention_merge_kernel, the backward's position-aligned row blocks), their shared-memory layout and
every ldmatrix / mma.sync address expression as written in the .cu (copied here, with element offsets where the .cu
has byte offsets: ``qaddr + kd * 32`` bytes is ``+ kd * 16`` elements), warp-wide: a register is a numpy array over
the 32 lanes, a fragment is decoded with the PTX ISA's layouts (ldmatrix .x4 / .x4.trans, mma.m16n8k16 .bf16).

What it models rather than reproduces: the tensor core's k16 sum (here: exact BF16 products, summed in float64 with
the accumulator, one rounding to FP32 — the hardware truncates differently, so bits differ from a GPU's) and CUDA's
exp2f / logf (here: float64 then one rounding). Every other operation is the FP32 IEEE operation the .cu names
(__fmul_rn, __fadd_rn, __fdiv_rn, fmaxf, the integer BF16 rounding). The emulator therefore shows that the ORDER
argument holds — decode, chunked prefill and prefill execute the same operations per row, whichever CTA, mode or
neighbour rows — and that the fragment index math computes attention at all (against an FP64 reference); the GPU's
own bits are checked by tests/test_gpu_attention.py on a GPU.

``variant`` switches one deliberate deviation on (the negative controls of tests/test_attention_emu.py):
  "tiles_from_block"  forward key tiles and chunks aligned to the CTA's first query position instead of key 0 (every
                      key still attended: the tiles are shifted, not cut)
  "partials_bf16"     chunk mode keeps its (m, l, acc) partials in a BF16 workspace, so the split-KV path no longer
                      runs the in-CTA path's FP32 arithmetic
  "dkv_rows_by_buffer" backward dK/dV query row slots are the queries' rows in the packed buffer (blocks aligned to
                      buffer row 0) instead of their positions in the sequence
  "chunk_by_length"   the chunk size chosen from the sequence length (a split count depending on the shape)
"""

from __future__ import annotations

import numpy as np
import torch

KBN, KCHUNK, KBNB, KBKV, KBMQ, KPAD, KDMAX = 64, 256, 32, 64, 32, 8, 128
LOG2E = np.float32(1.4426950408889634)
LN2 = np.float32(0.6931471805599453)
F32, U16, U32 = np.float32, np.uint16, np.uint32
NEG_INF = F32(-np.inf)
LANE = np.arange(32)
G_ = LANE >> 2
TQ = LANE & 3
NAN_BF16 = U16(0x7FC0)


# ---- numerics (the .cu's operations) ------------------------------------------------------------------------------
def bf16_f32(u):
    return (np.asarray(u).astype(U32) << 16).view(F32)


def bf16_rne(f):
    u = np.asarray(f, F32).view(U32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, ((u >> 16) | 0x40) & 0xFFFF, r).astype(U16)


def pack_bf16(lo, hi):
    return bf16_rne(lo).astype(U32) | (bf16_rne(hi).astype(U32) << 16)


def lo16(w):
    return bf16_f32((w & 0xFFFF).astype(U16))


def hi16(w):
    return bf16_f32((w >> 16).astype(U16))


def exp2f(x):
    with np.errstate(over="ignore", under="ignore"):
        return np.exp2(np.asarray(x, F32).astype(np.float64)).astype(F32)


def logf(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(x, F32).astype(np.float64)).astype(F32)


def fadd(a, b):
    return (np.asarray(a, F32) + np.asarray(b, F32)).astype(F32)


def fsub(a, b):
    with np.errstate(invalid="ignore"):
        return (np.asarray(a, F32) - np.asarray(b, F32)).astype(F32)


def fmul(a, b):
    with np.errstate(invalid="ignore", over="ignore"):
        return (np.asarray(a, F32) * np.asarray(b, F32)).astype(F32)


def fdiv(a, b):
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.asarray(a, F32) / np.asarray(b, F32)).astype(F32)


def fmaxf(a, b):
    return np.fmax(np.asarray(a, F32), np.asarray(b, F32))


def shfl_xor(v, m):
    return v[..., LANE ^ m]


def plus_zero(x):
    return fadd(x, F32(0.0))


def merge_coef(m_run, m_new):
    m = fmaxf(m_run, m_new)
    return m, exp2f(fsub(m_run, m)), exp2f(fsub(m_new, m))


def merge_val(run, a, inc, b):
    return fadd(fmul(run, a), fmul(inc, b))


def final_inv(l):
    return fdiv(F32(1.0), l)


def final_out(acc, inv_l):
    return bf16_rne(plus_zero(fmul(acc, inv_l)))


def final_lse(m, l):
    return plus_zero(fadd(fmul(m, LN2), logf(l)))


# ---- warp instructions ----------------------------------------------------------------------------------------------
def ldsm_x4(smem, addr, trans=False):
    """ldmatrix.x4 (.trans): lane l supplies the address of row l % 8 of matrix l / 8 (element offsets; each row is 8
    consecutive BF16). Returns [..., 4, 32] uint32: register j of every lane."""
    addr = np.asarray(addr)
    rows = addr.reshape(addr.shape[:-1] + (4, 8))  # [..., matrix, row]
    mat = smem[rows[..., None] + np.arange(8)]  # [..., matrix, row, col]
    if trans:
        lo, hi = mat[..., 2 * TQ, G_], mat[..., 2 * TQ + 1, G_]  # (row 2t, col g), (row 2t+1, col g)
    else:
        lo, hi = mat[..., G_, 2 * TQ], mat[..., G_, 2 * TQ + 1]  # (row g, col 2t), (row g, col 2t+1)
    return lo.astype(U32) | (hi.astype(U32) << 16)


def _fragment_maps():
    """Index maps of the m16n8k16 fragments (PTX ISA layouts): A[r, c] = a-halves[IA[r, c]] over (register, lane,
    half); B[k, n] = b-halves[IB[k, n]] over (b0/b1, lane, half); C/D[r, c] = d[IC[r, c]] over (register, lane)."""
    IA, IB, IC = np.zeros((16, 16), int), np.zeros((16, 8), int), np.zeros((16, 8), int)
    for ln in range(32):
        g, t = ln >> 2, ln & 3
        for j, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            for hf in range(2):
                IA[g + dr, 2 * t + dc + hf] = (j * 32 + ln) * 2 + hf
        for j in range(2):
            for hf in range(2):
                IB[2 * t + 8 * j + hf, g] = (j * 32 + ln) * 2 + hf
        for j, (dr, dc) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
            IC[g + dr, 2 * t + dc] = j * 32 + ln
    return IA, IB, IC


_IA, _IB, _IC = _fragment_maps()
_OUT = np.argsort(_IC.reshape(-1))  # D (row-major 16x8) -> (register, lane)


def _halves(w):
    w = np.asarray(w, U32)
    return np.stack([lo16(w), hi16(w)], -1).astype(np.float64)


def mma16816(d, a, b0, b1):
    """d + a b for one m16n8k16 (BF16 in, FP32 accumulators), fragments per the PTX ISA; batched over leading axes.
    Model of the k16 sum: exact products and accumulator summed in float64, one rounding to FP32."""
    d = np.asarray(d, F32)
    A = _halves(a).reshape(np.shape(a)[:-2] + (256,))[..., _IA]
    b = np.stack(np.broadcast_arrays(np.asarray(b0, U32), np.asarray(b1, U32)), -2)
    B = _halves(b).reshape(b.shape[:-2] + (128,))[..., _IB]
    C = d.reshape(d.shape[:-2] + (128,))[..., _IC].astype(np.float64)
    D = (C + A @ B).astype(F32)
    return D.reshape(D.shape[:-2] + (128,))[..., _OUT].reshape(D.shape[:-2] + (4, 32))


# ---- the plan kernel ----------------------------------------------------------------------------------------------
def plan_size(B):
    return 5 + 3 * B


def plan_kernel(cu_q, cu_k, q_pos, B, Tq, Tk, G, bm, split_ok, cap, variant=None):
    plan = np.full(plan_size(B), -7, np.int64)  # garbage where the kernel writes nothing
    bad = not (cu_q[0] == 0 and cu_k[0] == 0 and cu_q[B] == Tq and cu_k[B] == Tk)
    pf = ps = 0
    for b in range(B):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        nf = ns = 0
        if not (0 <= q0 <= q1 <= Tq and 0 <= k0 <= k1 <= Tk):
            bad = True
            plan[5 + 2 * B + b] = 0
        else:
            nq = q1 - q0
            nf = -(-nq * G // bm)
            nch = 0
            if nq > 0 and split_ok:
                ps_ = [int(p) for p in q_pos[q0:q1] if 0 <= p < k1 - k0]
                mp = max(ps_, default=-1)
                nch = mp // chunk_size(variant, k1 - k0) + 1 if mp >= 0 else 1
            ns = nf * nch
            plan[5 + 2 * B + b] = min(nch, 2**31 - 1)
        plan[3 + b], plan[4 + B + b] = min(pf, 2**31 - 1), min(ps, 2**31 - 1)
        pf, ps = pf + nf, ps + ns
    plan[3 + B], plan[4 + 2 * B] = min(pf, 2**31 - 1), min(ps, 2**31 - 1)
    mode = 1 if (split_ok and ps <= cap) else 0
    items = ps if mode else pf
    plan[0] = 1 if (not bad and items <= cap) else 0
    plan[1], plan[2] = mode, min(items, 2**31 - 1)
    return plan


def chunk_size(variant, lk):
    # "chunk_by_length": a split count chosen by the sequence's length (the rule the kernels must never follow)
    return (KBN if lk <= 300 else KCHUNK) if variant == "chunk_by_length" else KCHUNK


def item_seq(start, B, w):
    lo, hi = 0, B - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if start[mid] <= w:
            lo = mid
        else:
            hi = mid - 1
    return lo


def seq_of(cu, B, i):
    return item_seq(cu, B, i)


# ---- the forward kernel (attention_fwd_kernel<DP, NWM>), one CTA --------------------------------------------------
class Args:
    """The kernels' argument struct; tensors are flat numpy arrays (global memory)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def self_plan(a, bx):
    """self_plan of the .cu, warp-wide (lane b = sequence b; B <= 32): None for inconsistent cu_seqlens, else
    (items, b, qb) with b = -1 for a CTA past the items."""
    lane = LANE
    live = lane < a.B
    ln = np.minimum(lane, a.B - 1)
    q0, q1, k0, k1 = (np.where(live, x, 0) for x in (a.cu_q[ln], a.cu_q[ln + 1], a.cu_k[ln], a.cu_k[ln + 1]))
    ok = (0 <= q0) & (q0 <= q1) & (q1 <= a.Tq) & (0 <= k0) & (k0 <= k1) & (k1 <= a.Tk)
    nf = np.where(live & ok, ((q1 - q0) * a.G + 15) // 16, 0)
    bad = live & ~ok
    bad[0] |= not (a.cu_q[0] == 0 and a.cu_k[0] == 0 and a.cu_q[a.B] == a.Tq and a.cu_k[a.B] == a.Tk)
    inc = np.cumsum(nf)  # warp_incl_scan
    total = int(inc[31])
    if bad.any() or total > a.grid_x:  # __any_sync(bad), or more items than CTAs
        return None
    if bx >= total:
        return total, -1, 0
    item = total - 1 - bx
    hit = np.flatnonzero(live & (inc - nf <= item) & (item < inc))  # __ballot_sync, then __ffs
    b = int(hit[0])
    return total, b, int(item - (inc - nf)[b])


def fwd_cta(a, DP, NWM, MW, bx, kh, variant=None):
    """attention_fwd_kernel<DP, NWM, MW>, CTA (bx, kh)."""
    BM, S, C8, NB, NS = 16 * MW * NWM, DP + KPAD, DP // 8, DP // 8, KBN // 8
    KD = DP // 16
    smem = np.full(BM * S + 4 * KBN * S, 0xFFFF, U16)  # uninitialised shared memory reads as NaN
    Qs, Ks = 0, BM * S
    Vs = Ks + 2 * KBN * S
    plan = a.plan

    def fill_nan_rows():
        for i in range(bx, a.Tq, a.grid_x):
            for g in range(a.G):
                row = i * a.Hq + kh * a.G + g
                a.out[row * a.D : (row + 1) * a.D] = NAN_BF16
                a.lse[row] = np.nan

    if NWM == 1 and plan is None:  # self-planned
        sp = self_plan(a, bx)
        if sp is None:
            fill_nan_rows()
            return
        items, b, qb = sp
        if b < 0:
            return
        mode, chunk, item = 1, 0, items - 1 - bx
    else:
        if plan[0] != 1:
            fill_nan_rows()
            return
        B, mode, items = a.B, int(plan[1]), int(plan[2])
        if bx >= items:
            return
        item = items - 1 - bx  # reverse: the heaviest query blocks first
        start = plan[(4 + B if mode else 3) :]
        b = item_seq(start, B, item)
        qb, chunk = item - int(start[b]), 0
        if mode:
            nch = int(plan[5 + 2 * B + b])
            chunk, qb = qb % nch, qb // nch
    q0, nq = int(a.cu_q[b]), int(a.cu_q[b + 1] - a.cu_q[b])
    k0, lk = int(a.cu_k[b]), int(a.cu_k[b + 1] - a.cu_k[b])
    s_pos = np.full(BM, -1, np.int64)
    s_idx = np.full(BM, -1, np.int64)
    for r in range(BM):
        row = qb * BM + r
        if row < nq * a.G:
            i = q0 + row // a.G
            p = int(a.q_pos[i])
            s_idx[r] = i * a.Hq + kh * a.G + row % a.G
            s_pos[r] = p if 0 <= p < lk else -2
    kmax = int(max(s_pos.max(), -1))
    csz = chunk_size(variant, lk)
    shift = 0  # keys are t * KBN + j - shift: 0 in the kernel
    if variant == "tiles_from_block":  # deliberately wrong: tiles aligned to the block's first position
        valid = s_pos[s_pos >= 0]
        shift = (KBN - int(valid.min()) % KBN) % KBN if valid.size else 0

    t_begin, t_end = 0, (kmax + shift) // KBN + 1
    if kmax < 0:
        t_end = 0
    if mode:
        if chunk * csz > kmax:
            t_end = t_begin = 0
            if chunk != 0:
                return
        else:
            t_begin = chunk * (csz // KBN)
            t_end = min(t_end, (chunk + 1) * (csz // KBN))

    kvs = a.Hkv * a.D
    e = np.arange(BM * C8)
    r_, c_ = e // C8, e % C8
    ok = (s_idx[r_] >= 0) & (c_ * 8 < a.D)
    for jj in range(8):  # cp.async16 of Q rows (zero-fill where not ok)
        smem[Qs + r_ * S + c_ * 8 + jj] = np.where(ok, a.q[np.where(ok, s_idx[r_] * a.D + c_ * 8 + jj, 0)], 0)

    def load_kv(t, st):
        e = np.arange(KBN * C8)
        j, c = e // C8, e % C8
        key = t * KBN + j - shift
        ok = (key >= 0) & (key <= kmax) & (c * 8 < a.D)
        src = np.where(ok, (k0 + key) * kvs + kh * a.D + c * 8, 0)
        for jj in range(8):
            smem[Ks + (st * KBN + j) * S + c * 8 + jj] = np.where(ok, a.k[src + jj], 0)
            smem[Vs + (st * KBN + j) * S + c * 8 + jj] = np.where(ok, a.v[src + jj], 0)

    if t_begin < t_end:
        load_kv(t_begin, 0)
    W = []
    for w in range(NWM):
        rowi = [[w * 16 * MW + 16 * mw + G_ + 8 * h for h in range(2)] for mw in range(MW)]
        W.append(
            dict(
                rowi=rowi,
                pos=[[s_pos[rowi[mw][h]] for h in range(2)] for mw in range(MW)],
                qaddr=Qs + (w * 16 * MW + (LANE & 7) + 8 * ((LANE >> 3) & 1)) * S + 8 * (LANE >> 4),
                acc=np.zeros((MW, NB, 4, 32), F32),
                Macc=np.zeros((MW, NB, 4, 32), F32),
                m=np.full((MW, 2, 32), NEG_INF),
                l=np.zeros((MW, 2, 32), F32),
                Mm=np.full((MW, 2, 32), NEG_INF),
                Ml=np.zeros((MW, 2, 32), F32),
            )
        )
    sl2 = F32(a.scale_log2)
    c_cur = t_begin * KBN // csz
    for t in range(t_begin, t_end):
        st = (t - t_begin) & 1
        if t + 1 < t_end:
            load_kv(t + 1, st ^ 1)
        Kt, Vt = Ks + st * KBN * S, Vs + st * KBN * S
        for w in range(NWM):
            X = W[w]
            pk = np.empty((MW, NS, 2, 32), U32)
            for mw in range(MW):
                s = np.zeros((NS, 4, 32), F32)
                n2 = np.arange(NS // 2)[:, None]
                for kd in range(KD):
                    qf = ldsm_x4(smem, X["qaddr"] + mw * 16 * S + kd * 16)
                    bk = ldsm_x4(
                        smem, Kt + (n2 * 16 + (LANE & 7) + 8 * (LANE >> 4)) * S + kd * 16 + 8 * ((LANE >> 3) & 1)
                    )
                    s[0::2] = mma16816(s[0::2], qf, bk[:, 0], bk[:, 1])
                    s[1::2] = mma16816(s[1::2], qf, bk[:, 2], bk[:, 3])
                mt = np.full((2, 32), NEG_INF)
                for nb in range(NS):
                    for e in range(4):
                        key = t * KBN + nb * 8 + 2 * TQ + (e & 1) - shift
                        x = fmul(s[nb, e], sl2)
                        s[nb, e] = np.where((key >= 0) & (key <= X["pos"][mw][e >> 1]), x, NEG_INF)
                        mt[e >> 1] = fmaxf(mt[e >> 1], s[nb, e])
                alpha, mu = np.empty((2, 32), F32), np.empty((2, 32), F32)
                for h in range(2):
                    mt[h] = fmaxf(mt[h], shfl_xor(mt[h], 1))
                    mt[h] = fmaxf(mt[h], shfl_xor(mt[h], 2))
                    mn = fmaxf(X["m"][mw, h], mt[h])
                    mu[h] = np.where(mn == NEG_INF, F32(0), mn)
                    alpha[h] = exp2f(fsub(X["m"][mw, h], mu[h]))
                    X["m"][mw, h] = mn
                    X["l"][mw, h] = fmul(X["l"][mw, h], alpha[h])
                for nb in range(NS):
                    for h in range(2):
                        p0, p1 = exp2f(fsub(s[nb, 2 * h], mu[h])), exp2f(fsub(s[nb, 2 * h + 1], mu[h]))
                        X["l"][mw, h] = fadd(X["l"][mw, h], p0)
                        X["l"][mw, h] = fadd(X["l"][mw, h], p1)
                        pk[mw, nb, h] = pack_bf16(p0, p1)
                for e in range(4):
                    X["acc"][mw, :, e] = fmul(X["acc"][mw, :, e], alpha[e >> 1])
            n2 = np.arange(NB // 2)[:, None]
            for kk in range(KBN // 16):
                bv = ldsm_x4(
                    smem,
                    Vt + (kk * 16 + (LANE & 7) + 8 * ((LANE >> 3) & 1)) * S + n2 * 16 + 8 * (LANE >> 4),
                    trans=True,
                )
                for mw in range(MW):
                    pa = np.stack([pk[mw, 2 * kk, 0], pk[mw, 2 * kk, 1], pk[mw, 2 * kk + 1, 0], pk[mw, 2 * kk + 1, 1]])
                    X["acc"][mw, 0::2] = mma16816(X["acc"][mw, 0::2], pa, bv[:, 0], bv[:, 1])
                    X["acc"][mw, 1::2] = mma16816(X["acc"][mw, 1::2], pa, bv[:, 2], bv[:, 3])
        if (t + 1) * KBN % csz == 0 or t + 1 == t_end:
            for w in range(NWM):
                X = W[w]
                for mw in range(MW):
                    for h in range(2):
                        X["l"][mw, h] = fadd(X["l"][mw, h], shfl_xor(X["l"][mw, h], 1))
                        X["l"][mw, h] = fadd(X["l"][mw, h], shfl_xor(X["l"][mw, h], 2))
                    for h in range(2):
                        pr, r = X["pos"][mw][h], X["rowi"][mw][h]
                        if not mode:
                            need = pr >= c_cur * csz
                            first = c_cur == 0
                            m_, a_, b_ = merge_coef(X["Mm"][mw, h], X["m"][mw, h])
                            for j in range(2):
                                inc = X["acc"][mw, :, 2 * h + j]
                                mv = merge_val(X["Macc"][mw, :, 2 * h + j], a_, inc, b_)
                                X["Macc"][mw, :, 2 * h + j] = np.where(
                                    need, inc if first else mv, X["Macc"][mw, :, 2 * h + j]
                                )
                            ml = merge_val(X["Ml"][mw, h], a_, X["l"][mw, h], b_)
                            X["Ml"][mw, h] = np.where(need, X["l"][mw, h] if first else ml, X["Ml"][mw, h])
                            X["Mm"][mw, h] = np.where(need, X["m"][mw, h] if first else m_, X["Mm"][mw, h])
                            continue
                        need = pr >= c_cur * csz  # the row reaches this chunk
                        single, part = need & (pr < csz), need & (pr >= csz)
                        d = np.arange(NB)[:, None] * 8 + 2 * TQ  # [NB, 32]
                        o = s_idx[r] * a.D
                        okd = single & (d < a.D)  # its only chunk: finalised here
                        il = final_inv(X["l"][mw, h])
                        a.out[(o + d)[okd]] = final_out(X["acc"][mw, :, 2 * h], il)[okd]
                        a.out[(o + d + 1)[okd]] = final_out(X["acc"][mw, :, 2 * h + 1], il)[okd]
                        ls = single & (TQ == 0)
                        a.lse[s_idx[r][ls]] = final_lse(X["m"][mw, h], X["l"][mw, h])[ls]
                        slot = (item * a.Hkv + kh) * BM + r  # a partial for the merge kernel
                        okp = np.broadcast_to(part, d.shape)
                        for j in range(2):
                            val = X["acc"][mw, :, 2 * h + j]
                            if variant == "partials_bf16":
                                val = bf16_f32(bf16_rne(val))
                            a.ws_acc[(slot * DP + d + j)[okp]] = val[okp]
                        pm = part & (TQ == 0)
                        a.ws_ml[(slot * 2)[pm]], a.ws_ml[(slot * 2 + 1)[pm]] = X["m"][mw, h][pm], X["l"][mw, h][pm]
                X["m"][:] = NEG_INF
                X["l"][:] = 0
                X["acc"][:] = 0
            c_cur += 1
    for w in range(NWM):
        X = W[w]
        for mw in range(MW):
            for h in range(2):
                pr, r = X["pos"][mw][h], X["rowi"][mw][h]
                o = s_idx[r] * a.D
                if not mode or chunk == 0:  # invalid positions: NaN rows
                    for dd in range(0, a.D, 8):
                        okn = pr == -2
                        a.out[(o + dd + 2 * TQ)[okn]] = NAN_BF16
                        a.out[(o + dd + 2 * TQ + 1)[okn]] = NAN_BF16
                    a.lse[s_idx[r][(pr == -2) & (TQ == 0)]] = np.nan
                if not mode:
                    d = np.arange(NB)[:, None] * 8 + 2 * TQ
                    okd = (pr >= 0) & (d < a.D)
                    il = final_inv(X["Ml"][mw, h])
                    a.out[(o + d)[okd]] = final_out(X["Macc"][mw, :, 2 * h], il)[okd]
                    a.out[(o + d + 1)[okd]] = final_out(X["Macc"][mw, :, 2 * h + 1], il)[okd]
                    ls = (pr >= 0) & (TQ == 0)
                    a.lse[s_idx[r][ls]] = final_lse(X["Mm"][mw, h], X["Ml"][mw, h])[ls]


def merge_warp(a, DP, gw, variant=None):
    """attention_merge_kernel<DP>: warp gw = (query i, head h)."""
    PER = DP // 32
    if a.plan[0] != 1 or a.plan[1] != 1 or gw >= a.Tq * a.Hq:
        return
    i, h = gw // a.Hq, gw % a.Hq
    kh, g, B = h // a.G, h % a.G, a.B
    b = seq_of(a.cu_q, B, i)
    q0, lk, p = int(a.cu_q[b]), int(a.cu_k[b + 1] - a.cu_k[b]), int(a.q_pos[i])
    csz = chunk_size(variant, lk)
    if not (0 <= p < lk) or p < csz:
        return
    nchr = p // csz + 1
    row = (i - q0) * a.G + g
    qb, r = row // 16, row % 16
    item0 = int(a.plan[4 + B + b]) + qb * int(a.plan[5 + 2 * B + b])

    def slot(c):
        return ((item0 + c) * a.Hkv + kh) * 16 + r

    mval = merge_val
    d = PER * LANE[:, None] + np.arange(PER)
    Mm, Ml = a.ws_ml[slot(0) * 2], a.ws_ml[slot(0) * 2 + 1]
    acc = a.ws_acc[slot(0) * DP + d].copy()
    for c in range(1, nchr):
        m_, a_, b_ = merge_coef(Mm, a.ws_ml[slot(c) * 2])
        acc = mval(acc, a_, a.ws_acc[slot(c) * DP + d], b_)
        Ml = mval(np.asarray(Ml, F32), a_, a.ws_ml[slot(c) * 2 + 1], b_)
        Mm = m_
    o = (i * a.Hq + h) * a.D
    ok = d < a.D
    a.out[(o + d)[ok]] = final_out(acc, final_inv(Ml))[ok]
    a.lse[i * a.Hq + h] = final_lse(Mm, Ml)


# ---- the host entry points (attention.cu; the launchers run_forward / run_backward) ---------------------------------
def _u16(t):
    return t.contiguous().view(torch.int16).numpy().view(U16).reshape(-1).copy()


FWD_SMEM_MW2 = {
    64: (128 * 72 + 4 * 64 * 72) * 2 + (128 * 64 + 4 * 2 * 128) * 4,
    128: (128 * 136 + 4 * 64 * 136) * 2 + (128 * 128 + 4 * 2 * 128) * 4,
}  # FwdCfg<DP, 4, 2>::smem_bytes


def attention(q, k, v, cu_q, cu_k, q_pos, scale, sms=132, smem_optin=232448, variant=None, self_planned=None):
    """The forward as the .cu's host code runs it: (out [Tq, Hq, D] BF16, lse [Tq, Hq] FP32). ``sms`` and
    ``smem_optin`` stand for the device's multiprocessor count and opt-in shared memory per block (H100 / H200 by
    default; 166912 is an A100's): they only pick the launch configuration. ``self_planned``: None for the host's
    rule (chunk mode with B <= 32 and Tk <= KCHUNK plans in the CTAs), False to force the plan kernel (a test's
    comparison of the two)."""
    Tq, Hq, D = q.shape
    Tk, Hkv, _ = k.shape
    assert D % 8 == 0 and 8 <= D <= KDMAX and Hq % Hkv == 0
    B = cu_q.numel() - 1
    G = Hq // Hkv
    DP = 64 if D <= 64 else 128
    split = Tq * Hq < 64 * sms
    mw2 = not split and FWD_SMEM_MW2[DP] <= smem_optin
    bm = 16 if split else 128 if mw2 else 64
    cap = -(-Tq * G // bm) + B
    if split:
        cap = max(cap, -(-Tk // KCHUNK) + B)
    cq, ck, qp = cu_q.numpy(), cu_k.numpy(), q_pos.numpy()
    rule = split and B <= 32 and Tk <= KCHUNK
    self_planned = rule if self_planned is None else (self_planned and rule)
    plan = None if self_planned else plan_kernel(cq, ck, qp, B, Tq, Tk, G, bm, split, cap, variant)
    a = Args(
        q=_u16(q),
        k=_u16(k),
        v=_u16(v),
        cu_q=cq,
        cu_k=ck,
        q_pos=qp,
        plan=plan,
        out=np.full(Tq * Hq * D, 0x5555, U16),
        lse=np.full(Tq * Hq, 7.0, F32),
        ws_acc=np.full(cap * Hkv * 16 * DP, np.nan, F32),
        ws_ml=np.full(cap * Hkv * 16 * 2, np.nan, F32),
        Tq=Tq,
        Tk=Tk,
        B=B,
        Hq=Hq,
        Hkv=Hkv,
        G=G,
        D=D,
        scale_log2=F32(scale) * LOG2E,
        grid_x=cap,
    )
    nwm, mw = (1, 1) if split else (4, 2 if mw2 else 1)
    for kh in range(Hkv):
        for bx in range(cap):
            fwd_cta(a, DP, nwm, mw, bx, kh, variant)
    if split and Tk > KCHUNK:  # the host skips the merge launch when no row can span two chunks
        for gw in range(Tq * Hq):
            merge_warp(a, DP, gw, variant)
    out = torch.from_numpy(a.out.view(np.int16).copy()).view(torch.bfloat16).reshape(Tq, Hq, D)
    return out, torch.from_numpy(a.lse.copy()).reshape(Tq, Hq)


# ---- backward -------------------------------------------------------------------------------------------------------
def bwd_prep(dout, out, lse, rows, D):
    """attention_bwd_prep_kernel: dO -> BF16, Delta (lanes d = lane + 32c, serial fmaf, butterfly), lse2."""
    dob = dout if dout.dtype == U16 else bf16_rne(dout)
    x = bf16_f32(dob).reshape(rows, D).astype(np.float64)
    o = bf16_f32(out).reshape(rows, D).astype(np.float64)
    part = np.zeros((rows, 32), F32)
    for c in range(0, D, 32):
        for ln in range(32):
            if c + ln < D:  # fmaf: one rounding of x*o + part
                part[:, ln] = (x[:, c + ln] * o[:, c + ln] + part[:, ln].astype(np.float64)).astype(F32)
    for m in (16, 8, 4, 2, 1):
        part = fadd(part, part[:, LANE ^ m])
    return dob, part[:, 0].copy(), fmul(lse, LOG2E)


def kvplan_size(B, Tk):
    return 2 * B + 2 + Tk


def bwd_plan_kernel(cu_q, cu_k, q_pos, B, Tq, Tk, kvplan, order=None):
    """attention_bwd_plan_kernel on ``kvplan`` (filled with -1 by the host, as at::full does): a thread per query
    claims table[cu_k[b] + p] (atomicCAS from -1) and raises its sequence's last position (atomicMax), any failure
    sets the status to 0; block 0 scans the 64-key blocks per sequence. ``order``: the order the query threads'
    atomics land in (the GPU's is unspecified; the result must not depend on it)."""
    status, table = 2 * B + 1, 2 * B + 2
    for i in range(Tq) if order is None else order:
        b = seq_of(cu_q, B, i)
        q0, q1, k0, k1, p = (int(x) for x in (cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1], q_pos[i]))
        ok = q0 <= i < q1 and 0 <= k0 <= k1 <= Tk and 0 <= p < k1 - k0
        if ok:
            ok = kvplan[table + k0 + p] == -1  # atomicCAS(slot, -1, i) == -1
            if ok:
                kvplan[table + k0 + p] = i
        if ok:
            kvplan[B + 1 + b] = max(int(kvplan[B + 1 + b]), p)
        else:
            kvplan[status] = 0
    pre = 0
    for b in range(B):
        k0, k1 = int(cu_k[b]), int(cu_k[b + 1])
        n = -(-(k1 - k0) // KBKV) if 0 <= k0 <= k1 <= Tk else 0
        kvplan[b] = min(pre, 2**31 - 1)
        pre += n
    kvplan[B] = min(pre, 2**31 - 1)
    return kvplan


def bwd_plan_ok(a):
    return a.plan[0] == 1 and a.kvplan[2 * a.B + 1] == -1


def dq_cta(a, DP, bx, kh):
    BM, S, C8, KD, NB, NS = 64, DP + KPAD, DP // 8, DP // 16, DP // 8, KBNB // 8
    smem = np.full(2 * BM * S + 4 * KBNB * S, 0xFFFF, U16)
    Qs, Os = 0, BM * S
    Ks = Os + BM * S
    Vs = Ks + 2 * KBNB * S
    B = a.B
    if not bwd_plan_ok(a):  # bwd_fill_nan_dq: grid-stride over the queries, this CTA's kv head
        for i in range(bx, a.Tq, a.grid_q):
            for g in range(a.G):
                row = i * a.Hq + kh * a.G + g
                a.dq[row * a.D : (row + 1) * a.D] = np.nan
        return
    if bx >= a.plan[2]:
        return
    b = item_seq(a.plan[3:], B, bx)
    qb = bx - int(a.plan[3 + b])
    q0, nq, k0 = int(a.cu_q[b]), int(a.cu_q[b + 1] - a.cu_q[b]), int(a.cu_k[b])
    s_pos, s_idx = np.full(BM, -1, np.int64), np.full(BM, -1, np.int64)
    s_lse2, s_delta = np.zeros(BM, F32), np.zeros(BM, F32)
    for r in range(BM):
        row = qb * BM + r
        if row < nq * a.G:
            i = q0 + row // a.G
            s_idx[r] = i * a.Hq + kh * a.G + row % a.G
            s_pos[r] = int(a.q_pos[i])
            s_lse2[r], s_delta[r] = a.lse2[s_idx[r]], a.delta[s_idx[r]]
    kmax = int(max(s_pos.max(), -1))
    n_t = kmax // KBNB + 1 if kmax >= 0 else 0
    kvs = a.Hkv * a.D
    e = np.arange(BM * C8)
    r_, c_ = e // C8, e % C8
    ok = (s_idx[r_] >= 0) & (c_ * 8 < a.D)
    src = np.where(ok, s_idx[r_] * a.D + c_ * 8, 0)
    for jj in range(8):
        smem[Qs + r_ * S + c_ * 8 + jj] = np.where(ok, a.q[src + jj], 0)
        smem[Os + r_ * S + c_ * 8 + jj] = np.where(ok, a.dob[src + jj], 0)

    def load_kv(t, st):
        e = np.arange(KBNB * C8)
        j, c = e // C8, e % C8
        key = t * KBNB + j
        ok = (key <= kmax) & (c * 8 < a.D)
        src = np.where(ok, (k0 + key) * kvs + kh * a.D + c * 8, 0)
        for jj in range(8):
            smem[Ks + (st * KBNB + j) * S + c * 8 + jj] = np.where(ok, a.k[src + jj], 0)
            smem[Vs + (st * KBNB + j) * S + c * 8 + jj] = np.where(ok, a.v[src + jj], 0)

    if n_t > 0:
        load_kv(0, 0)
    W = []
    for w in range(4):
        r0 = w * 16 + G_
        off = (w * 16 + (LANE & 7) + 8 * ((LANE >> 3) & 1)) * S + 8 * (LANE >> 4)
        W.append(
            dict(
                r0=r0,
                r1=r0 + 8,
                pos=(s_pos[r0], s_pos[r0 + 8]),
                l2=(s_lse2[r0], s_lse2[r0 + 8]),
                de=(s_delta[r0], s_delta[r0 + 8]),
                qf=[ldsm_x4(smem, Qs + off + kd * 16) for kd in range(KD)],
                of=[ldsm_x4(smem, Os + off + kd * 16) for kd in range(KD)],
                dqa=np.zeros((NB, 4, 32), F32),
            )
        )
    for t in range(n_t):
        st = t & 1
        if t + 1 < n_t:
            load_kv(t + 1, st ^ 1)
        Kt, Vt = Ks + st * KBNB * S, Vs + st * KBNB * S
        for w in range(4):
            X = W[w]
            s, dp = np.zeros((NS, 4, 32), F32), np.zeros((NS, 4, 32), F32)
            n2 = np.arange(NS // 2)[:, None]
            for kd in range(KD):
                off = (n2 * 16 + (LANE & 7) + 8 * (LANE >> 4)) * S + kd * 16 + 8 * ((LANE >> 3) & 1)
                bk, bv = ldsm_x4(smem, Kt + off), ldsm_x4(smem, Vt + off)
                s[0::2] = mma16816(s[0::2], X["qf"][kd], bk[:, 0], bk[:, 1])
                s[1::2] = mma16816(s[1::2], X["qf"][kd], bk[:, 2], bk[:, 3])
                dp[0::2] = mma16816(dp[0::2], X["of"][kd], bv[:, 0], bv[:, 1])
                dp[1::2] = mma16816(dp[1::2], X["of"][kd], bv[:, 2], bv[:, 3])
            dsk = np.empty((NS, 2, 32), U32)
            for nb in range(NS):
                for h in range(2):
                    ds = []
                    for j in range(2):
                        key = t * KBNB + nb * 8 + 2 * TQ + j
                        p = np.where(
                            key <= X["pos"][h], exp2f(fsub(fmul(s[nb, 2 * h + j], a.scale_log2), X["l2"][h])), F32(0)
                        )
                        ds.append(fmul(p, fsub(dp[nb, 2 * h + j], X["de"][h])))
                    dsk[nb, h] = pack_bf16(ds[0], ds[1])
            n2 = np.arange(NB // 2)[:, None]
            for kk in range(KBNB // 16):
                da = np.stack([dsk[2 * kk, 0], dsk[2 * kk, 1], dsk[2 * kk + 1, 0], dsk[2 * kk + 1, 1]])
                bk = ldsm_x4(
                    smem,
                    Kt + (kk * 16 + (LANE & 7) + 8 * ((LANE >> 3) & 1)) * S + n2 * 16 + 8 * (LANE >> 4),
                    trans=True,
                )
                X["dqa"][0::2] = mma16816(X["dqa"][0::2], da, bk[:, 0], bk[:, 1])
                X["dqa"][1::2] = mma16816(X["dqa"][1::2], da, bk[:, 2], bk[:, 3])
    for w in range(4):
        X = W[w]
        for h in range(2):
            r = X["r1"] if h else X["r0"]
            o = s_idx[r] * a.D
            d = np.arange(NB)[:, None] * 8 + 2 * TQ
            ok = (X["pos"][h] >= 0) & (d < a.D)
            for j in range(2):
                a.dq[(o + d + j)[ok]] = plus_zero(fmul(X["dqa"][:, 2 * h + j], a.scale))[ok]


def dkv_cta(a, DP, bx, kh, variant=None):
    S, C8, KD, NB, NR = DP + KPAD, DP // 8, DP // 16, DP // 8, KBMQ // 8
    smem = np.full(2 * KBKV * S + 4 * KBMQ * S, 0xFFFF, U16)
    Ks = 0
    Vs = KBKV * S
    Qs = Vs + KBKV * S
    Os = Qs + 2 * KBMQ * S
    B, G = a.B, a.G
    if not bwd_plan_ok(a):  # bwd_fill_nan_dkv: grid-stride over the keys, this CTA's kv head
        for j in range(bx, a.Tk, a.grid_kv):
            o = (j * a.Hkv + kh) * a.D
            a.dk[o : o + a.D] = np.nan
            a.dv[o : o + a.D] = np.nan
        return
    if bx >= a.kvplan[B]:
        return
    b = item_seq(a.kvplan, B, bx)
    kb = bx - int(a.kvplan[b])
    k0, lk = int(a.cu_k[b]), int(a.cu_k[b + 1] - a.cu_k[b])
    maxpos = int(a.kvplan[B + 1 + b])
    key0 = kb * KBKV
    kvs = a.Hkv * a.D
    e = np.arange(KBKV * C8)
    j_, c_ = e // C8, e % C8
    ok = (key0 + j_ < lk) & (c_ * 8 < a.D)
    src = np.where(ok, (k0 + key0 + j_) * kvs + kh * a.D + c_ * 8, 0)
    for jj in range(8):
        smem[Ks + j_ * S + c_ * 8 + jj] = np.where(ok, a.k[src + jj], 0)
        smem[Vs + j_ * S + c_ * 8 + jj] = np.where(ok, a.v[src + jj], 0)
    # row slots: R = position * G + g (the kernel); "dkv_rows_by_buffer": R = buffer query index * G + g
    by_buf = variant == "dkv_rows_by_buffer"
    q0, q1 = int(a.cu_q[b]), int(a.cu_q[b + 1])
    if by_buf:
        rb_lo, rb_hi = q0 * G // KBMQ, (q1 * G - 1) // KBMQ if q1 > q0 else q0 * G // KBMQ - 1
    else:
        rb_lo = key0 * G // KBMQ
        rb_hi = ((maxpos + 1) * G - 1) // KBMQ if maxpos >= key0 else rb_lo - 1
    n_rb = rb_hi - rb_lo + 1
    s_pos = np.full((2, KBMQ), -1, np.int64)
    s_idx = np.full((2, KBMQ), -1, np.int64)
    s_lse2, s_delta = np.zeros((2, KBMQ), F32), np.zeros((2, KBMQ), F32)

    def load_rows(rb, st):
        for r in range(KBMQ):
            R = rb * KBMQ + r
            pos, idx, l2, de = -1, -1, F32(0), F32(0)
            if by_buf:
                i = R // G if q0 <= R // G < q1 else -1
                p = int(a.q_pos[i]) if i >= 0 else lk
            else:
                p = R // G
                i = int(a.kvplan[2 * B + 2 + k0 + p]) if p < lk else -1
            if p < lk and i >= 0:
                pos, idx = p, i * a.Hq + kh * G + R % G
                l2, de = a.lse2[idx], a.delta[idx]
            s_pos[st, r], s_idx[st, r], s_lse2[st, r], s_delta[st, r] = pos, idx, l2, de
        e = np.arange(KBMQ * C8)
        r_, c_ = e // C8, e % C8
        idx = s_idx[st, r_]
        ok = (idx >= 0) & (c_ * 8 < a.D)
        src = np.where(ok, idx * a.D + c_ * 8, 0)
        for jj in range(8):
            smem[Qs + (st * KBMQ + r_) * S + c_ * 8 + jj] = np.where(ok, a.q[src + jj], 0)
            smem[Os + (st * KBMQ + r_) * S + c_ * 8 + jj] = np.where(ok, a.dob[src + jj], 0)

    if n_rb > 0:
        load_rows(rb_lo, 0)
    W = []
    for w in range(4):
        W.append(
            dict(
                kr0=key0 + w * 16 + G_,
                dka=np.zeros((NB, 4, 32), F32),
                dva=np.zeros((NB, 4, 32), F32),
                aoff=(w * 16 + (LANE & 7) + 8 * ((LANE >> 3) & 1)) * S + 8 * (LANE >> 4),
            )
        )
    for it in range(n_rb):
        st = it & 1
        if it + 1 < n_rb:
            load_rows(rb_lo + it + 1, st ^ 1)
        Qt, Ot = Qs + st * KBMQ * S, Os + st * KBMQ * S
        for w in range(4):
            X = W[w]
            sT, dpT = np.zeros((NR, 4, 32), F32), np.zeros((NR, 4, 32), F32)
            n2 = np.arange(NR // 2)[:, None]
            for kd in range(KD):
                ka, va = ldsm_x4(smem, Ks + X["aoff"] + kd * 16), ldsm_x4(smem, Vs + X["aoff"] + kd * 16)
                off = (n2 * 16 + (LANE & 7) + 8 * (LANE >> 4)) * S + kd * 16 + 8 * ((LANE >> 3) & 1)
                bq, bo = ldsm_x4(smem, Qt + off), ldsm_x4(smem, Ot + off)
                sT[0::2] = mma16816(sT[0::2], ka, bq[:, 0], bq[:, 1])
                sT[1::2] = mma16816(sT[1::2], ka, bq[:, 2], bq[:, 3])
                dpT[0::2] = mma16816(dpT[0::2], va, bo[:, 0], bo[:, 1])
                dpT[1::2] = mma16816(dpT[1::2], va, bo[:, 2], bo[:, 3])
            pk, dk2 = np.empty((NR, 2, 32), U32), np.empty((NR, 2, 32), U32)
            for nb in range(NR):
                for h in range(2):
                    p, ds = [], []
                    for j in range(2):
                        col = nb * 8 + 2 * TQ + j
                        key = X["kr0"] + 8 * h
                        pj = np.where(
                            key <= s_pos[st, col],
                            exp2f(fsub(fmul(sT[nb, 2 * h + j], a.scale_log2), s_lse2[st, col])),
                            F32(0),
                        )
                        p.append(pj)
                        ds.append(fmul(pj, fsub(dpT[nb, 2 * h + j], s_delta[st, col])))
                    pk[nb, h], dk2[nb, h] = pack_bf16(p[0], p[1]), pack_bf16(ds[0], ds[1])
            n2 = np.arange(NB // 2)[:, None]
            for kk in range(KBMQ // 16):
                pa = np.stack([pk[2 * kk, 0], pk[2 * kk, 1], pk[2 * kk + 1, 0], pk[2 * kk + 1, 1]])
                da = np.stack([dk2[2 * kk, 0], dk2[2 * kk, 1], dk2[2 * kk + 1, 0], dk2[2 * kk + 1, 1]])
                off = (kk * 16 + (LANE & 7) + 8 * ((LANE >> 3) & 1)) * S + n2 * 16 + 8 * (LANE >> 4)
                bo, bq = ldsm_x4(smem, Ot + off, trans=True), ldsm_x4(smem, Qt + off, trans=True)
                X["dva"][0::2] = mma16816(X["dva"][0::2], pa, bo[:, 0], bo[:, 1])
                X["dva"][1::2] = mma16816(X["dva"][1::2], pa, bo[:, 2], bo[:, 3])
                X["dka"][0::2] = mma16816(X["dka"][0::2], da, bq[:, 0], bq[:, 1])
                X["dka"][1::2] = mma16816(X["dka"][1::2], da, bq[:, 2], bq[:, 3])
    for w in range(4):
        X = W[w]
        for h in range(2):
            key = X["kr0"] + 8 * h
            o = ((k0 + key) * a.Hkv + kh) * a.D
            d = np.arange(NB)[:, None] * 8 + 2 * TQ
            ok = (key < lk) & (d < a.D)
            for j in range(2):
                a.dk[(o + d + j)[ok]] = plus_zero(fmul(X["dka"][:, 2 * h + j], a.scale))[ok]
                a.dv[(o + d + j)[ok]] = plus_zero(X["dva"][:, 2 * h + j])[ok]


def attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, q_pos, scale, variant=None, captured=False, order=None):
    """The backward as the .cu's host code runs it: (dq, dk, dv) FP32. ``captured``: as inside a CUDA graph capture,
    where the host cannot read cu_seqlens / q_pos (no host checks; the device plans and the kernels' guards decide).
    ``order``: the order of the plan kernel's query atomics (see bwd_plan_kernel)."""
    Tq, Hq, D = q.shape
    Tk, Hkv, _ = k.shape
    B, G = cu_q.numel() - 1, Hq // Hkv
    DP = 64 if D <= 64 else 128
    cq, ck, qp = cu_q.numpy(), cu_k.numpy(), q_pos.numpy()
    if not captured:  # the eager host check (check_inputs' and the repeated-position one), as one-line errors
        if not (
            cq[0] == 0
            and ck[0] == 0
            and cq[B] == Tq
            and ck[B] == Tk
            and (np.diff(cq) >= 0).all()
            and (np.diff(ck) >= 0).all()
        ):
            raise ValueError("cu_seqlens must start at 0, end at Tq, Tk and be non-decreasing")
        seen = {}
        for b in range(B):
            for i in range(int(cq[b]), int(cq[b + 1])):
                p = int(qp[i])
                if not 0 <= p < int(ck[b + 1] - ck[b]):
                    raise ValueError(
                        f"query {i} at position {p} but its sequence {b} has {int(ck[b + 1] - ck[b])} keys"
                    )
                if (b, p) in seen:
                    raise ValueError(f"sequence {b} has two queries at position {p}")
                seen[b, p] = i
    if Tq == 0 and Tk == 0:
        return torch.zeros(0, Hq, D), torch.zeros(0, Hkv, D), torch.zeros(0, Hkv, D)
    kv_cap = -(-Tk // KBKV) + B
    kvplan = bwd_plan_kernel(cq, ck, qp, B, Tq, Tk, np.full(kvplan_size(B, Tk), -1, np.int64), order)
    dout_np = _u16(dout) if dout.dtype == torch.bfloat16 else dout.contiguous().numpy().reshape(-1).astype(F32)
    dob, delta, lse2 = bwd_prep(dout_np, _u16(out), lse.contiguous().numpy().reshape(-1).astype(F32), Tq * Hq, D)
    cap = -(-Tq * G // 64) + B
    plan = plan_kernel(cq, ck, qp, B, Tq, Tk, G, 64, False, cap)
    # outputs start as garbage (at::empty): every element must be written by a kernel
    a = Args(
        q=_u16(q),
        k=_u16(k),
        v=_u16(v),
        dob=dob,
        lse2=lse2,
        delta=delta,
        cu_q=cq,
        cu_k=ck,
        q_pos=qp,
        plan=plan,
        kvplan=kvplan,
        dq=np.full(Tq * Hq * D, 1234.5, F32),
        dk=np.full(Tk * Hkv * D, 1234.5, F32),
        dv=np.full(Tk * Hkv * D, 1234.5, F32),
        Tq=Tq,
        Tk=Tk,
        B=B,
        Hq=Hq,
        Hkv=Hkv,
        G=G,
        D=D,
        scale_log2=F32(scale) * LOG2E,
        scale=F32(scale),
        grid_q=cap,
        grid_kv=kv_cap,
    )
    for kh in range(Hkv):
        if Tq > 0:
            for bx in range(cap):
                dq_cta(a, DP, bx, kh)
        if Tk > 0:
            for bx in range(kv_cap):
                dkv_cta(a, DP, bx, kh, variant)
    return (
        torch.from_numpy(a.dq).reshape(Tq, Hq, D),
        torch.from_numpy(a.dk).reshape(Tk, Hkv, D),
        torch.from_numpy(a.dv).reshape(Tk, Hkv, D),
    )
