"""Attention through ws1_ops: a sequence's outputs and gradients are bitwise the same alone,
packed with others, in chunked prefill and in token-by-token decode; accurate vs FP32."""

import pytest
import torch
import torch.nn.functional as F

import ws1_ops
from ws1_contract import bitwise, within_tolerance
from ws1_ops import reference

HQ, HKV, D = 32, 8, 128
BF = torch.bfloat16


def _seqs(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(L, h, D, generator=g).to(BF) for h in (HQ, HKV, HKV)) for L in lengths]


def _cu(lengths):
    return ws1_ops.cu_seqlens_from_lengths(torch.tensor(lengths))


def _prefill(seqs):
    q = torch.cat([s[0] for s in seqs])
    k = torch.cat([s[1] for s in seqs])
    v = torch.cat([s[2] for s in seqs])
    lengths = [s[0].shape[0] for s in seqs]
    pos = torch.cat([torch.arange(L) for L in lengths])
    return ws1_ops.attention(q, k, v, _cu(lengths), _cu(lengths), pos)


def test_alone_vs_packed_vs_permuted(cpu):
    seqs = _seqs([11, 16, 13, 19])
    packed = _prefill(seqs)
    offs = [0, 11, 27, 40, 59]
    for b, s in enumerate(seqs):
        alone = _prefill([s])
        r = bitwise(packed[offs[b] : offs[b + 1]], alone, f"seq{b} packed vs alone")
        assert r.passed, r.detail
    perm = _prefill([seqs[i] for i in (2, 0, 3, 1)])
    r = bitwise(perm[:13], packed[27:40], "s2 first in a permuted batch")
    assert r.passed, r.detail


@pytest.mark.parametrize("L", [8, 19, 32, 40])
def test_prefill_vs_chunked_vs_decode(L, cpu):
    ((q, k, v),) = _seqs([L], seed=L)
    full = _prefill([(q, k, v)])
    # chunked prefill: chunks of 7 queries at absolute positions, keys 0..end of chunk from the "cache"
    for c0 in range(0, L, 7):
        c1 = min(L, c0 + 7)
        out = ws1_ops.attention(
            q[c0:c1], k[:c1], v[:c1], torch.tensor([0, c1 - c0]), torch.tensor([0, c1]), torch.arange(c0, c1)
        )
        r = bitwise(out, full[c0:c1], f"L{L} chunk {c0}:{c1}")
        assert r.passed, r.detail
    # decode: one query at t against keys 0..t
    for t in range(L):
        out = ws1_ops.attention(
            q[t : t + 1], k[: t + 1], v[: t + 1], torch.tensor([0, 1]), torch.tensor([0, t + 1]), torch.tensor([t])
        )
        r = bitwise(out, full[t : t + 1], f"L{L} decode t={t}")
        assert r.passed, r.detail


def test_batched_decode_with_changing_composition(cpu):
    """Requests join and finish: a request's decode output never depends on its batch mates."""
    seqs = _seqs([11, 16, 13, 19], seed=5)
    fulls = [_prefill([s]) for s in seqs]
    for step_members, t in (([0, 1, 2, 3], 10), ([1, 3], 12), ([3], 15), ([2, 1, 3], 12)):
        qs = torch.cat([seqs[i][0][t : t + 1] for i in step_members])
        ks = torch.cat([seqs[i][1][: t + 1] for i in step_members])
        vs = torch.cat([seqs[i][2][: t + 1] for i in step_members])
        out = ws1_ops.attention(
            qs,
            ks,
            vs,
            torch.arange(len(step_members) + 1),
            _cu([t + 1] * len(step_members)),
            torch.full((len(step_members),), t),
        )
        for j, i in enumerate(step_members):
            assert bitwise(out[j : j + 1], fulls[i][t : t + 1], f"req{i} t{t}").passed


def test_gradients_alone_vs_packed(cpu):
    seqs = _seqs([11, 16, 13, 19], seed=9)
    g = torch.Generator().manual_seed(1)
    douts = [torch.randn(s[0].shape, generator=g).to(BF) for s in seqs]

    def grads(sel):
        leaves = [[t.clone().requires_grad_() for t in seqs[i]] for i in sel]
        out = _prefill([tuple(x) for x in leaves])
        out.backward(torch.cat([douts[i] for i in sel]))
        return [[t.grad for t in x] for x in leaves]

    packed = grads([0, 1, 2, 3])
    permuted = grads([2, 0, 3, 1])
    for b in range(4):
        alone = grads([b])[0]
        for name, a, p in zip("qkv", alone, packed[b]):
            r = bitwise(p, a, f"d{name} seq{b}")
            assert r.passed, r.detail
    for j, b in enumerate([2, 0, 3, 1]):
        for a, p in zip(permuted[j], packed[b]):
            assert bitwise(a, p).passed


def test_accuracy_forward_and_gradient(cpu, contract):
    seqs = _seqs([11, 16, 13, 19], seed=3)
    q, k, v = (torch.cat([s[i] for s in seqs]) for i in range(3))
    cu = _cu([11, 16, 13, 19])
    pos = torch.cat([torch.arange(L) for L in (11, 16, 13, 19)])
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = ws1_ops.attention(*leaves, cu, cu, pos)
    refs = [t.float().requires_grad_() for t in (q, k, v)]
    ref = reference.attention(*refs, cu, cu, pos)
    th = contract.resolve("forward_accuracy", "attention", "bfloat16")
    r = within_tolerance(out, ref, th.atol, th.rtol, "attention")
    assert r.passed, r.detail
    do = torch.randn(out.shape).to(BF)
    out.backward(do)
    ref.backward(do.float())
    tg = contract.resolve("gradient_accuracy", "attention", "bfloat16")
    for name, a, b in zip("qkv", leaves, refs):
        r = within_tolerance(a.grad, b.grad, tg.atol, tg.rtol, f"d{name}")
        assert r.passed, r.detail


def test_negative_control_sdpa_decode_differs_from_prefill():
    """torch's SDPA (FP32) reduces keys in an order that follows the sequence length: decoding
    the last token against the cache differs from the same row of the prefill. The bitwise check
    must say so."""
    g = torch.Generator().manual_seed(0)
    L = 40
    q, k, v = (torch.randn(1, HQ, L, D, generator=g) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    diffs = 0
    for t in range(L):
        dec = F.scaled_dot_product_attention(q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1])
        diffs += not bitwise(dec, full[:, :, t : t + 1]).passed
    assert diffs > 0, "SDPA decode matched prefill bitwise everywhere: the check could not fail here"


def test_bad_attention_inputs(cpu):
    q = torch.zeros(4, HQ, D, dtype=BF)
    k = torch.zeros(4, HKV, D, dtype=BF)
    cu = torch.tensor([0, 4])
    with pytest.raises(ws1_ops.OpInputError, match="Hq .* must be a multiple of Hkv"):
        ws1_ops.attention(q, torch.zeros(4, 5, D, dtype=BF), torch.zeros(4, 5, D, dtype=BF), cu, cu, torch.arange(4))
    with pytest.raises(ws1_ops.OpInputError, match="cu_seqlens end"):
        ws1_ops.attention(q, k, k, torch.tensor([0, 3]), cu, torch.arange(4))
    with pytest.raises(ws1_ops.OpInputError, match="q_pos must be"):
        ws1_ops.attention(q, k, k, cu, cu, torch.arange(3))
