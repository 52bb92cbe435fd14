"""attention (+ backward): packed varlen causal GQA. Bitwise: a sequence alone vs packed with others
(any order), prefill vs chunked prefill (chunk 7, keys from the cache) vs token-by-token decode across
tile boundaries, thread count and ISA; backward alone vs packed. Accuracy vs an fp64 reference and
autograd, bad inputs, NaN, and a negative control (torch SDPA prefill vs decode)."""

import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_ops_check import OPS, assert_close, assert_same, compare, setting, settings  # noqa: E402

LENS = [11, 16, 13, 19]


def make_seqs(lens, hq=8, hkv=2, d=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(n, h, d, generator=g).bfloat16() for h in (hq, hkv, hkv)) for n in lens]


def cu(lens):
    return torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.long)


def run_attn(qs, ks, vs, qpos_list, scale):
    """Pack sequences (queries qs[b] at positions qpos_list[b] against keys ks[b]) and run the kernel."""
    q, k, v = torch.cat(qs), torch.cat(ks), torch.cat(vs)
    return OPS.attention(
        q, k, v, cu([x.shape[0] for x in qs]), cu([x.shape[0] for x in ks]), torch.cat(qpos_list), scale
    )


def prefill(seqs, scale):
    return run_attn(
        [s[0] for s in seqs],
        [s[1] for s in seqs],
        [s[2] for s in seqs],
        [torch.arange(s[0].shape[0]) for s in seqs],
        scale,
    )


def split_rows(t, lens):
    return list(t.split(lens))


def ref_attn(q, k, v, qpos, scale):
    """fp64 reference for one sequence: query i attends keys 0..qpos[i]; returns out, lse."""
    hq, hkv = q.shape[1], k.shape[1]
    kk = k.double().repeat_interleave(hq // hkv, 1)
    vv = v.double().repeat_interleave(hq // hkv, 1)
    s = torch.einsum("ihd,jhd->hij", q.double(), kk) * scale
    mask = torch.arange(k.shape[0])[None, :] > qpos[:, None]
    s = s.masked_fill(mask[None], float("-inf"))
    lse = torch.logsumexp(s, -1)
    out = torch.einsum("hij,jhd->ihd", torch.softmax(s, -1), vv)
    return out, lse.t()


def test_alone_vs_packed_any_order_threads_isa():
    seqs = make_seqs(LENS)
    sc = 128**-0.5
    alone = [prefill([s], sc) for s in seqs]
    for isa_name, nt in settings():
        with setting(isa_name, nt):
            for order in ([0, 1, 2, 3], [3, 1, 0, 2]):
                out, lse = prefill([seqs[i] for i in order], sc)
                lens = [LENS[i] for i in order]
                for pos, (o, l) in enumerate(zip(split_rows(out, lens), split_rows(lse, lens))):
                    b = order[pos]
                    assert_same(o, alone[b][0], f"out seq {b} isa={isa_name} threads={nt}")
                    assert_same(l, alone[b][1], f"lse seq {b} isa={isa_name} threads={nt}")


@pytest.mark.parametrize("S", [8, 19, 32, 40, 70])
def test_prefill_vs_chunked_vs_decode(S):
    (q, k, v), (q2, k2, v2) = make_seqs([S, 23], seed=S)
    sc = 0.1
    full_o, full_l = prefill([(q, k, v)], sc)
    # chunked prefill: queries c..c+6 at their positions against keys 0..c+6 read from the cache
    for c in range(0, S, 7):
        e = min(S, c + 7)
        o, l = run_attn([q[c:e]], [k[:e]], [v[:e]], [torch.arange(c, e)], sc)
        assert_same(o, full_o[c:e], f"chunk {c}")
        assert_same(l, full_l[c:e], f"chunk lse {c}")
    # decode: one query at t against keys 0..t, batched with another sequence's decode step
    for t in range(S):
        u = t % 23
        o, l = run_attn(
            [q2[u : u + 1], q[t : t + 1]],
            [k2[: u + 1], k[: t + 1]],
            [v2[: u + 1], v[: t + 1]],
            [torch.tensor([u]), torch.tensor([t])],
            sc,
        )
        assert_same(o[1:], full_o[t : t + 1], f"decode t={t}")
        assert_same(l[1:], full_l[t : t + 1], f"decode lse t={t}")
    # a decode query against a longer cache (keys past its position exist but are never touched)
    o, l = run_attn([q[S // 2 : S // 2 + 1]], [k], [v], [torch.tensor([S // 2])], sc)
    assert_same(o, full_o[S // 2 : S // 2 + 1], "decode with longer cache")


def test_accuracy_gqa_and_tail_dim():
    for hq, hkv, d in ((8, 2, 128), (4, 4, 72), (6, 1, 32)):
        seqs = make_seqs(LENS, hq, hkv, d, seed=d)
        sc = d**-0.5
        out, lse = prefill(seqs, sc)
        assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32 and lse.shape == (sum(LENS), hq)
        for b, (o, l) in enumerate(zip(split_rows(out, LENS), split_rows(lse, LENS))):
            ro, rl = ref_attn(*seqs[b], torch.arange(LENS[b]), sc)
            assert_close(o, ro, 5e-2, 2e-2, f"out hq={hq} hkv={hkv} d={d} seq {b}")
            assert_close(l, rl, 5e-2, 2e-2, f"lse seq {b}")


def grads_packed(seqs, dos, sc):
    q, k, v = (torch.cat([s[i] for s in seqs]) for i in range(3))
    lens = [s[0].shape[0] for s in seqs]
    c = cu(lens)
    pos = torch.cat([torch.arange(n) for n in lens])
    out, lse = OPS.attention(q, k, v, c, c, pos, sc)
    dq, dk, dv = OPS.attention_bwd(torch.cat(dos), q, k, v, out, lse, c, c, pos, sc)
    return [split_rows(t, lens) for t in (dq, dk, dv)]


def test_backward_alone_vs_packed_and_autograd():
    seqs = make_seqs(LENS, 4, 2, 64, seed=5)
    g = torch.Generator().manual_seed(6)
    dos = [torch.randn(n, 4, 64, generator=g).bfloat16() for n in LENS]
    sc = 64**-0.5
    alone = [grads_packed([s], [d], sc) for s, d in zip(seqs, dos)]
    for isa_name, nt in settings():
        with setting(isa_name, nt):
            order = [2, 0, 3, 1]
            packed = grads_packed([seqs[i] for i in order], [dos[i] for i in order], sc)
            for pos, b in enumerate(order):
                for name, t, a in zip(("dq", "dk", "dv"), packed, alone[b]):
                    assert_same(t[pos], a[0], f"{name} seq {b} isa={isa_name} threads={nt}")
    for b, (s, d) in enumerate(zip(seqs, dos)):
        qr, kr, vr = (t.float().requires_grad_() for t in s)
        n = s[0].shape[0]
        o, _ = ref_attn(qr, kr, vr, torch.arange(n), sc)
        o.backward(d.double())
        for name, mine, ref in zip(("dq", "dk", "dv"), alone[b], (qr.grad, kr.grad, vr.grad)):
            assert mine[0].dtype == torch.float32
            assert_close(mine[0], ref, 5e-2, 2e-2, f"{name} seq {b}")


def test_backward_fp32_dout_matches_bf16_upcast():
    seqs = make_seqs([9, 14], 4, 2, 32, seed=8)
    dos = [torch.randn(n, 4, 32).bfloat16() for n in (9, 14)]
    a = grads_packed(seqs, dos, 0.2)
    b = grads_packed(seqs, [d.float() for d in dos], 0.2)
    for x, y in zip(a, b):
        for u, w in zip(x, y):
            assert_same(u, w, "dout bf16 vs fp32 upcast")


def test_bad_inputs():
    ((q, k, v),) = make_seqs([5], 4, 2, 32)
    c = torch.tensor([0, 5])
    pos = torch.arange(5)
    with pytest.raises(RuntimeError, match=r"attention: .*position 5"):
        OPS.attention(q, k, v, c, c, torch.tensor([0, 1, 2, 3, 5]), 1.0)
    with pytest.raises(RuntimeError, match="attention"):
        OPS.attention(q.float(), k, v, c, c, pos, 1.0)
    with pytest.raises(RuntimeError, match="attention"):
        OPS.attention(q.view(5, -1), k, v, c, c, pos, 1.0)
    with pytest.raises(RuntimeError, match="attention"):
        OPS.attention(q[:, :3].contiguous(), k, v, c, c, pos, 1.0)  # Hq % Hkv != 0
    with pytest.raises(RuntimeError, match="attention"):
        OPS.attention(q, k, v[:4], c, c, pos, 1.0)
    with pytest.raises(RuntimeError, match="attention"):
        OPS.attention(q, k, v, torch.tensor([0, 4]), c, pos, 1.0)
    with pytest.raises(RuntimeError, match="attention"):
        OPS.attention(q, k, v, c, c, pos[:4], 1.0)
    out, lse = OPS.attention(q, k, v, c, c, pos, 1.0)
    with pytest.raises(RuntimeError, match="attention_bwd"):
        OPS.attention_bwd(out[:4], q, k, v, out, lse, c, c, pos, 1.0)
    with pytest.raises(RuntimeError, match="attention_bwd"):
        OPS.attention_bwd(out, q, k, v, out, lse[:4], c, c, pos, 1.0)


def test_nan_propagates_causally():
    seqs = make_seqs([12, 7], 4, 2, 32)
    seqs[0][2][5, 1, 3] = float("nan")  # v of key 5, kv head 1, sequence 0
    out, lse = prefill(seqs, 0.2)
    o0 = out[:12]
    # query heads 2,3 use kv head 1; queries at p >= 5 see key 5; v's NaN lands in output dim 3 only
    nan = torch.isnan(o0)
    assert nan[5:, 2:4, 3].all() and int(nan.sum()) == 7 * 2
    assert not torch.isnan(out[12:]).any() and not torch.isnan(lse).any()
    seqs[0][0][4, 0, 0] = float("nan")  # q of query 4, head 0: its scores, hence its whole output and lse
    out, lse = prefill(seqs, 0.2)
    assert torch.isnan(out[4, 0]).all() and torch.isnan(lse[4, 0]) and int(torch.isnan(lse).sum()) == 1


def test_negative_control_sdpa_prefill_vs_decode():
    # torch's SDPA is not decode/prefill invariant: the same check reports "different" for it.
    g = torch.Generator().manual_seed(3)
    S, H, D = 64, 8, 128
    q, k, v = (torch.randn(1, H, S, D, generator=g) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    dec = torch.cat(
        [F.scaled_dot_product_attention(q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1]) for t in range(S)], 2
    )
    torch.testing.assert_close(full, dec)
    assert compare(full, dec) == "different"
