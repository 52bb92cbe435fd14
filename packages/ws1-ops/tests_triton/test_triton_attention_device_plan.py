"""The Triton attention's device-side plan (``plan_on_device``: what a captured decode step runs, inside
``ws1_ops.graph_safe``): the same bits as the host-planned call for decode steps, chunked prefill and packed
prefill across KV chunks; the same work items and workspace slots; NaN rows (never a wrong value or a write
past a buffer) for the inputs no host checked; and no value read back to the host."""

import pytest
import torch
from tdev import MODE, to_cpu, to_dev

import ws1_ops
from ws1_contract import bitwise
from ws1_ops.triton import attention as ta

HQ, HKV, D = 4, 2, 64
BF = torch.bfloat16
CHUNK = 128          # KV_CHUNK for these tests: positions up to 300 cross two chunk edges cheaply


@pytest.fixture
def small_chunk(monkeypatch):
    monkeypatch.setattr(ta, "KV_CHUNK", CHUNK)


def _rand(seed, *shape):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(BF)


def _call(args, device_plan: bool):
    """ta.attention on the test's device -> (out, lse) on the CPU; planned on the device or on the host."""
    q, k, v, cu_q, cu_k, pos = to_dev(args)
    if device_plan:
        with ws1_ops.graph_safe():
            out, lse = ta.attention(q, k, v, cu_q, cu_k, pos, D ** -0.5)
    else:
        out, lse = ta.attention(q, k, v, cu_q, cu_k, pos, D ** -0.5)
    return to_cpu(out), to_cpu(lse)


def _decode(positions, slot=300, seed=1):
    """One query per lane, lane b's keys in its own slot of ``slot`` rows (as the engine's static step)."""
    B = len(positions)
    q, k, v = _rand(seed, B, HQ, D), _rand(seed + 1, B * slot, HKV, D), _rand(seed + 2, B * slot, HKV, D)
    cu_q, cu_k = torch.arange(B + 1), torch.arange(0, (B + 1) * slot, slot)
    return q, k, v, cu_q, cu_k, torch.tensor(positions)


def _packed(q_lens, k_lens, first_pos, seed=3):
    """Packed sequences: sequence b has q_lens[b] queries at positions first_pos[b].. over k_lens[b] keys."""
    Tq, Tk = sum(q_lens), sum(k_lens)
    q, k, v = _rand(seed, Tq, HQ, D), _rand(seed + 1, Tk, HKV, D), _rand(seed + 2, Tk, HKV, D)
    cu = lambda ls: torch.tensor([0, *torch.tensor(ls).cumsum(0).tolist()])  # noqa: E731
    pos = torch.cat([torch.arange(p, p + n) for n, p in zip(q_lens, first_pos)])
    return q, k, v, cu(q_lens), cu(k_lens), pos


CASES = {
    "decode across chunk edges": _decode([299, 0, 127, 128, 255, 1]),
    "decode, one lane": _decode([257]),
    "decode with an empty lane": _packed([1, 0, 1], [300, 40, 200], [299, 0, 130]),
    "chunked prefill over a chunk edge": _packed([20], [140], [120]),
    "packed prefill, 3 chunks": _packed([11, 300, 70], [11, 300, 70], [0, 0, 0]),
    "chunk of a long sequence beside decodes": _packed([1, 64, 1], [260, 290, 129], [259, 226, 128]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_device_plan_gives_the_host_plans_bits(tri, small_chunk, name):
    args = CASES[name]
    (o1, l1), (o2, l2) = _call(args, False), _call(args, True)
    for what, a, b in (("out", o2, o1), ("lse", l2, l1)):
        r = bitwise(a, b, f"{name}: {what}, device plan vs host plan")
        assert r.passed, r.detail


def test_negative_control_a_plan_with_overlapping_slots_is_caught(tri, small_chunk):
    """The comparison above can fail: the same device plan with every several-chunk row's slot base set to 0 (a
    plan fault of ours: three queries' partials share one set of slots, so at least two of them fold another
    query's chunks) changes the bits of those rows, and the check says so; single-chunk rows keep theirs. (Moving
    every base by the same offset changes nothing: the forward and the merge read one base.)"""
    import dataclasses

    args = CASES["decode across chunk edges"]
    host = _call(args, False)
    q, k, v, cu_q, cu_k, pos = to_dev(args)
    p = ta.plan_on_device(q, k, v, cu_q, cu_k, pos)
    bad = dataclasses.replace(p, base=torch.where(p.base >= 0, torch.zeros_like(p.base), p.base))
    out, lse = (to_cpu(t) for t in ta.attention_planned(q, k, v, cu_q, cu_k, pos, D ** -0.5, bad))
    multi = [i for i, x in enumerate(args[5].tolist()) if x >= CHUNK]
    assert multi == [0, 3, 4]
    assert not bitwise(out[multi], host[0][multi], "overlapping slots").passed
    single = [i for i in range(6) if i not in multi]
    assert bitwise(out[single], host[0][single], "single-chunk rows").passed


def test_device_plan_has_the_host_plans_items_and_slots(tri, small_chunk):
    """A decode step: the device plan's items are the host plan's (then sentinels up to the shape-sized
    grid), its slot bases the host's, its status ok."""
    q, k, v, cu_q, cu_k, pos = to_dev(CASES["decode across chunk edges"])
    host = ta.plan(q, k, v, cu_q, cu_k, pos)
    dev = ta.plan_on_device(q, k, v, cu_q, cu_k, pos)
    n = host.items.shape[0]
    assert n == 3 + 1 + 1 + 2 + 2 + 1            # chunks per lane (128 keys each): positions 299, 0, 127, 128, 255, 1
    assert torch.equal(to_cpu(dev.items[:n]), to_cpu(host.items))
    assert to_cpu(dev.items[n:]).tolist() == [[0, q.shape[0] - 1, ta.SENTINEL_CHUNK]] * (dev.items.shape[0] - n)
    assert torch.equal(to_cpu(dev.base), to_cpu(host.base)) and to_cpu(dev.status).tolist() == [1]
    assert (dev.layout, dev.GP, dev.HPB) == (host.layout, host.GP, host.HPB) == ("decode", 2, 2)


def _nan_rows(out, lse):
    return out.float().isnan().all(-1).all(-1) & lse.isnan().all(-1)


def test_unchecked_bad_inputs_give_nan_rows_not_wrong_values(tri, small_chunk):
    """What a host would refuse, a device plan turns into NaN: a position outside its sequence's keys (that
    row alone; the others keep their bits), and cu_seqlens that do not end at the row counts (every row)."""
    q, k, v, cu_q, cu_k, pos = CASES["decode across chunk edges"]
    good = _call((q, k, v, cu_q, cu_k, pos), False)
    for bad_pos in (300, -1, 10 ** 6):
        p = pos.clone()
        p[2] = bad_pos
        out, lse = _call((q, k, v, cu_q, cu_k, p), True)
        assert _nan_rows(out, lse).tolist() == [False, False, True, False, False, False], bad_pos
        keep = [0, 1, 3, 4, 5]
        assert bitwise(out[keep], good[0][keep], "other rows").passed and bitwise(lse[keep], good[1][keep], "lse").passed
    cu_bad = cu_k.clone()
    cu_bad[-1] -= 1
    assert _nan_rows(*_call((q, k, v, cu_q, cu_bad, pos), True)).all()


def test_a_call_needing_more_slots_than_its_shape_allows_is_nan(tri, small_chunk, monkeypatch):
    """Past WS_BUDGET_BYTES the workspace holds the slots of one query per sequence (Tq + Tk // KV_CHUNK):
    four queries of one sequence at positions 296..299 need 4 x 3 slots of 4 + 2 — status 0, every row NaN,
    nothing written past the workspace. Within the budget (and on the host plan) they come out right."""
    args = _packed([4], [300], [296])
    host = _call(args, False)
    assert not host[0].float().isnan().any()
    within = _call(args, True)
    assert bitwise(within[0], host[0], "within the budget").passed
    monkeypatch.setattr(ta, "WS_BUDGET_BYTES", 0)
    assert _nan_rows(*_call(args, True)).all()
    out, lse = _call(CASES["decode across chunk edges"], True)      # one query per sequence: still exact
    assert bitwise(out, _call(CASES["decode across chunk edges"], False)[0], "decode at the small bound").passed


@pytest.mark.skipif(MODE != "interpreter", reason="counts host reads of CPU tensors (the interpreter's inputs)")
def test_the_device_plan_reads_nothing_back(tri, small_chunk, monkeypatch):
    """No scalar read, value-sized op or tolist anywhere in a graph-safe call; the host plan reads (the
    counter can fail)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    reads = []

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._opname in ("_local_scalar_dense", "nonzero", "masked_select", "equal", "is_nonzero"):
                reads.append(func._opname)
            return func(*args, **(kwargs or {}))

    for meth in ("tolist", "item"):
        old = getattr(torch.Tensor, meth)
        monkeypatch.setattr(torch.Tensor, meth, lambda self, *a, _o=old, _m=meth, **kw: (reads.append(_m), _o(self, *a, **kw))[1])
    args = CASES["decode across chunk edges"]
    with Reads():
        _call(args, True)
    assert reads == []
    with Reads():
        _call(args, False)
    assert "tolist" in reads
