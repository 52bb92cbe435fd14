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
CHUNK = 128  # KV_CHUNK for these tests: positions up to 300 cross two chunk edges cheaply


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
            out, lse = ta.attention(q, k, v, cu_q, cu_k, pos, D**-0.5)
    else:
        out, lse = ta.attention(q, k, v, cu_q, cu_k, pos, D**-0.5)
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
    out, lse = (to_cpu(t) for t in ta.attention_planned(q, k, v, cu_q, cu_k, pos, D**-0.5, bad))
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
    assert n == 3 + 1 + 1 + 2 + 2 + 1  # chunks per lane (128 keys each): positions 299, 0, 127, 128, 255, 1
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
    for bad_pos in (300, -1, 10**6):
        p = pos.clone()
        p[2] = bad_pos
        out, lse = _call((q, k, v, cu_q, cu_k, p), True)
        assert _nan_rows(out, lse).tolist() == [False, False, True, False, False, False], bad_pos
        keep = [0, 1, 3, 4, 5]
        assert (
            bitwise(out[keep], good[0][keep], "other rows").passed and bitwise(lse[keep], good[1][keep], "lse").passed
        )
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
    out, lse = _call(CASES["decode across chunk edges"], True)  # one query per sequence: still exact
    assert bitwise(out, _call(CASES["decode across chunk edges"], False)[0], "decode at the small bound").passed


def _host_reads(monkeypatch):
    """(reads, Reads): a list that collects every value read back to the host — scalar reads, value-sized ops,
    ``tolist`` / ``item`` — while a ``Reads()`` dispatch mode is active (``tolist`` / ``item`` always, via
    monkeypatch)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    reads = []

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._opname in ("_local_scalar_dense", "nonzero", "masked_select", "equal", "is_nonzero"):
                reads.append(func._opname)
            return func(*args, **(kwargs or {}))

    for meth in ("tolist", "item"):
        old = getattr(torch.Tensor, meth)
        monkeypatch.setattr(
            torch.Tensor, meth, lambda self, *a, _o=old, _m=meth, **kw: (reads.append(_m), _o(self, *a, **kw))[1]
        )
    return reads, Reads


@pytest.mark.skipif(MODE != "interpreter", reason="counts host reads of CPU tensors (the interpreter's inputs)")
def test_the_device_plan_reads_nothing_back(tri, small_chunk, monkeypatch):
    """No scalar read, value-sized op or tolist anywhere in a graph-safe call; the host plan reads (the
    counter can fail)."""
    args = CASES["decode across chunk edges"]
    reads, Reads = _host_reads(monkeypatch)
    with Reads():
        _call(args, True)
    assert reads == []
    with Reads():
        _call(args, False)
    assert "tolist" in reads


# ---- the backward's device plan (bwd_tiles_on_device): what a captured backward runs -------------------------------
def _bwd(args, device_plan: bool, seed=11):
    """ta.attention_bwd on the test's device -> (dq, dk, dv) on the CPU; planned on the device or on the host. The
    forward's out / lse come from the host-planned forward (valid input) or stand-ins of the right shape."""
    q, k, v, cu_q, cu_k, pos = to_dev(args)
    try:
        out, lse = ta.attention(q, k, v, cu_q, cu_k, pos, D**-0.5)
    except ValueError:  # refused input: the backward's device plan must refuse it by itself
        out, lse = torch.zeros_like(q), torch.zeros(q.shape[:2], dtype=torch.float32, device=q.device)
    dout = to_dev(_rand(seed, *q.shape))
    if device_plan:
        with ws1_ops.graph_safe():
            grads = ta.attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, pos, D**-0.5)
    else:
        grads = ta.attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, pos, D**-0.5)
    return to_cpu(grads)


BWD_CASES = {
    "packed prefill": _packed([11, 300, 70], [11, 300, 70], [0, 0, 0]),
    "decode with an empty lane": _packed([1, 0, 1], [300, 40, 200], [299, 0, 130]),
    "chunk of a long sequence beside decodes": _packed([1, 64, 1], [260, 290, 129], [259, 226, 128]),
}


@pytest.mark.parametrize("name", list(BWD_CASES))
def test_backward_device_plan_gives_the_host_plans_bits(tri, name):
    host, dev = _bwd(BWD_CASES[name], False), _bwd(BWD_CASES[name], True)
    for what, a, b in zip(("dq", "dk", "dv"), dev, host):
        assert not b.isnan().any(), what
        r = bitwise(a, b, f"{name}: {what}, device plan vs host plan")
        assert r.passed, r.detail


def test_backward_device_tiles_are_the_host_tiles_then_sentinels(tri):
    """The query tiles (absolute first rows) and key tiles (first key relative to the sequence) of the host plan, in
    its order, then sentinels (sequence 0 at its end) up to T // block + B rows; the cu_seqlens kept as they are."""
    q, k, v, cu_q, cu_k, pos = to_dev(BWD_CASES["decode with an empty lane"])
    cfg = ta.BWD["sm80"]
    cq, ck, qt, kt = ta.bwd_tiles_on_device(cu_q, cu_k, pos, q.shape[0], k.shape[0], cfg)
    assert torch.equal(to_cpu(cq), to_cpu(cu_q)) and torch.equal(to_cpu(ck), to_cpu(cu_k))
    qs, lq, ks, lk = ta._meta("attention_bwd", q, k, v, cu_q, cu_k, pos)
    for dev, host, cap, end0 in (
        (qt, ta._tiles(qs, lq, cfg.BM, False, q.device), 2 // cfg.BM + 3, 1),
        (kt, ta._tiles(ks, lk, cfg.BN_KV, True, q.device), 540 // cfg.BN_KV + 3, 300),
    ):
        n = host.shape[0]
        assert dev.shape == (cap, 2) and torch.equal(to_cpu(dev[:n]), to_cpu(host))
        assert to_cpu(dev[n:]).tolist() == [[0, end0]] * (cap - n)


def test_backward_unchecked_bad_inputs_give_nan_everywhere(tri):
    """What a host refuses (a one-line error), the backward's device plan turns into NaN in every element of dq, dk
    and dv: a position outside its sequence's keys, cu_seqlens that do not end at the row counts or decrease."""
    q, k, v, cu_q, cu_k, pos = BWD_CASES["decode with an empty lane"]
    cases = []
    for bad_pos in (300, -1, 10**6):
        p = pos.clone()
        p[0] = bad_pos
        cases.append((f"position {bad_pos}", (q, k, v, cu_q, cu_k, p)))
    cu_bad = cu_k.clone()
    cu_bad[-1] -= 1
    cases.append(("cu_seqlens_k ends before Tk", (q, k, v, cu_q, cu_bad, pos)))
    cases.append(("cu_seqlens_q decreasing", (q, k, v, torch.tensor([0, 2, 1, 2]), cu_k, pos)))
    for name, args in cases:
        with pytest.raises(ValueError):
            _bwd(args, False)
        for what, g in zip(("dq", "dk", "dv"), _bwd(args, True)):
            assert g.isnan().all(), (name, what, int((~g.isnan()).sum()))


def test_negative_control_a_device_plan_missing_a_tile_is_caught(tri, monkeypatch):
    """The bitwise comparison above can fail: the same device plan with its last query tile and its last key tile
    turned into sentinels leaves those rows' gradients at their NaN start, and the check says so."""
    real = ta.bwd_tiles_on_device

    def drop_last(cu_q, cu_k, q_pos, Tq, Tk, cfg):
        cu_q, cu_k, qt, kt = real(cu_q, cu_k, q_pos, Tq, Tk, cfg)
        nq = int(((cu_q[1:] - cu_q[:-1] + cfg.BM - 1) // cfg.BM).sum())  # the real tiles (a test may read)
        nk = int(((cu_k[1:] - cu_k[:-1] + cfg.BN_KV - 1) // cfg.BN_KV).sum())
        qt, kt = qt.clone(), kt.clone()
        qt[nq - 1] = torch.stack([cu_q.new_tensor(0), cu_q[1]])
        kt[nk - 1] = torch.stack([cu_k.new_tensor(0), cu_k[1] - cu_k[0]])
        return cu_q, cu_k, qt, kt

    args = BWD_CASES["packed prefill"]
    host = _bwd(args, False)
    monkeypatch.setattr(ta, "bwd_tiles_on_device", drop_last)
    dev = _bwd(args, True)
    for what, a, b in zip(("dq", "dk", "dv"), dev, host):
        assert not bitwise(a, b, f"{what}, a plan missing a tile").passed, what


@pytest.mark.skipif(MODE != "interpreter", reason="counts host reads of CPU tensors (the interpreter's inputs)")
def test_the_backward_device_plan_reads_nothing_back(tri, monkeypatch):
    """No scalar read, value-sized op or tolist in a graph-safe backward; the host-planned one reads."""
    q, k, v, cu_q, cu_k, pos = BWD_CASES["decode with an empty lane"]
    out, lse = ta.attention(q, k, v, cu_q, cu_k, pos, D**-0.5)
    dout = _rand(11, *q.shape)
    reads, Reads = _host_reads(monkeypatch)
    with Reads(), ws1_ops.graph_safe():
        ta.attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, pos, D**-0.5)
    assert reads == []
    with Reads():
        ta.attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, pos, D**-0.5)
    assert "tolist" in reads


@pytest.mark.skipif(MODE != "device", reason="a CUDA graph capture needs the GPU (the interpreter runs graph_safe)")
def test_a_captured_backward_replays_to_the_eager_bits(tri):
    """Under a real CUDA graph capture the backward plans on the device: a replay gives the eager call's bits."""
    q, k, v, cu_q, cu_k, pos = to_dev(BWD_CASES["packed prefill"])
    out, lse = ta.attention(q, k, v, cu_q, cu_k, pos, D**-0.5)
    dout = to_dev(_rand(11, *q.shape))
    want = ta.attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, pos, D**-0.5)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), ws1_ops.graph_safe():  # compile the graph-safe path outside the capture
        ta.attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, pos, D**-0.5)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grads = ta.attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, pos, D**-0.5)
    graph.replay()
    torch.cuda.synchronize()
    for what, a, b in zip(("dq", "dk", "dv"), grads, want):
        r = bitwise(to_cpu(a), to_cpu(b), f"captured backward {what}")
        assert r.passed, r.detail
