"""ws1_cuda::attention / attention_bwd on a GPU (the tensor-core kernels of csrc/attention_*.cu): accuracy against FP64,
and bitwise invariance of the GPU's own bits —

* decode == chunked prefill (chunks at boundaries that are not multiples of the 64-key tile, across the 256-key
  chunk, lengths up to 2048 + 37) == prefill, out and lse, for head groups G = 1, 2, 4, 5 and head dims 32-128;
  these cross both launch modes (whole rows per 4-warp CTA; one chunk per 1-warp CTA + the merge kernel; the
  capacity fallback of the latter);
* a sequence packed after others == alone; a query among any other queries / heads == alone (random subsets);
* a captured forward replays to the eager bits, re-plans from new cu_seqlens / q_pos each replay, and gives NaN rows
  for inconsistent ones; a captured backward replays to the eager bits and gives NaN outputs for refused input;
* backward: dq / dk / dv against FP64 autograd; bitwise packed vs alone, with pad rows inside a sequence (dO = 0),
  a decode step's backward vs the prefill's with dO on that row; an FP32 dO == the same dO rounded to BF16.

The controls that show these checks can fail run on the CPU (test_attention_emu.py: the emulated kernels with one
deliberate deviation each). Skipped, with the reason, on a host without a CUDA device or the built ws1_kernels_cuda.
~1 minute on an H200."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_cuda_testpaths import gpu_unavailable  # noqa: E402

_WHY = gpu_unavailable()

pytestmark = pytest.mark.skipif(_WHY is not None, reason=str(_WHY))
BF, F32 = torch.bfloat16, torch.float32
DEV = "cuda"


def K():
    return torch.ops.ws1_cuda


def bits(t):
    t = t.detach().contiguous()
    return t.view(torch.int16) if t.dtype == BF else t.view(torch.int32) if t.dtype == F32 else t


def ndiff(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    return int((bits(a) != bits(b)).sum())


def same(a, b, what):
    n = ndiff(a, b)
    assert n == 0, f"{what}: {n} elements differ bitwise"


def gen(seed):
    return torch.Generator(device="cpu").manual_seed(seed)


def rnd(g, *shape, dtype=BF):
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


def cu(lengths):
    return torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0).to(DEV)


def positions(lengths):
    return torch.cat([torch.arange(n) for n in lengths]).to(DEV)


def attn(q, k, v, lens_q, lens_k, pos, scale):
    return K().attention(q, k, v, cu(lens_q), cu(lens_k), pos, scale)


def ref_fwd(q, k, v, lens_q, lens_k, pos, scale, grad=False):
    """FP64 causal GQA attention per sequence: (out, lse) — or, with grad, out and the FP64 leaves."""
    G = q.shape[1] // k.shape[1]
    qd, kd, vd = (t.double().requires_grad_(grad) for t in (q, k, v))
    outs, lses, qo, ko = [], [], 0, 0
    for lq, lk in zip(lens_q, lens_k):
        s = torch.einsum("qhd,khd->hqk", qd[qo : qo + lq], kd[ko : ko + lk].repeat_interleave(G, 1)) * scale
        mask = torch.arange(lk, device=DEV)[None, :] > pos[qo : qo + lq, None]
        s = s.masked_fill(mask[None], float("-inf"))
        lses.append(torch.logsumexp(s, -1).transpose(0, 1))
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vd[ko : ko + lk].repeat_interleave(G, 1)))
        qo, ko = qo + lq, ko + lk
    if grad:
        return torch.cat(outs), (qd, kd, vd)
    return torch.cat(outs), torch.cat(lses)


# ---- forward ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "D,Hq,Hkv,lengths",
    [
        (128, 32, 8, [11, 16, 13, 19]),  # the fixture pack (chunk mode)
        (128, 32, 8, [2085]),  # whole-row mode, 9 chunks merged in registers
        (64, 8, 2, [300, 7, 64]),
        (32, 4, 2, [37]),  # the tiny model's head_dim
        (40, 10, 2, [70, 3]),  # D zero-padded to 64, G 5
        (128, 4, 4, [513]),  # G 1
    ],
)
def test_forward_matches_fp64(D, Hq, Hkv, lengths):
    g = gen(D + sum(lengths))
    T = sum(lengths)
    q, k, v = rnd(g, T, Hq, D), rnd(g, T, Hkv, D), rnd(g, T, Hkv, D)
    pos = positions(lengths)
    out, lse = attn(q, k, v, lengths, lengths, pos, D**-0.5)
    ref, ref_lse = ref_fwd(q, k, v, lengths, lengths, pos, D**-0.5)
    assert torch.isfinite(out.float()).all() and torch.isfinite(lse).all()
    err = out.double() - ref
    rel = float(err.norm() / ref.norm())
    assert rel < 5e-3 and float(err.abs().max()) < 3e-2, (rel, float(err.abs().max()))
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-3, rtol=1e-4)


def _long(D=128, Hq=32, Hkv=8, S=2085, seed=40):
    g = gen(seed)
    q, k, v = rnd(g, S, Hq, D), rnd(g, S, Hkv, D), rnd(g, S, Hkv, D)
    pos = positions([S])
    out, lse = attn(q, k, v, [S], [S], pos, D**-0.5)
    return q, k, v, pos, D**-0.5, out, lse


BOUNDS = [
    (0, 7),
    (7, 69),
    (69, 256),
    (256, 257),
    (257, 1000),
    (1000, 2048),
    (2048, 2084),
    (2084, 2085),
    (63, 64),
    (64, 65),
    (255, 256),
    (511, 512),
    (2047, 2048),
]


def test_decode_and_chunked_prefill_equal_prefill_bitwise():
    """S = 2048 + 37, Hq 32 / Hkv 8, D 128: every chunk (arbitrary boundaries) and decode step (single queries on both
    sides of tile and chunk boundaries) against the full prefill, out and lse."""
    q, k, v, pos, sc, out, lse = _long()
    for c0, c1 in BOUNDS:
        o, ls = attn(q[c0:c1], k[:c1], v[:c1], [c1 - c0], [c1], pos[c0:c1], sc)
        same(o, out[c0:c1], f"out, queries {c0}:{c1} against keys 0..{c1 - 1}")
        same(ls, lse[c0:c1], f"lse, queries {c0}:{c1}")


@pytest.mark.parametrize("D,Hq,Hkv", [(128, 8, 8), (64, 8, 4), (128, 16, 4), (40, 10, 2)])
def test_head_groups_decode_chunked_prefill(D, Hq, Hkv):
    S = 600
    q, k, v, pos, sc, out, lse = _long(D, Hq, Hkv, S, seed=41 + D + Hq)
    for c0, c1 in [(0, 5), (5, 300), (300, 599), (599, 600), (255, 256), (256, 257)]:
        o, ls = attn(q[c0:c1], k[:c1], v[:c1], [c1 - c0], [c1], pos[c0:c1], sc)
        same(o, out[c0:c1], f"G {Hq // Hkv} D {D}: out {c0}:{c1}")
        same(ls, lse[c0:c1], f"G {Hq // Hkv} D {D}: lse {c0}:{c1}")


def test_packed_and_neighbours_do_not_change_a_query():
    q, k, v, pos, sc, out, lse = _long(S=700, seed=42)
    g = gen(43)
    Hq, Hkv, D = q.shape[1], k.shape[1], q.shape[2]
    # packed after and before other sequences (odd lengths)
    pre, post = 13, 5
    a = [(rnd(g, n, Hq, D), rnd(g, n, Hkv, D), rnd(g, n, Hkv, D)) for n in (pre, post)]
    qq, kk, vv = (torch.cat([a[0][j], x, a[1][j]]) for j, x in enumerate((q, k, v)))
    pp = torch.cat([positions([pre]), pos, positions([post])])
    o, ls = attn(qq, kk, vv, [pre, 700, post], [pre, 700, post], pp, sc)
    same(o[pre : pre + 700], out, "packed between two sequences")
    same(ls[pre : pre + 700], lse, "lse packed between two sequences")
    # random subsets of the queries (other CTA neighbours, other block maxima, both launch modes)
    for seed, n in ((1, 1), (2, 3), (3, 40), (4, 333)):
        sel = torch.randperm(700, generator=gen(seed))[:n].sort().values.to(DEV)
        o, ls = attn(q[sel], k, v, [n], [700], pos[sel], sc)
        same(o, out[sel], f"{n} queries among 700")
        same(ls, lse[sel], f"lse, {n} queries among 700")
    # continuous batching: three sequences' decode steps in one call
    o, ls = attn(
        torch.cat([q[699:700], a[0][0][12:13], q[300:301]]),
        torch.cat([k, a[0][1], k[:301]]),
        torch.cat([v, a[0][2], v[:301]]),
        [1, 1, 1],
        [700, pre, 301],
        torch.tensor([699, 12, 300], device=DEV),
        sc,
    )
    same(o[0:1], out[699:700], "batched decode, sequence 0")
    same(o[2:3], out[300:301], "batched decode, sequence 2")


def test_a_self_planned_pack_equals_the_same_pack_planned_by_the_plan_kernel():
    """Short chunk-mode calls (B <= 32, Tk <= 256: the fixture pack) plan inside their CTAs; the same sequences
    followed by a decode lane over 300 keys (Tk > 256: chunk mode planned by the plan kernel, the merge kernel
    launched) give the same bits for their rows, and 32 decode lanes (self-planned) equal the same lanes among 33
    (past the self-plan rule)."""
    Hq, Hkv, D, lens = 32, 8, 128, [11, 16, 13, 19]
    g = gen(47)
    T = sum(lens)
    q, k, v = rnd(g, T, Hq, D), rnd(g, T, Hkv, D), rnd(g, T, Hkv, D)
    pos, sc = positions(lens), D**-0.5
    out, lse = attn(q, k, v, lens, lens, pos, sc)  # self-planned
    qd, kd, vd = rnd(g, 1, Hq, D), rnd(g, 300, Hkv, D), rnd(g, 300, Hkv, D)
    qq, kk, vv = torch.cat([q, qd]), torch.cat([k, kd]), torch.cat([v, vd])
    pp = torch.cat([pos, torch.tensor([299], device=DEV)])
    o, ls = attn(qq, kk, vv, lens + [1], lens + [300], pp, sc)  # the plan kernel (and the merge)
    same(o[:T], out, "self-planned pack vs planned")
    same(ls[:T], lse, "lse, self-planned pack vs planned")
    # 32 decode lanes (self-planned) vs the same 32 among 33 (planned)
    kd, vd = rnd(g, 33 * 8, Hkv, D), rnd(g, 33 * 8, Hkv, D)  # Tk 256 for 32 lanes: the rule's edge
    qd = rnd(g, 33, Hq, D)
    pd = torch.full((33,), 7, device=DEV)
    o32, l32 = attn(qd[:32], kd[: 32 * 8], vd[: 32 * 8], [1] * 32, [8] * 32, pd[:32], sc)
    o33, l33 = attn(qd, kd, vd, [1] * 33, [8] * 33, pd, sc)
    same(o32, o33[:32], "32 decode lanes self-planned vs among 33")
    same(l32, l33[:32], "lse, 32 decode lanes self-planned vs among 33")


def test_unaligned_inputs_are_copied_to_the_same_bits():
    q, k, v, pos, sc, out, lse = _long(S=300, seed=44)

    def off(t):
        buf = torch.empty(t.numel() + 1, dtype=BF, device=DEV)
        view = buf[1:].view(t.shape)
        view.copy_(t)
        assert view.is_contiguous() and view.data_ptr() % 16 != 0
        return view

    o, ls = attn(off(q), off(k), off(v), [300], [300], pos, sc)
    same(o, out, "unaligned q/k/v")
    same(ls, lse, "lse, unaligned q/k/v")


def test_a_captured_forward_replans_each_replay_and_guards_itself():
    q, k, v, pos, sc, out, lse = _long(S=400, seed=45)
    cq, ck, pq = cu([1]), cu([400]), torch.tensor([399], device=DEV)
    qs = q[399:400].clone()
    attn(qs, k, v, [1], [400], pq, sc)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, ls = K().attention(qs, k, v, cq, ck, pq, sc)
    graph.replay()
    torch.cuda.synchronize()
    same(o, out[399:400], "captured decode step")
    same(ls, lse[399:400], "lse, captured decode step")
    # new content, same shapes: the device plan follows it
    qs.copy_(q[150:151])
    ck.copy_(cu([151]))  # keys 0..150 of the same buffer: the tail of k is past cu_seqlens_k's end
    pq.fill_(150)
    graph.replay()
    torch.cuda.synchronize()
    # cu_seqlens_k[-1] != Tk: the device plan refuses (NaN rows), nothing is computed from inconsistent offsets
    assert torch.isnan(o.float()).all() and torch.isnan(ls).all()
    ck.copy_(cu([400]))
    graph.replay()
    torch.cuda.synchronize()
    same(o, out[150:151], "captured step replayed at another position")
    pq.fill_(400)  # past the keys: a NaN row, no out-of-bounds read
    graph.replay()
    torch.cuda.synchronize()
    assert torch.isnan(o.float()).all() and torch.isnan(ls).all()


def test_head_dims_outside_the_tiles_fail_closed():
    g = gen(46)
    for D in (12, 136):
        q, kv = rnd(g, 4, 2, D), rnd(g, 4, 1, D)
        with pytest.raises(RuntimeError, match="head_dim must be a multiple of 8 in"):
            attn(q, kv, kv, [4], [4], positions([4]), 0.1)


# ---- backward -----------------------------------------------------------------------------------------------------
def _bwd(dout, q, k, v, out, lse, lens_q, lens_k, pos, sc):
    return K().attention_bwd(dout, q, k, v, out, lse, cu(lens_q), cu(lens_k), pos, sc)


def _bwd_case(seed, D, Hq, Hkv, lengths):
    """Packed sequences of ``lengths`` (queries = keys, positions 0..n-1): q, k, v, positions, scale, the forward's
    out and lse, an FP32 dO."""
    g = gen(seed)
    T = sum(lengths)
    q, k, v = rnd(g, T, Hq, D), rnd(g, T, Hkv, D), rnd(g, T, Hkv, D)
    pos, sc = positions(lengths), D**-0.5
    out, lse = attn(q, k, v, lengths, lengths, pos, sc)
    return q, k, v, pos, sc, out, lse, rnd(g, T, Hq, D, dtype=F32)


@pytest.mark.parametrize("D,Hq,Hkv,lengths", [(128, 8, 2, [300]), (64, 4, 2, [37, 100]), (32, 4, 4, [70])])
def test_backward_matches_fp64_autograd(D, Hq, Hkv, lengths):
    q, k, v, pos, sc, out, lse, dout = _bwd_case(50 + D, D, Hq, Hkv, lengths)
    grads = _bwd(dout, q, k, v, out, lse, lengths, lengths, pos, sc)
    ref, leaves = ref_fwd(q, k, v, lengths, lengths, pos, sc, grad=True)
    ref.backward(dout.double())
    for name, a, leaf in zip(("dq", "dk", "dv"), grads, leaves):
        assert a.dtype == F32 and torch.isfinite(a).all(), name
        err = a.double() - leaf.grad
        rel = float(err.norm() / leaf.grad.norm())
        assert rel < 1e-2 and float(err.abs().max()) < 5e-2, (name, rel, float(err.abs().max()))


def test_backward_is_bitwise_invariant():
    D, Hq, Hkv, S = 128, 8, 2, 300
    g = gen(60)
    q, k, v = rnd(g, S, Hq, D), rnd(g, S, Hkv, D), rnd(g, S, Hkv, D)
    pos, sc = positions([S]), D**-0.5
    dout = rnd(g, S, Hq, D, dtype=F32)
    out, lse = attn(q, k, v, [S], [S], pos, sc)
    dq, dk, dv = _bwd(dout, q, k, v, out, lse, [S], [S], pos, sc)
    # packed behind a 5-token sequence
    a = (rnd(g, 5, Hq, D), rnd(g, 5, Hkv, D), rnd(g, 5, Hkv, D))
    qq, kk, vv = (torch.cat([x, y]) for x, y in zip(a, (q, k, v)))
    pp, dd = torch.cat([positions([5]), pos]), torch.cat([rnd(g, 5, Hq, D, dtype=F32), dout])
    o, ls = attn(qq, kk, vv, [5, S], [5, S], pp, sc)
    pq, pk, pv = _bwd(dd, qq, kk, vv, o, ls, [5, S], [5, S], pp, sc)
    same(pq[5:], dq, "dq packed")
    same(pk[5:], dk, "dk packed")
    same(pv[5:], dv, "dv packed")
    # pad rows inside the sequence (garbage queries and keys after its end, dO = 0 there)
    P = 11
    qq, kk, vv = (
        torch.cat([y, x]) for x, y in zip((rnd(g, P, Hq, D), rnd(g, P, Hkv, D), rnd(g, P, Hkv, D)), (q, k, v))
    )
    pp, dd = positions([S + P]), torch.cat([dout, torch.zeros(P, Hq, D, device=DEV)])
    o, ls = attn(qq, kk, vv, [S + P], [S + P], pp, sc)
    pq, pk, pv = _bwd(dd, qq, kk, vv, o, ls, [S + P], [S + P], pp, sc)
    same(pq[:S], dq, "dq with pad rows")
    same(pk[:S], dk, "dk with pad rows")
    same(pv[:S], dv, "dv with pad rows")
    # a decode step's backward == the prefill's backward with dO on that row only
    for t in (0, 37, 63, 64, 255, 256, 299):
        d1 = torch.zeros_like(dout)
        d1[t] = dout[t]
        fq, fk, fv = _bwd(d1, q, k, v, out, lse, [S], [S], pos, sc)
        o2, l2 = attn(q[t : t + 1], k[: t + 1], v[: t + 1], [1], [t + 1], pos[t : t + 1], sc)
        sq, sk, sv = _bwd(
            dout[t : t + 1], q[t : t + 1], k[: t + 1], v[: t + 1], o2, l2, [1], [t + 1], pos[t : t + 1], sc
        )
        same(sq, fq[t : t + 1], f"dq, decode step {t}")
        same(sk, fk[: t + 1], f"dk, decode step {t}")
        same(sv, fv[: t + 1], f"dv, decode step {t}")
        assert bool((fk[t + 1 :] == 0).all()) and not bool(torch.signbit(fk[t + 1 :]).any())
    # an FP32 dO is rounded to BF16 (nearest even) once: the same bits as the BF16 dO
    bq, bk, bv = _bwd(dout.to(BF), q, k, v, out, lse, [S], [S], pos, sc)
    same(bq, dq, "dq, BF16 dO")
    same(bk, dk, "dk, BF16 dO")
    same(bv, dv, "dv, BF16 dO")


def test_a_captured_backward_replays_to_the_eager_bits_and_guards_itself():
    """The backward's plans are built on the device (no host sync), so it can be captured: a replay gives the eager
    call's bits, follows new q_pos / cu_seqlens content, and turns what an eager call refuses (a repeated position, a
    position past the keys, inconsistent cu_seqlens) into NaN in every element of dq, dk and dv."""
    lens = [37, 300]
    q, k, v, pos, sc, out, lse, dout = _bwd_case(62, 128, 8, 2, lens)
    want = _bwd(dout, q, k, v, out, lse, lens, lens, pos, sc)
    cq, ck, pq = cu(lens), cu(lens), pos.clone()
    K().attention_bwd(dout, q, k, v, out, lse, cq, ck, pq, sc)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grads = K().attention_bwd(dout, q, k, v, out, lse, cq, ck, pq, sc)

    def replay_same(what):
        graph.replay()
        torch.cuda.synchronize()
        for name, a, b in zip(("dq", "dk", "dv"), grads, want):
            same(a, b, f"{what}: {name}")

    def replay_all_nan(what):
        graph.replay()
        torch.cuda.synchronize()
        for name, a in zip(("dq", "dk", "dv"), grads):
            assert bool(torch.isnan(a).all()), f"{what}: {name} has {int((~torch.isnan(a)).sum())} non-NaN elements"

    replay_same("captured backward")
    pq[40] = 2  # rows 39 and 40 (sequence 1) both at position 2
    replay_all_nan("repeated position")
    pq.copy_(pos)
    pq[50] = 300  # past sequence 1's keys
    replay_all_nan("position past the keys")
    pq.copy_(pos)
    ck[-1] += 1  # cu_seqlens_k[-1] != Tk
    replay_all_nan("inconsistent cu_seqlens_k")
    ck.copy_(cu(lens))
    replay_same("captured backward, valid again after refused input")


def test_backward_refuses_two_queries_at_one_position():
    g = gen(61)
    q, kv = rnd(g, 3, 2, 32), rnd(g, 3, 1, 32)
    pos = torch.tensor([0, 1, 1], device=DEV)
    out, lse = attn(q, kv, kv, [3], [3], pos, 0.2)
    with pytest.raises(RuntimeError, match="two queries at position 1"):
        _bwd(torch.ones(3, 2, 32, device=DEV), q, kv, kv, out, lse, [3], [3], pos, 0.2)
