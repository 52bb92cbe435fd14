"""B1 and B2 bookkeeping: what is stored is what was written, cursors, allocation, prefix reuse,
and errors that leave the cache as it was."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ws1_kv import CacheFull, ContiguousKVCache, KVCacheError, PagedKVCache, SequenceFinished, UnknownSequence

BF16 = torch.bfloat16
HKV, D = 2, 8


def kv(n, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, HKV, D, generator=g).to(BF16), torch.randn(n, HKV, D, generator=g).to(BF16))


def caches(layers=2):
    return [
        ContiguousKVCache(layers, HKV, D, max_seqs=3, max_len=24),
        PagedKVCache(layers, HKV, D, num_blocks=18, block_size=4, max_len=24),
    ]


def append(cache, sid, k, v, tokens=None):
    step = cache.reserve({sid: k.shape[0]})
    for layer in range(cache.n_layers):
        cache.write(layer, step, k, v)
    cache.commit(step, {sid: tokens} if tokens is not None else None)
    return step


@pytest.mark.parametrize("cache", caches(), ids=lambda c: c.kind)
def test_write_read_roundtrip_bits_and_cursor(cache):
    k, v = kv(11, 0)
    cache.begin("a")
    append(cache, "a", k[:7], v[:7])
    assert cache.length("a") == 7
    append(cache, "a", k[7:], v[7:])
    assert cache.length("a") == 11
    for layer in range(2):
        rk, rv = cache.read(layer, "a")
        assert torch.equal(rk.view(torch.int16), k.view(torch.int16))
        assert torch.equal(rv.view(torch.int16), v.view(torch.int16))


@pytest.mark.parametrize("cache", caches(), ids=lambda c: c.kind)
def test_gather_is_positions_zero_to_end_per_sequence(cache):
    ka, va = kv(9, 1)
    kb, vb = kv(5, 2)
    cache.begin("a")
    cache.begin("b")
    append(cache, "a", ka[:6], va[:6])
    append(cache, "b", kb[:2], vb[:2])
    step = cache.reserve({"a": 3, "b": 3})
    assert step.q_pos.tolist() == [6, 7, 8, 2, 3, 4]
    assert step.cu_seqlens_k.tolist() == [0, 9, 14]
    cache.write(0, step, torch.cat([ka[6:], kb[2:]]), torch.cat([va[6:], vb[2:]]))
    K, V = cache.gather(0, step)
    assert torch.equal(K, torch.cat([ka, kb])) and torch.equal(V, torch.cat([va, vb]))


@pytest.mark.parametrize("cache", caches(), ids=lambda c: c.kind)
def test_errors_name_the_problem_and_change_nothing(cache):
    k, v = kv(4, 3)
    cache.begin("a")
    append(cache, "a", k, v)
    with pytest.raises(UnknownSequence, match="'zz'"):
        cache.reserve({"zz": 1})
    with pytest.raises(CacheFull, match="max_len is 24"):
        cache.reserve({"a": 21})
    with pytest.raises(KVCacheError, match="already exists"):
        cache.begin("a")
    step = cache.reserve({"a": 1})
    with pytest.raises(KVCacheError, match="must be torch.bfloat16"):
        cache.write(0, step, k[:1].float(), v[:1].float())
    with pytest.raises(KVCacheError, match=r"k must be \[1, 2, 8\]"):
        cache.write(0, step, k, v)
    cache.finish("a")
    with pytest.raises(SequenceFinished, match="'a' is finished"):
        cache.reserve({"a": 1})
    assert cache.length("a") == 4
    assert torch.equal(cache.read(0, "a")[0], k)
    cache.free("a")
    with pytest.raises(UnknownSequence):
        cache.length("a")


def test_contiguous_slots_run_out_and_come_back():
    c = ContiguousKVCache(1, HKV, D, max_seqs=2, max_len=8)
    c.begin(1)
    c.begin(2)
    with pytest.raises(CacheFull, match="slot"):
        c.begin(3)
    c.free(1)
    c.begin(3)
    assert c.slot(3) == 0


def test_paged_allocation_is_all_or_nothing():
    c = PagedKVCache(1, HKV, D, num_blocks=3, block_size=4)
    c.begin("a")
    c.begin("b")
    append(c, "a", *kv(4, 0))
    free_before = c.stats()["free_blocks"]
    with pytest.raises(CacheFull, match="needs 3 block"):
        c.reserve({"a": 4, "b": 8})  # a needs 1 more, b needs 2: 3 > 2 free
    assert c.stats()["free_blocks"] == free_before
    assert c.block_table("b") == []
    c.free("a")
    assert c.stats()["free_blocks"] == 3


def test_paged_prefix_reuse_shares_full_blocks_only():
    c = PagedKVCache(1, HKV, D, num_blocks=12, block_size=4)
    prompt = list(range(100, 111))  # 11 tokens: 2 full blocks + 3
    k, v = kv(11, 5)
    assert c.begin("a", prompt) == 0
    append(c, "a", k, v, tokens=prompt)
    assert c.stats()["registered_blocks"] == 2
    # same first 8 tokens: two blocks reused; the caller prefills from position 8
    assert c.begin("b", prompt[:8] + [1, 2, 3]) == 8
    assert c.block_table("b") == c.block_table("a")[:2]
    rk, _ = c.read(0, "b")
    assert torch.equal(rk, k[:8])
    # a different token in block 1: only block 0 matches
    assert c.begin("c", prompt[:5] + [0] * 6) == 4
    # the last prompt token is never served from the cache (its logits are needed)
    assert c.begin("d", prompt[:8]) == 4


def test_paged_freed_blocks_stay_reusable_until_handed_out():
    c = PagedKVCache(1, HKV, D, num_blocks=3, block_size=4)
    prompt = list(range(9))
    c.begin("a", prompt)
    append(c, "a", *kv(8, 6), tokens=prompt[:8])
    c.free("a")  # blocks freed, still registered
    assert c.begin("b", prompt) == 8  # revived from the free list
    c.free("b")
    c.begin("x")
    append(c, "x", *kv(12, 7))  # takes every block: registrations end
    c.free("x")
    assert c.begin("c", prompt) == 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 5)), min_size=1, max_size=12))
def test_paged_and_contiguous_store_the_same_bits(ops):
    """Random interleaved appends to three sequences: both caches read back what was written."""
    cont = ContiguousKVCache(1, HKV, D, max_seqs=3, max_len=64)
    paged = PagedKVCache(1, HKV, D, num_blocks=60, block_size=3)
    ref = {s: ([], []) for s in range(3)}
    for c in (cont, paged):
        for s in range(3):
            c.begin(s)
    for i, (s, n) in enumerate(ops):
        k, v = kv(n, 100 + i)
        ref[s][0].append(k)
        ref[s][1].append(v)
        for c in (cont, paged):
            append(c, s, k, v)
    for s, (ks, vs) in ref.items():
        if not ks:
            continue
        for c in (cont, paged):
            rk, rv = c.read(0, s)
            assert torch.equal(rk.view(torch.int16), torch.cat(ks).view(torch.int16))
            assert torch.equal(rv.view(torch.int16), torch.cat(vs).view(torch.int16))


def test_b1_in_slot_order_reads_its_storage_in_place():
    """B1, sequences in ascending slot order: attention reads the storage rows as one view (no gather), each
    sequence's keys from its slot's row 0; its keys 0..end-1 are the gathered ones. Out of slot order: a gather."""
    c = ContiguousKVCache(1, HKV, D, max_seqs=3, max_len=8)
    ka, va = kv(5, 7)
    kb, vb = kv(3, 8)
    for s in ("a", "b", "c"):
        c.begin(s)
    append(c, "a", ka[:4], va[:4])
    append(c, "c", kb[:2], vb[:2])
    step = c.reserve({"a": 1, "c": 1})
    c.write(0, step, torch.cat([ka[4:], kb[2:]]), torch.cat([va[4:], vb[2:]]))
    K, V, cu = c.keys_for_attention(0, step)
    assert step.view == (0, 16 + 3) and cu.tolist() == [0, 16, 19]
    assert K.data_ptr() == c.storage(0)[0].data_ptr()  # in place
    G, _ = c.gather(0, step)
    for b, (s0, n) in enumerate(zip(cu.tolist()[:-1], step.ends)):
        assert torch.equal(
            K[s0 : s0 + n].view(torch.int16), G[step.cu_seqlens_k[b] : step.cu_seqlens_k[b] + n].view(torch.int16)
        )
    back = c.reserve({"c": 1, "a": 1})
    assert back.view is None and c.keys_for_attention(0, back)[2].tolist() == back.cu_seqlens_k.tolist()


@pytest.mark.parametrize("cache", caches(), ids=lambda c: c.kind)
def test_advance_then_fill_tokens(cache):
    """advance(): cursors move for rows written in place, ids unknown; fill_tokens() supplies them later."""
    cache.begin("a")
    append(cache, "a", *kv(4, 9), tokens=[1, 2, 3, 4])
    cache.advance({"a": 5})
    assert cache.length("a") == 9 and cache.seqs["a"].tokens == [1, 2, 3, 4, -1, -1, -1, -1, -1]
    cache.fill_tokens("a", 4, [5, 6, 7, 8, 9])
    assert cache.seqs["a"].tokens == list(range(1, 10))
    if cache.kind == "paged":
        assert cache.stats()["registered_blocks"] == 2  # both full blocks of 4, the 2nd now known
    with pytest.raises(KVCacheError, match="not all committed"):
        cache.fill_tokens("a", 8, [1, 2])
    with pytest.raises(CacheFull):
        cache.advance({"a": 100})
