"""The rollout engine (ws1_qwen3.engine): no host sync per token, the static (graph) decode step equals the
eager one bit for bit in every bucket, distinct samples by default, seeds reproduce in any batch."""

import contextlib
import struct

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import ws1_qwen3
from ws1_qwen3 import ModelInputError, Request, generate

# what makes a GPU wait for the device: a scalar read (item, int(t), bool(t)), an op whose output size is a
# value (nonzero, unique, masked_select), a device -> host copy
SYNC_OPS = {
    "_local_scalar_dense",
    "nonzero",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "masked_select",
    "equal",
    "is_nonzero",
}


class SyncCounter(TorchDispatchMode):
    """Counts every read of tensor values into Python during the block: the dispatched sync ops above, plus
    ``Tensor.tolist/numpy/cpu/item`` called from Python (a CPU tensor's tolist dispatches nothing). On a CPU
    host every tensor is a host tensor, so this counts what *would* be a sync on a GPU, and more."""

    def __init__(self):
        super().__init__()
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._opname
        if func.namespace == "aten" and name in SYNC_OPS:
            self.ops[name] = self.ops.get(name, 0) + 1
        if (
            func.namespace == "aten"
            and name == "_to_copy"
            and args[0].device.type != "cpu"
            and torch.device((kwargs or {}).get("device") or args[0].device).type == "cpu"
        ):
            self.ops["device_to_host"] = self.ops.get("device_to_host", 0) + 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


@contextlib.contextmanager
def count_syncs(monkeypatch):
    c = SyncCounter()
    for meth in ("tolist", "numpy", "cpu"):
        old = getattr(torch.Tensor, meth)

        def wrap(self, *a, _old=old, _m=meth, **k):
            c.ops[f"Tensor.{_m}"] = c.ops.get(f"Tensor.{_m}", 0) + 1
            return _old(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, meth, wrap)
    with c:
        yield c
    monkeypatch.undo()


def reqs(n=6, new=(7, 12, 5, 9, 11, 4)):
    return [
        Request(
            prompt=tuple(range(100 + 5 * i, 104 + 5 * i + i % 3)),
            max_new_tokens=new[i % len(new)],
            temperature=(1.0, 0.7, 0.0)[i % 3],
            seed=10 + i,
            request_id=f"q{i}",
        )
        for i in range(n)
    ]


def flat(cs):
    """Completions as comparable values, log-probs as their FP32 bit patterns."""
    return [(c.request_id, c.tokens, [struct.pack("<f", v) for v in c.logprobs], c.finish_reason) for c in cs]


@pytest.mark.parametrize(
    "kw",
    [{}, {"cache": "contiguous"}, {"graphs": True}, {"graphs": True, "max_batch": 3}],
    ids=["paged-eager", "contiguous-eager", "static", "static-mb3"],
)
def test_decode_reads_nothing_back_per_token(tiny, monkeypatch, kw):
    """Over a whole generate() (prefill included): no scalar read, nonzero or device->host copy anywhere, and
    exactly one readback (tolist of the window's tokens and log-probs) per window of sync_every decode steps.
    The old engine read each token and log-prob back per request per step (6.1 syncs per token in
    benchmarks/profile_step.py on tiny, 8 requests)."""
    K = 4
    rs = reqs()
    stats = {}
    with count_syncs(monkeypatch) as c:
        out = generate(tiny, rs, sync_every=K, stats=stats, **kw)
    tokens = sum(len(o.tokens) for o in out)
    assert tokens == sum(r.max_new_tokens for r in rs)
    assert c.ops == {"Tensor.tolist": stats["host_syncs"]}, c.ops
    windows_needed = -(-stats["decode_steps"] // K)
    assert stats["host_syncs"] <= windows_needed + 2, stats  # +: windows cut short when every lane ran dry
    assert c.total / tokens < 0.25


def test_the_counter_sees_a_per_token_sync(tiny, monkeypatch):
    """The count above can fail: sync_every=1 reads back once per step, and a stray .item() is seen."""
    rs = reqs(3)
    stats = {}
    with count_syncs(monkeypatch) as c:
        generate(tiny, rs, sync_every=1, stats=stats)
    assert (
        c.ops["Tensor.tolist"] == stats["host_syncs"] == stats["decode_steps"] >= max(r.max_new_tokens for r in rs) - 1
    )
    with count_syncs(monkeypatch) as c:
        torch.ones(2, device="cpu").sum().item()
    assert c.ops == {"_local_scalar_dense": 1}


@pytest.mark.parametrize(
    "kw",
    [
        {"max_batch": 6},
        {"max_batch": 2},
        {"max_batch": 3, "sync_every": 3},
        {"max_batch": 5, "sync_every": 1},
        {"max_batch": 4, "chunk": 3},
    ],
)
def test_static_step_equals_eager_in_every_bucket(tiny, kw):
    """The graph path's static step (CPU-capable: the same function, called directly) gives the eager path's
    tokens and log-probs bit for bit. Requests join and leave, so steps run in buckets 1..8 with dummy rows
    (lanes without a request) — padding is bit-neutral for the real rows."""
    rs = reqs(6)
    eager = generate(tiny, rs, cache="contiguous", graphs=False, **kw)
    st = {}
    static = generate(tiny, rs, graphs=True, stats=st, **kw)
    assert flat(static) == flat(eager)
    assert st["graphs"] and st["buckets"]


def test_a_request_never_depends_on_its_bucket(tiny):
    """The same seeded request decoded alone (bucket 1), behind 2 others (bucket 4) and behind 6 (bucket 8)."""
    x = Request(prompt=(7, 8, 9, 10), max_new_tokens=10, seed=99, request_id="x")

    def cache():
        return tiny.new_cache("contiguous", max_seqs=8, max_len=16)

    alone = generate(tiny, [x], cache=cache(), graphs=True, stats=(s1 := {}))
    others = [Request(prompt=(50 + i,), max_new_tokens=12, request_id=f"o{i}") for i in range(6)]
    mid = generate(tiny, [*others[:2], x], cache=cache(), graphs=True, stats=(s2 := {}))
    full = generate(tiny, [*others, x], cache=cache(), graphs=True, max_batch=8, stats=(s3 := {}))
    assert s1["buckets"] == [1] and 4 in s2["buckets"] and 8 in s3["buckets"]
    assert flat(alone) == flat([mid[-1]]) == flat([full[-1]])


def test_a_cache_passed_again_replays_its_static_steps(tiny):
    """The static steps (CUDA graphs on a GPU) live with the cache: a second generate() through the same cache
    makes none and gives what a fresh cache gives."""
    cache = tiny.new_cache("contiguous", max_seqs=4, max_len=32)
    rs = reqs(4)
    first = generate(tiny, rs, cache=cache, graphs=True, stats=(s1 := {}))
    again = generate(tiny, list(reversed(rs)), cache=cache, graphs=True, stats=(s2 := {}))
    assert s1["graphs_made"] >= 1 and s2["graphs_made"] == 0 and s2["buckets"]
    assert flat(again) == flat(list(reversed(first)))
    assert flat(generate(tiny, rs, graphs=True)) == flat(first)


def test_the_engines_lanes_go_with_their_cache(tiny):
    """The engine keeps a cache's lanes and static steps itself (nothing is stashed on the cache), weakly: once
    the cache is gone so are they — the static steps refer to neither the cache nor an engine."""
    import gc

    from ws1_qwen3 import engine

    cache = tiny.new_cache("contiguous", max_seqs=2, max_len=16)
    generate(tiny, reqs(2), cache=cache, graphs=True)
    assert cache in engine._LANES and not any(k.startswith("_ws1") for k in vars(cache))
    n = len(engine._LANES)
    del cache
    gc.collect()
    assert len(engine._LANES) == n - 1


def test_unseeded_samples_of_one_prompt_differ(tiny):
    """n samples of one prompt with no seed: distinct streams (from the request ids), distinct samples. The
    old default (seed 0 for every request) made them identical: GRPO saw zero advantages."""
    n = 8
    out = generate(tiny, [Request(prompt=(1, 2, 3), max_new_tokens=6) for _ in range(n)])
    assert len({tuple(o.tokens) for o in out}) == n
    named = generate(tiny, [Request(prompt=(1, 2, 3), max_new_tokens=6, request_id=f"g{i}") for i in range(n)])
    assert len({tuple(o.tokens) for o in named}) == n
    # an unseeded request is reproduced by its id, whatever shares its batch
    again = generate(
        tiny,
        [
            Request(prompt=(4, 5), max_new_tokens=3, request_id="zz"),
            *[Request(prompt=(1, 2, 3), max_new_tokens=6, request_id=f"g{i}") for i in (5, 2)],
        ],
        max_batch=2,
    )
    assert flat(again[1:]) == flat([named[5], named[2]])


def test_one_seed_reproduces_alone_and_in_any_batch(tiny):
    """The same seed, the same tokens: alone, in batches of other compositions and sizes, at other list
    positions, with another request id, through either cache and the static step."""
    x = Request(prompt=(11, 12, 13, 14, 15), max_new_tokens=9, seed=1234, request_id="x")
    alone = generate(tiny, [x])[0]
    others = [Request(prompt=(60 + i, 61), max_new_tokens=5 + i, request_id=f"y{i}") for i in range(5)]
    for kw in ({}, {"max_batch": 2}, {"cache": "contiguous"}, {"graphs": True}, {"chunk": 2, "sync_every": 3}):
        for pos in (0, 3):
            batch = [*others[:pos], x, *others[pos:]]
            got = generate(tiny, batch, **kw)[pos]
            assert (got.tokens, got.logprobs) == (alone.tokens, alone.logprobs), (kw, pos)
    renamed = generate(tiny, [Request(prompt=x.prompt, max_new_tokens=9, seed=1234, request_id="another")])[0]
    assert renamed.tokens == alone.tokens
    assert generate(tiny, [Request(prompt=x.prompt, max_new_tokens=9, seed=1235)])[0].tokens != alone.tokens


def test_stops_found_at_a_sync_end_the_completion_there(tiny):
    """A stop token drawn mid-window ends the completion at it; the draws after it (until the window's sync)
    are dropped: the same completions as reading every step (sync_every=1)."""
    base = generate(tiny, [Request(prompt=(5, 6), max_new_tokens=12, seed=9, request_id="s")])[0]
    stop = base.tokens[4]
    first = base.tokens.index(stop)
    r = [
        Request(prompt=(5, 6), max_new_tokens=12, seed=9, request_id="s", stop_token_ids=(stop,)),
        Request(prompt=(8,), max_new_tokens=12, seed=1, request_id="t"),
    ]
    want = generate(tiny, r, sync_every=1)
    for kw in ({"sync_every": 16}, {"sync_every": 5, "graphs": True}):
        got = generate(tiny, r, **kw)
        assert flat(got) == flat(want), kw
    assert want[0].tokens == base.tokens[: first + 1] and want[0].finish_reason == "stop"


def test_generated_blocks_are_registered_for_prefix_reuse(tiny):
    """B2 learns the decoded tokens at the sync (fill_tokens) and registers the blocks they complete, as a
    commit with the ids did: a prompt that continues a finished completion reuses its generated blocks (6
    prompt tokens + 9 fed draws = 15 cached positions, 3 full blocks of 4; without the generated tokens'
    registration only the first block, all prompt, would be served)."""
    cache = tiny.new_cache("paged", max_seqs=2, max_len=64, block_size=4)
    a = generate(tiny, [Request(prompt=tuple(range(30, 36)), max_new_tokens=10, seed=3, request_id="a")], cache=cache)[
        0
    ]
    cont = Request(prompt=(*range(30, 36), *a.tokens, 7), max_new_tokens=2, seed=4, request_id="b")
    warm = generate(tiny, [cont], cache=cache)[0]
    cold = generate(tiny, [cont], block_size=4)[0]
    assert warm.prefix_hit_tokens == 12 and (warm.tokens, warm.logprobs) == (cold.tokens, cold.logprobs)


def test_graph_mode_refuses_what_it_cannot_do(tiny):
    with pytest.raises(ModelInputError, match="contiguous KV cache"):
        generate(tiny, reqs(1), graphs=True, cache="paged")
    busy = tiny.new_cache("contiguous", max_seqs=2, max_len=32)
    busy.begin("other")
    with pytest.raises(ModelInputError, match="no other sequences"):
        generate(tiny, reqs(1), graphs=True, cache=busy)
    with pytest.raises(ModelInputError, match="sync_every"):
        generate(tiny, reqs(1), sync_every=0)
    with pytest.raises(ModelInputError, match="seed must be an int"):
        generate(tiny, [Request(prompt=(1,), max_new_tokens=1, seed=1.5)])


def test_the_engine_in_the_stray_device_mode(tiny):
    """Every tensor the engine, the sampler and the static step make names its device (a stray one would be a
    meta tensor here and fail, as it would land on the CPU on a GPU host)."""
    from ws1_matrix.stray import stray_default_device

    rs = reqs(4)
    want = flat(generate(tiny, rs, cache="contiguous"))
    with stray_default_device():
        for kw in ({}, {"graphs": True, "max_batch": 3}, {"cache": "contiguous", "sync_every": 2}):
            assert flat(generate(tiny, rs, **kw)) == want, kw


def test_stats(tiny):
    st = {}
    generate(tiny, reqs(3), stats=st, sync_every=4)
    assert st["decode_steps"] > 0 and st["host_syncs"] >= 1 and st["prefill_s"] > 0 and st["decode_s"] > 0
    assert ws1_qwen3.generate is generate
