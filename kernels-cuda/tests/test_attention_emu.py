"""The attention kernels' per-element order, executed on the CPU: attention_emu.py runs the kernels warp by
warp (the same plan, chunk loop, merges, shared-memory layout and ldmatrix / mma.sync address expressions; the MMA's
k16 sum and exp2f / logf are models — see its docstring), so these tests show, before any GPU run, that

* the fragment index math computes causal GQA attention and its gradients (against FP64; several head dims, GQA
  ratios, packed lengths, both launch modes);
* decode == chunked prefill (chunks at arbitrary boundaries, across the 64-key tile and the 256-key chunk) == prefill,
  a sequence packed behind others == alone, a query among any others == alone, chunk mode == whole-row mode with 32
  or 16 rows per warp (the H100 and the A100 configurations) — bitwise,
  out and lse; the backward's dq / dk / dv are bitwise the same packed or alone, with pad rows inside a sequence, and
  for a decode step against the prefill's backward with dO on that row only;
* the in-kernel guards of a captured call (NaN rows, never a wrong read);
* each invariance check fails for a deliberately variant kernel (the emulator's ``variant``): tiles aligned to the
  CTA's first query, a chunk size chosen by length, BF16 partials on the split path, dK/dV rows aligned to the packed
  buffer. The emulator's arithmetic is deterministic and the inputs are seeded, so these verdicts are the same on
  every host.

The GPU's own bits are judged by test_gpu_attention.py on a GPU. ~1 minute on 2 cores."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attention_emu as E  # noqa: E402
from ws1_cuda_testpaths import PKG  # noqa: E402

BF = torch.bfloat16


def cu(lengths):
    return torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0)


def bits(t):
    t = t.contiguous()
    return t.view(torch.int16) if t.dtype == BF else t.view(torch.int32)


def ndiff(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    return int((bits(a) != bits(b)).sum())


def rnd(g, *shape):
    return torch.randn(*shape, generator=g).to(BF)


def qkv(seed, lengths, Hq, Hkv, D):
    g = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    return rnd(g, T, Hq, D), rnd(g, T, Hkv, D), rnd(g, T, Hkv, D)


def ref_fwd(q, k, v, lens_q, lens_k, pos, scale, grad=False):
    """FP64 causal GQA attention over packed sequences (each query sees keys 0..q_pos of its sequence)."""
    G = q.shape[1] // k.shape[1]
    qd, kd, vd = (t.double().requires_grad_(grad) for t in (q, k, v))
    outs, qo, ko = [], 0, 0
    for lq, lk in zip(lens_q, lens_k):
        s = torch.einsum("qhd,khd->hqk", qd[qo : qo + lq], kd[ko : ko + lk].repeat_interleave(G, 1)) * scale
        mask = torch.arange(lk)[None, :] > pos[qo : qo + lq, None]
        s = s.masked_fill(mask[None], float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vd[ko : ko + lk].repeat_interleave(G, 1)))
        qo, ko = qo + lq, ko + lk
    return torch.cat(outs), (qd, kd, vd)


def positions(lengths):
    return torch.cat([torch.arange(n) for n in lengths])


# ---- the emulator is the .cu -----------------------------------------------------------------------------------------
def test_tile_constants_and_address_expressions_are_the_cuda_sources():
    """The emulator's constants are the header's, and every ldmatrix address expression it executes appears verbatim
    (lane -> LANE) in the kernel sources that use it (attention_fwd.cuh, attention_bwd.cuh): the emulator cannot drift
    from the kernels unnoticed."""
    hdr = (PKG / "csrc" / "attention_mma.cuh").read_text()
    for name, val in (
        ("kBN", E.KBN),
        ("kChunk", E.KCHUNK),
        ("kBNB", E.KBNB),
        ("kBKV", E.KBKV),
        ("kBMQ", E.KBMQ),
        ("kPad", E.KPAD),
        ("kDMax", E.KDMAX),
    ):
        m = re.search(rf"constexpr int {name} = (\d+);", hdr)
        assert m and int(m.group(1)) == val, (name, m and m.group(1), val)
    fwd, bwd = "attention_fwd.cuh", "attention_bwd.cuh"
    cu_src = {f: re.sub(r"\s+", "", (PKG / "csrc" / f).read_text()) for f in (fwd, bwd)}
    emu_src = re.sub(r"\s+", "", Path(E.__file__).read_text()).replace("LANE", "lane")
    exprs = {  # expression -> the sources whose kernels use it
        "(w*16*MW+(lane&7)+8*((lane>>3)&1))*S+8*(lane>>4)": (fwd,),  # forward Q A fragments
        "(w*16+(lane&7)+8*((lane>>3)&1))*S+8*(lane>>4)": (bwd,),  # backward A fragments (Q, dO, K, V rows)
        "(n2*16+(lane&7)+8*(lane>>4))*S+kd*16+8*((lane>>3)&1)": (fwd, bwd),  # B fragments, k = d (K, V, Q, dO rows)
        "(kk*16+(lane&7)+8*((lane>>3)&1))*S+n2*16+8*(lane>>4)": (fwd, bwd),  # B fragments, k = keys / rows (.trans)
    }
    for e, files in exprs.items():
        for f in files:
            assert e in cu_src[f], f"{f} lost {e}"
        assert e in emu_src, f"attention_emu.py lost {e}"


# ---- forward accuracy ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "D,Hq,Hkv,lengths,sms",
    [
        (32, 4, 2, [70], 1),  # whole-row mode, DP 64
        (32, 4, 2, [70], 132),  # chunk mode
        (40, 5, 1, [19, 3, 33], 1),  # D not a multiple of 16 (zero-padded), G 5, packed
        (128, 2, 2, [11, 16, 13, 19], 132),
        (64, 2, 1, [300], 1),  # across the 256-key chunk: two chunks merged in registers
    ],
)
def test_forward_matches_fp64(D, Hq, Hkv, lengths, sms):
    q, k, v = qkv(D + len(lengths), lengths, Hq, Hkv, D)
    pos = positions(lengths)
    out, lse = E.attention(q, k, v, cu(lengths), cu(lengths), pos, D**-0.5, sms=sms)
    ref, _ = ref_fwd(q, k, v, lengths, lengths, pos, D**-0.5)
    err = out.double() - ref
    assert torch.isfinite(out.float()).all() and torch.isfinite(lse).all()
    assert err.norm() / ref.norm() < 5e-3 and err.abs().max() < 3e-2, (err.norm() / ref.norm(), err.abs().max())
    # lse against FP64 (natural log of sum exp(scale s))
    G, ls_ref, qo = Hq // Hkv, [], 0
    for n in lengths:
        s = (
            torch.einsum("qhd,khd->hqk", q[qo : qo + n].double(), k[qo : qo + n].double().repeat_interleave(G, 1))
            * D**-0.5
        )
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1)[None], float("-inf"))
        ls_ref.append(torch.logsumexp(s, -1).transpose(0, 1))
        qo += n
    torch.testing.assert_close(lse.double(), torch.cat(ls_ref), atol=1e-3, rtol=1e-4)


# ---- forward invariance -------------------------------------------------------------------------------------------
S_LONG = 300  # crosses the 64-key tiles and the 256-key chunk


@pytest.fixture(scope="module")
def long_case():
    D, Hq, Hkv = 32, 4, 2
    q, k, v = qkv(7, [S_LONG], Hq, Hkv, D)
    pos = positions([S_LONG])
    out, lse = E.attention(q, k, v, cu([S_LONG]), cu([S_LONG]), pos, D**-0.5, sms=1)  # whole-row prefill
    return q, k, v, pos, D**-0.5, out, lse


def chunk_diffs(case, bounds, variant=None, ref=None, sms=132):
    q, k, v, pos, sc, out, lse = case
    if ref is not None:
        out, lse = ref
    diffs = {}
    for c0, c1 in bounds:
        o, ls = E.attention(q[c0:c1], k[:c1], v[:c1], cu([c1 - c0]), cu([c1]), pos[c0:c1], sc, sms=sms, variant=variant)
        diffs[(c0, c1)] = ndiff(o, out[c0:c1]) + ndiff(ls, lse[c0:c1])
    return diffs


BOUNDS = [(0, 7), (7, 69), (69, 256), (256, 257), (257, 299), (299, 300), (63, 64), (64, 65), (255, 256)]


def test_decode_and_chunked_prefill_equal_prefill_bitwise(long_case):
    """Chunks at arbitrary boundaries (not multiples of the tile), decode steps on both sides of a tile and of the
    chunk boundary (chunk mode: split-KV partials + the merge kernel) == the whole-row prefill, out and lse."""
    d = chunk_diffs(long_case, BOUNDS)
    assert not any(d.values()), d


def test_modes_and_neighbours_do_not_change_a_query(long_case):
    q, k, v, pos, sc, out, lse = long_case
    # the whole prefill in chunk mode (1-warp CTAs, capacity fallback to whole rows), and in whole-row mode with 16
    # rows per warp (an A100's shared memory) == whole-row mode with 32 rows per warp
    o, ls = E.attention(q, k, v, cu([S_LONG]), cu([S_LONG]), pos, sc, sms=10**6)
    assert ndiff(o, out) == 0 and ndiff(ls, lse) == 0
    o, ls = E.attention(q, k, v, cu([S_LONG]), cu([S_LONG]), pos, sc, sms=1, smem_optin=166912)
    assert ndiff(o, out) == 0 and ndiff(ls, lse) == 0
    # a subset of the queries (other CTA neighbours, other block maxima) == their rows in the prefill
    sel = torch.tensor([3, 64, 65, 200, 257, 299])
    o, ls = E.attention(q[sel], k, v, cu([len(sel)]), cu([S_LONG]), pos[sel], sc, sms=1)
    assert ndiff(o, out[sel]) == 0 and ndiff(ls, lse[sel]) == 0
    # packed behind and before other sequences (continuous batching of decode steps and a prefill)
    g = torch.Generator().manual_seed(11)
    a = [rnd(g, 5, q.shape[1], q.shape[2]), rnd(g, 5, k.shape[1], k.shape[2]), rnd(g, 5, k.shape[1], k.shape[2])]
    qq, kk, vv = (torch.cat([x[:5], y, x[:3]]) for x, y in zip(a, (q, k, v)))
    pp = torch.cat([torch.arange(5), pos, torch.arange(3)])
    o, ls = E.attention(qq, kk, vv, cu([5, S_LONG, 3]), cu([5, S_LONG, 3]), pp, sc, sms=1)
    assert ndiff(o[5 : 5 + S_LONG], out) == 0 and ndiff(ls[5 : 5 + S_LONG], lse) == 0
    # three decode steps of three sequences in one call (chunk mode) == each one's prefill row
    o, ls = E.attention(
        torch.cat([q[299:300], a[0][4:5], q[100:101]]),
        torch.cat([k, a[1], k[:101]]),
        torch.cat([v, a[2], v[:101]]),
        cu([1, 1, 1]),
        cu([S_LONG, 5, 101]),
        torch.tensor([299, 4, 100]),
        sc,
    )
    assert ndiff(o[0:1], out[299:300]) == 0 and ndiff(o[2:3], out[100:101]) == 0
    assert ndiff(ls[0:1], lse[299:300]) == 0 and ndiff(ls[2:3], lse[100:101]) == 0


def test_three_chunks_merged_by_the_split_path_equal_registers():
    """A row over 3 chunks: decode (3 split CTAs, the merge kernel) == the whole-row prefill's in-register merges."""
    D, Hq, Hkv, S = 32, 2, 1, 560
    q, k, v = qkv(9, [S], Hq, Hkv, D)
    pos = positions([S])
    sel = torch.tensor([513, 559])
    full, fl = E.attention(q[sel], k, v, cu([2]), cu([S]), pos[sel], D**-0.5, sms=1)  # whole-row CTA
    for j, p in enumerate(sel.tolist()):
        o, ls = E.attention(
            q[p : p + 1], k[: p + 1], v[: p + 1], cu([1]), cu([p + 1]), pos[p : p + 1], D**-0.5
        )  # split
        assert ndiff(o, full[j : j + 1]) == 0 and ndiff(ls, fl[j : j + 1]) == 0, p


def test_a_head_group_across_fragment_boundaries():
    """G = 5 (a query's heads straddle 16-row fragments and CTAs), D = 40 (zero-padded to 64): decode over two chunks,
    a chunk, and the prefill in every configuration agree bitwise."""
    D, Hq, Hkv, S = 40, 10, 2, 270
    q, k, v = qkv(13, [S], Hq, Hkv, D)
    pos = positions([S])
    out, lse = E.attention(q, k, v, cu([S]), cu([S]), pos, D**-0.5, sms=1)
    for sms, optin in ((1, 166912), (10**6, 232448)):
        o, ls = E.attention(q, k, v, cu([S]), cu([S]), pos, D**-0.5, sms=sms, smem_optin=optin)
        assert ndiff(o, out) == 0 and ndiff(ls, lse) == 0, sms
    for c0, c1 in ((269, 270), (200, 270), (13, 14)):
        o, ls = E.attention(q[c0:c1], k[:c1], v[:c1], cu([c1 - c0]), cu([c1]), pos[c0:c1], D**-0.5)
        assert ndiff(o, out[c0:c1]) == 0 and ndiff(ls, lse[c0:c1]) == 0, (c0, c1)


@pytest.mark.parametrize(
    "lengths_q,lengths_k,first,Hq,Hkv",
    [
        ([11, 16, 13, 19], [11, 16, 13, 19], [0, 0, 0, 0], 4, 2),  # the fixture pack's lengths
        ([1, 1, 0, 1], [100, 37, 5, 114], [99, 36, 0, 113], 10, 2),  # decode lanes, an empty sequence, G 5
        ([1] * 32, [8] * 32, [7] * 32, 4, 4),  # B 32: the rule's edge (one item per lane)
    ],
)
def test_self_planned_chunk_mode_gives_the_plan_kernels_bits(lengths_q, lengths_k, first, Hq, Hkv, monkeypatch):
    """Short chunk-mode calls (B <= 32, Tk <= 256) plan inside their CTAs (self_plan: one launch instead of two): the
    same rows in the same CTAs as the plan kernel's items, so the same bits, out and lse; and the same as whole-row
    mode (sms=1)."""
    D = 32
    g = torch.Generator().manual_seed(sum(lengths_k))
    q = rnd(g, sum(lengths_q), Hq, D)
    k, v = rnd(g, sum(lengths_k), Hkv, D), rnd(g, sum(lengths_k), Hkv, D)
    pos = torch.cat([torch.arange(f, f + n) for n, f in zip(lengths_q, first)])
    args = (q, k, v, cu(lengths_q), cu(lengths_k), pos, D**-0.5)
    calls, real = [], E.self_plan
    monkeypatch.setattr(E, "self_plan", lambda a, bx: (calls.append(bx), real(a, bx))[1])
    o1, l1 = E.attention(*args)  # self-planned (the host's rule)
    assert calls  # ... which this call took
    calls.clear()
    o2, l2 = E.attention(*args, self_planned=False)  # the plan kernel
    assert not calls
    o3, l3 = E.attention(*args, sms=1)  # whole-row mode
    assert (ndiff(o1, o2), ndiff(l1, l2), ndiff(o1, o3), ndiff(l1, l3)) == (0, 0, 0, 0)
    assert not torch.isnan(l1).any()


def test_guards_of_a_self_planned_call():
    """self_plan's checks are the plan kernel's: a position past its keys is that row's NaN, the others keep their
    bits; cu_seqlens past Tq make every row NaN."""
    q, k, v = qkv(4, [20], 4, 2, 32)
    pos = positions([20])
    good, _ = E.attention(q, k, v, cu([20]), cu([20]), pos, 0.2)
    bad_pos = pos.clone()
    bad_pos[5] = 20
    o, ls = E.attention(q, k, v, cu([20]), cu([20]), bad_pos, 0.2)
    keep = torch.arange(20) != 5
    assert torch.isnan(o[5].float()).all() and torch.isnan(ls[5]).all() and ndiff(o[keep], good[keep]) == 0
    o, ls = E.attention(q, k, v, torch.tensor([0, 25]), cu([20]), pos, 0.2)
    assert torch.isnan(o.float()).all() and torch.isnan(ls).all()


def test_guards_of_a_captured_call_give_nan_rows_never_a_wrong_read():
    q, k, v = qkv(3, [20], 4, 2, 32)
    pos = positions([20])
    good, _ = E.attention(q, k, v, cu([20]), cu([20]), pos, 0.2, sms=1)
    bad_pos = pos.clone()
    bad_pos[5] = 20  # past the sequence's keys
    for sms in (1, 132):
        o, ls = E.attention(q, k, v, cu([20]), cu([20]), bad_pos, 0.2, sms=sms)
        assert torch.isnan(o[5].float()).all() and torch.isnan(ls[5]).all()
        keep = torch.arange(20) != 5
        assert ndiff(o[keep], good[keep]) == 0
    o, ls = E.attention(q, k, v, torch.tensor([0, 25]), cu([20]), pos, 0.2, sms=1)  # cu_seqlens past Tq
    assert torch.isnan(o.float()).all() and torch.isnan(ls).all()


# ---- backward -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bwd_case():
    D, Hq, Hkv, S = 32, 4, 2, 100
    q, k, v = qkv(21, [S], Hq, Hkv, D)
    pos = positions([S])
    dout = torch.randn(S, Hq, D, generator=torch.Generator().manual_seed(22))
    out, lse = E.attention(q, k, v, cu([S]), cu([S]), pos, D**-0.5, sms=1)
    grads = E.attention_bwd(dout, q, k, v, out, lse, cu([S]), cu([S]), pos, D**-0.5)
    return q, k, v, pos, D**-0.5, dout, out, lse, grads


def test_backward_matches_fp64_autograd(bwd_case):
    q, k, v, pos, sc, dout, out, lse, grads = bwd_case
    S = q.shape[0]
    ref, leaves = ref_fwd(q, k, v, [S], [S], pos, sc, grad=True)
    ref.backward(dout.double())
    for name, a, leaf in zip(("dq", "dk", "dv"), grads, leaves):
        err = a.double() - leaf.grad
        assert err.norm() / leaf.grad.norm() < 1e-2 and err.abs().max() < 5e-2, (name, err.norm() / leaf.grad.norm())


def test_backward_is_bitwise_invariant(bwd_case):
    q, k, v, pos, sc, dout, out, lse, (dq, dk, dv) = bwd_case
    S, Hq, D = q.shape
    Hkv = k.shape[1]
    g = torch.Generator().manual_seed(23)
    # packed behind a 5-token sequence == alone
    a = [rnd(g, 5, Hq, D), rnd(g, 5, Hkv, D), rnd(g, 5, Hkv, D)]
    qq, kk, vv = (torch.cat([x, y]) for x, y in zip(a, (q, k, v)))
    pp, dd = torch.cat([torch.arange(5), pos]), torch.cat([torch.randn(5, Hq, D, generator=g), dout])
    o, ls = E.attention(qq, kk, vv, cu([5, S]), cu([5, S]), pp, sc, sms=1)
    pq, pk, pv = E.attention_bwd(dd, qq, kk, vv, o, ls, cu([5, S]), cu([5, S]), pp, sc)
    assert (ndiff(pq[5:], dq), ndiff(pk[5:], dk), ndiff(pv[5:], dv)) == (0, 0, 0)
    # pad rows inside the sequence (garbage queries and keys after its end, dO = 0 there) == unpadded
    P = 11
    qq, kk, vv = (
        torch.cat([y, x]) for x, y in zip((rnd(g, P, Hq, D), rnd(g, P, Hkv, D), rnd(g, P, Hkv, D)), (q, k, v))
    )
    pp, dd = torch.arange(S + P), torch.cat([dout, torch.zeros(P, Hq, D)])
    o, ls = E.attention(qq, kk, vv, cu([S + P]), cu([S + P]), pp, sc, sms=1)
    pq, pk, pv = E.attention_bwd(dd, qq, kk, vv, o, ls, cu([S + P]), cu([S + P]), pp, sc)
    assert (ndiff(pq[:S], dq), ndiff(pk[:S], dk), ndiff(pv[:S], dv)) == (0, 0, 0)
    # a decode step's backward == the prefill's backward with dO on that row only (dq of the row, dk / dv of its keys)
    for t in (37, 99):
        d1 = torch.zeros_like(dout)
        d1[t] = dout[t]
        fq, fk, fv = E.attention_bwd(d1, q, k, v, out, lse, cu([S]), cu([S]), pos, sc)
        o2, l2 = E.attention(q[t : t + 1], k[: t + 1], v[: t + 1], cu([1]), cu([t + 1]), pos[t : t + 1], sc)
        sq, sk, sv = E.attention_bwd(
            dout[t : t + 1], q[t : t + 1], k[: t + 1], v[: t + 1], o2, l2, cu([1]), cu([t + 1]), pos[t : t + 1], sc
        )
        assert (ndiff(sq, fq[t : t + 1]), ndiff(sk, fk[: t + 1]), ndiff(sv, fv[: t + 1])) == (0, 0, 0), t
        assert bool((fk[t + 1 :] == 0).all() and (fv[t + 1 :] == 0).all())  # keys after t: +0, no sign


def test_backward_plans_on_the_device_and_a_captured_call_guards_itself(bwd_case):
    """attention_bwd_plan_kernel (no host sync: a backward can be captured) builds the key plan the dK/dV kernel reads
    — item starts, last positions, the table position -> query — equal to one computed here independently, in any
    order of its threads' atomics; a captured call (no host checks) gives the eager bits on valid input and NaN in
    every output element for what an eager call refuses: never garbage, never a read out of bounds."""
    q, k, v, pos, sc, dout, out, lse, (dq, dk, dv) = bwd_case
    S, Hq, D = q.shape
    # a pack with a decode-like sequence (one query at its last position) and a sequence with no query at all
    lq, lk = [3, 1, 0, 70], [3, 130, 5, 70]
    cq, ck = cu(lq), cu(lk)
    qp = torch.cat([torch.tensor([2, 0, 1]), torch.tensor([129]), torch.arange(70)])
    Tq, Tk, B = sum(lq), sum(lk), len(lq)
    want = np.full(E.kvplan_size(B, Tk), -1, np.int64)
    starts = np.cumsum([0] + [-(-n // E.KBKV) for n in lk])
    want[: B + 1] = starts
    for b in range(B):
        ps = [int(qp[i]) for i in range(int(cq[b]), int(cq[b + 1]))]
        want[B + 1 + b] = max(ps, default=-1)
        for i in range(int(cq[b]), int(cq[b + 1])):
            want[2 * B + 2 + int(ck[b]) + int(qp[i])] = i
    for order in (None, list(range(Tq))[::-1], list(np.random.default_rng(0).permutation(Tq))):
        got = E.bwd_plan_kernel(
            cq.numpy(), ck.numpy(), qp.numpy(), B, Tq, Tk, np.full(E.kvplan_size(B, Tk), -1, np.int64), order
        )
        assert (got == want).all(), order
    # captured, valid input: the eager bits
    gq, gk, gv = E.attention_bwd(
        dout, q, k, v, out, lse, cu([S]), cu([S]), pos, sc, captured=True, order=list(range(S))[::-1]
    )
    assert (ndiff(gq, dq), ndiff(gk, dk), ndiff(gv, dv)) == (0, 0, 0)
    # what an eager call refuses with a one-line error, a captured call turns into NaN everywhere
    dup, past = pos.clone(), pos.clone()
    dup[40] = 39  # two queries at position 39
    past[40] = S  # a position past the sequence's keys
    bad_cu = torch.tensor([0, S + 5])  # cu_seqlens_q past Tq
    for name, cq_, qp_ in (
        ("repeated position", cu([S]), dup),
        ("position past the keys", cu([S]), past),
        ("cu_seqlens past Tq", bad_cu, pos),
    ):
        with pytest.raises(ValueError):
            E.attention_bwd(dout, q, k, v, out, lse, cq_, cu([S]), qp_, sc)
        grads = E.attention_bwd(dout, q, k, v, out, lse, cq_, cu([S]), qp_, sc, captured=True)
        for g_name, g in zip(("dq", "dk", "dv"), grads):
            assert torch.isnan(g).all(), (name, g_name, int((~torch.isnan(g)).sum()))


# ---- negative controls: each check above fails for a deliberately variant kernel -------------------------------------
def test_controls_turn_the_invariance_checks_red(long_case, bwd_case):
    q, k, v, pos, sc, out, lse = long_case
    # tiles aligned to the CTA's first query: a chunk's rows differ from the prefill's (whole-row mode on both sides)
    ref = E.attention(q, k, v, cu([S_LONG]), cu([S_LONG]), pos, sc, sms=1, variant="tiles_from_block")
    d = chunk_diffs(long_case, [(7, 69), (257, 299), (299, 300)], variant="tiles_from_block", ref=ref, sms=1)
    assert all(n > 10 for n in d.values()), d
    # the chunk size chosen by the sequence length: a chunked call with fewer keys uses another chunking
    d = chunk_diffs(long_case, [(69, 256), (7, 69)], variant="chunk_by_length")
    assert all(n > 10 for n in d.values()), d
    # BF16 partials on the split path: a decode over two chunks differs from the whole-row prefill
    d = chunk_diffs(long_case, [(299, 300), (270, 271)], variant="partials_bf16")
    assert all(n > 10 for n in d.values()), d
    # dK/dV rows aligned to the packed buffer: packed != alone
    q, k, v, pos, sc, dout, out, lse, _ = bwd_case
    S, Hq, D = q.shape
    Hkv = k.shape[1]
    g = torch.Generator().manual_seed(23)
    a = [rnd(g, 5, Hq, D), rnd(g, 5, Hkv, D), rnd(g, 5, Hkv, D)]
    qq, kk, vv = (torch.cat([x, y]) for x, y in zip(a, (q, k, v)))
    pp, dd = torch.cat([torch.arange(5), pos]), torch.cat([torch.randn(5, Hq, D, generator=g), dout])
    o, ls = E.attention(qq, kk, vv, cu([5, S]), cu([5, S]), pp, sc, sms=1)
    _, pk, pv = E.attention_bwd(dd, qq, kk, vv, o, ls, cu([5, S]), cu([5, S]), pp, sc, variant="dkv_rows_by_buffer")
    _, ak, av = E.attention_bwd(dout, q, k, v, out, lse, cu([S]), cu([S]), pos, sc, variant="dkv_rows_by_buffer")
    assert ndiff(pk[5:], ak) > 100 and ndiff(pv[5:], av) > 100
