"""Attention on Triton in the interpreter: a sequence's outputs and gradients are bitwise the same
alone, packed, permuted, in chunked prefill (chunks of 7 absolute positions), and in token-by-token
decode — across the 64-key tile edge — and accurate against the FP32 reference. Plus a negative
control: key tiles aligned to the chunk instead of key 0 are caught."""

import pytest
import torch

import ws1_ops
from ws1_contract import bitwise, load_contract, within_tolerance
from ws1_ops import reference

HQ, HKV, D = 4, 2, 64
BF = torch.bfloat16
LENGTHS = [11, 16, 13, 70]  # 70 crosses the 64-key / 64-query tile edge


def _seqs(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(L, h, D, generator=g).to(BF) for h in (HQ, HKV, HKV)) for L in lengths]


def _cu(lengths):
    return ws1_ops.cu_seqlens_from_lengths(torch.tensor(lengths))


def _prefill(seqs, chunk=None):
    q, k, v = (torch.cat([s[i] for s in seqs]) for i in range(3))
    lengths = [s[0].shape[0] for s in seqs]
    pos = torch.cat([torch.arange(L) for L in lengths])
    return ws1_ops.attention(q, k, v, _cu(lengths), _cu(lengths), pos, chunk=chunk)


def _same(a, b, what):
    r = bitwise(a, b, what)
    assert r.passed, r.detail


def test_alone_vs_packed_vs_permuted(tri):
    seqs = _seqs(LENGTHS)
    packed = _prefill(seqs)
    offs = [0, 11, 27, 40, 110]
    for b, s in enumerate(seqs):
        _same(packed[offs[b] : offs[b + 1]], _prefill([s]), f"seq{b} packed vs alone")
    perm = _prefill([seqs[i] for i in (2, 0, 3, 1)])
    _same(perm[:13], packed[27:40], "s2 first in a permuted batch")
    _same(perm[24:94], packed[40:110], "s3 after s2, s0")


def test_prefill_vs_chunked_vs_decode(tri):
    L = 70
    ((q, k, v),) = _seqs([L], seed=L)
    full = _prefill([(q, k, v)])
    for c0 in range(0, L, 7):
        c1 = min(L, c0 + 7)
        out = ws1_ops.attention(
            q[c0:c1], k[:c1], v[:c1], torch.tensor([0, c1 - c0]), torch.tensor([0, c1]), torch.arange(c0, c1)
        )
        _same(out, full[c0:c1], f"chunk {c0}:{c1}")
    for t in list(range(0, 8)) + list(range(60, L)):
        out = ws1_ops.attention(
            q[t : t + 1], k[: t + 1], v[: t + 1], torch.tensor([0, 1]), torch.tensor([0, t + 1]), torch.tensor([t])
        )
        _same(out, full[t : t + 1], f"decode t={t}")


def test_batched_decode_with_changing_composition(tri):
    seqs = _seqs(LENGTHS, seed=5)
    fulls = [_prefill([s]) for s in seqs]
    for members, t in (([0, 1, 2, 3], 10), ([1, 3], 12), ([3], 66), ([2, 1, 3], 12)):
        qs = torch.cat([seqs[i][0][t : t + 1] for i in members])
        ks = torch.cat([seqs[i][1][: t + 1] for i in members])
        vs = torch.cat([seqs[i][2][: t + 1] for i in members])
        out = ws1_ops.attention(
            qs, ks, vs, torch.arange(len(members) + 1), _cu([t + 1] * len(members)), torch.full((len(members),), t)
        )
        for j, i in enumerate(members):
            _same(out[j : j + 1], fulls[i][t : t + 1], f"req{i} t{t}")


def test_gradients_alone_vs_packed_vs_permuted(tri):
    seqs = _seqs(LENGTHS, seed=9)
    g = torch.Generator().manual_seed(1)
    douts = [torch.randn(s[0].shape, generator=g).to(BF) for s in seqs]

    def grads(sel):
        leaves = [[t.clone().requires_grad_() for t in seqs[i]] for i in sel]
        _prefill([tuple(x) for x in leaves]).backward(torch.cat([douts[i] for i in sel]))
        return [[t.grad for t in x] for x in leaves]

    packed = grads([0, 1, 2, 3])
    for b in range(4):
        for name, a, p in zip("qkv", grads([b])[0], packed[b]):
            _same(p, a, f"d{name} seq{b} packed vs alone")
    permuted = grads([2, 0, 3, 1])
    for j, b in enumerate([2, 0, 3, 1]):
        for name, a, p in zip("qkv", permuted[j], packed[b]):
            _same(a, p, f"d{name} seq{b} permuted vs packed")


def test_chunked_forward_has_the_canonical_backward(tri):
    """attention(chunk=7): the chunked forward's outputs and its backward equal the full prefill's."""
    seqs = _seqs([19, 70], seed=4)
    do = torch.randn(89, HQ, D, generator=torch.Generator().manual_seed(2)).to(BF)
    res = []
    for chunk in (None, 7):
        leaves = [[t.clone().requires_grad_() for t in s] for s in seqs]
        out = _prefill([tuple(x) for x in leaves], chunk=chunk)
        out.backward(do)
        res.append([out.detach()] + [t.grad for x in leaves for t in x])
    for i, (a, b) in enumerate(zip(*res)):
        _same(b, a, f"chunked vs full, tensor {i}")


def test_accuracy_forward_and_gradient(tri, contract):
    seqs = _seqs(LENGTHS, seed=3)
    q, k, v = (torch.cat([s[i] for s in seqs]) for i in range(3))
    cu = _cu(LENGTHS)
    pos = torch.cat([torch.arange(L) for L in LENGTHS])
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = ws1_ops.attention(*leaves, cu, cu, pos)
    refs = [t.float().requires_grad_() for t in (q, k, v)]
    ref = reference.attention(*refs, cu, cu, pos)
    th = contract.resolve("forward_accuracy", "attention", "bfloat16")
    r = within_tolerance(out, ref, th.atol, th.rtol, "attention")
    assert r.passed, r.detail
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(8)).to(BF)
    out.backward(do)
    ref.backward(do.float())
    tg = contract.resolve("gradient_accuracy", "attention", "bfloat16")
    for name, a, b in zip("qkv", leaves, refs):
        r = within_tolerance(a.grad, b.grad, tg.atol, tg.rtol, f"d{name}")
        assert r.passed, r.detail


def test_gqa_with_qwen3_head_shape(tri, contract):
    """Hq 32, Hkv 8, D 128 (the 8B layout) on a short sequence: accuracy, decode == prefill."""
    g = torch.Generator().manual_seed(11)
    L = 9
    q, k, v = (torch.randn(L, h, 128, generator=g).to(BF) for h in (32, 8, 8))
    cu, pos = torch.tensor([0, L]), torch.arange(L)
    out = ws1_ops.attention(q, k, v, cu, cu, pos)
    th = contract.resolve("forward_accuracy", "attention", "bfloat16")
    assert within_tolerance(out, reference.attention(q, k, v, cu, cu, pos), th.atol, th.rtol, "attention").passed
    last = ws1_ops.attention(q[L - 1 :], k, v, torch.tensor([0, 1]), cu, torch.tensor([L - 1]))
    _same(last, out[L - 1 :], "decode of the last token")


def _attention_with(q, k, v, cu_q, cu_k, pos, bn=None, kv_chunk=None):
    """The real forward kernels launched as the launcher does, but with key tile ``bn`` and/or
    split-KV chunk ``kv_chunk`` of the test's choosing (the launcher always uses BN 64, KV_CHUNK 2048)."""
    from tdev import to_cpu, to_dev

    from ws1_ops.triton import attention as ta

    q, k, v, cu_q, cu_k, pos = to_dev((q, k, v, cu_q, cu_k, pos))
    saved = ta.BN, ta.KV_CHUNK
    ta.BN, ta.KV_CHUNK = bn or ta.BN, kv_chunk or ta.KV_CHUNK
    try:
        out, _ = ta.attention(q, k, v, cu_q, cu_k, pos, D**-0.5)
    finally:
        ta.BN, ta.KV_CHUNK = saved
    return to_cpu(out)


@pytest.mark.parametrize("decode_bn, expect_diffs", [(64, False), (16, True)])
def test_negative_control_key_tile_chosen_by_query_count_is_caught(decode_bn, expect_diffs, tri):
    """A decode path with its own key tile (16 instead of 64, as a flash-decoding path chosen by
    the query count would) reduces the keys in another order: decode no longer matches prefill
    bitwise, and the check says so. With the fixed tile the same probe matches everywhere."""
    L = 70
    ((q, k, v),) = _seqs([L], seed=12)
    full = _prefill([(q, k, v)])
    diffs = []
    for t in (5, 20, 33, 47, 63, 64, 69):
        out = _attention_with(
            q[t : t + 1],
            k[: t + 1],
            v[: t + 1],
            torch.tensor([0, 1]),
            torch.tensor([0, t + 1]),
            torch.tensor([t]),
            bn=decode_bn,
        )
        if not bitwise(out, full[t : t + 1]).passed:
            diffs.append(t)
    assert bool(diffs) == expect_diffs, diffs


def test_split_kv_chunks_decode_equals_prefill(tri, monkeypatch):
    """Split-KV with several chunks (KV_CHUNK 128 here, so a 300-token sequence has 3): prefill (a
    block's chunks merged by the merge kernel), chunked prefill in both layouts and token-by-token
    decode (one program per chunk, then the merge) give every query the same bits, across the
    chunk and tile edges; and the result stays accurate."""
    from ws1_ops.triton import attention as ta

    monkeypatch.setattr(ta, "KV_CHUNK", 128)
    L = 300
    ((q, k, v),) = _seqs([L], seed=21)
    full = _prefill([(q, k, v)])
    for c0, c1 in ((120, 140), (100, 230), (250, 300)):  # a decode-layout chunk, prefill-layout chunks
        out = ws1_ops.attention(
            q[c0:c1], k[:c1], v[:c1], torch.tensor([0, c1 - c0]), torch.tensor([0, c1]), torch.arange(c0, c1)
        )
        _same(out, full[c0:c1], f"chunk {c0}:{c1}")
    for t in (0, 63, 64, 127, 128, 129, 255, 256, 299):
        out = ws1_ops.attention(
            q[t : t + 1], k[: t + 1], v[: t + 1], torch.tensor([0, 1]), torch.tensor([0, t + 1]), torch.tensor([t])
        )
        _same(out, full[t : t + 1], f"decode t={t}")
    cu, pos = torch.tensor([0, L]), torch.arange(L)
    th = load_contract().resolve("forward_accuracy", "attention", "bfloat16")
    r = within_tolerance(full, reference.attention(q, k, v, cu, cu, pos), th.atol, th.rtol, "attention")
    assert r.passed, r.detail


def test_split_kv_at_the_real_chunk_edge(tri):
    """KV_CHUNK 2048 itself (small heads): queries around key 2048 in a prefill-layout chunk
    (70 queries: two chunks merged) equal their decode steps (split over two chunks)."""
    g = torch.Generator().manual_seed(31)
    L, c0 = 2100, 2030
    q, k, v = (torch.randn(L, h, 16, generator=g).to(BF) for h in (2, 1, 1))
    chunk = ws1_ops.attention(q[c0:], k, v, torch.tensor([0, L - c0]), torch.tensor([0, L]), torch.arange(c0, L))
    for t in (2030, 2047, 2048, 2099):
        out = ws1_ops.attention(
            q[t : t + 1], k[: t + 1], v[: t + 1], torch.tensor([0, 1]), torch.tensor([0, t + 1]), torch.tensor([t])
        )
        _same(out, chunk[t - c0 : t - c0 + 1], f"decode t={t}")


def test_negative_control_decode_chunk_differs_from_prefill(tri):
    """Decode split over chunks of 64 keys while the prefill used 128: a query's keys are merged at
    other points, decode no longer equals prefill past the first chunk, and the check says so.
    (With the same chunk on both sides the probe matches: test_split_kv_chunks_decode_equals_prefill.)"""
    L = 200
    ((q, k, v),) = _seqs([L], seed=22)
    full = _attention_with(q, k, v, torch.tensor([0, L]), torch.tensor([0, L]), torch.arange(L), kv_chunk=128)
    diffs = []
    for t in (10, 63, 100, 150, 199):
        out = _attention_with(
            q[t : t + 1],
            k[: t + 1],
            v[: t + 1],
            torch.tensor([0, 1]),
            torch.tensor([0, t + 1]),
            torch.tensor([t]),
            kv_chunk=64,
        )
        if not bitwise(out, full[t : t + 1]).passed:
            diffs.append(t)
    assert diffs and set(diffs) <= {100, 150, 199} and 10 not in diffs and 63 not in diffs, diffs


def test_null_update_with_tiny_values(tri):
    """The masked tiles' null update (module docstring of ws1_ops.triton.attention): a query whose
    last key tile is 0 shares a prefill block with queries that need tiles 1 and 2, so its state
    goes through two MMAs of all-zero P; alone (decode) it does not. V holds denormal and zero
    columns and signed zeros, where a flush or a sign change of the accumulator would show."""
    g = torch.Generator().manual_seed(41)
    L = 150
    q, k, v = (torch.randn(L, h, D, generator=g).to(BF) for h in (HQ, HKV, HKV))
    v[:, :, 0] = 1e-39  # denormal (BF16 keeps FP32's exponent range)
    v[:, :, 1] = 0.0
    v[:, :, 2] = -0.0
    v[:, :, 3] = torch.where(torch.arange(L)[:, None] % 2 == 0, 3e-39, -3e-39).to(BF)
    full = _prefill([(q, k, v)])
    for t in (0, 1, 5, 31, 62, 63):
        out = ws1_ops.attention(
            q[t : t + 1], k[: t + 1], v[: t + 1], torch.tensor([0, 1]), torch.tensor([0, t + 1]), torch.tensor([t])
        )
        _same(out, full[t : t + 1], f"decode t={t}")
