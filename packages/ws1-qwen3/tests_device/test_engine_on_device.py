"""The rollout engine on a GPU profile's own device: the sampler's uniform bits equal the CPU's, a row's token does
not depend on its batch, the CUDA-graph decode equals eager decode bit for bit in every bucket, and decode reads
nothing back per token.

    WS1_DEVICE_PROFILE=cuda_bf16 pytest packages/ws1-qwen3/tests_device        (nox -s tests_device -- cuda_bf16)

Without the profile's device every test is skipped with the reason. Never run yet: written without a GPU
(issue 25); the CPU-capable twins of these checks are packages/ws1-qwen3/tests/test_sampling.py and test_engine.py.
"""

import dataclasses
import os
import struct

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import ws1_accel
import ws1_qwen3
from ws1_qwen3 import Request, generate
from ws1_qwen3 import sampling as S
from ws1_qwen3.engine import capture_refused

PROFILE = os.environ.get("WS1_DEVICE_PROFILE", "")
_WHY = (
    "WS1_DEVICE_PROFILE is not set (nox -s tests_device -- PROFILE sets it)"
    if not PROFILE
    else ws1_accel.unavailable_reason(PROFILE)
)
pytestmark = pytest.mark.skipif(_WHY is not None, reason=str(_WHY))


@pytest.fixture(scope="module")
def dev():
    return ws1_accel.resolve_device(PROFILE)


@pytest.fixture(scope="module")
def tiny(dev):
    return ws1_qwen3.synthetic("tiny", PROFILE, device=dev)


def flat(cs):
    return [(c.request_id, c.tokens, [struct.pack("<f", v) for v in c.logprobs], c.finish_reason) for c in cs]


def reqs(n=6):
    return [
        Request(
            prompt=tuple(range(100 + 5 * i, 104 + 5 * i + i % 3)),
            max_new_tokens=(7, 12, 5, 9, 11, 4)[i % 6],
            temperature=(1.0, 0.7, 0.0)[i % 3],
            seed=10 + i,
            request_id=f"q{i}",
        )
        for i in range(n)
    ]


def test_uniform_bits_equal_the_cpu_and_the_reference(dev):
    streams = [0, (1 << 64) - 1, 1 << 63, 0x123456789ABCDEF0, 42]
    steps = [0, 1, 300, 1 << 40, 7]
    k_cpu = S.keys(torch.tensor(S.as_int64(streams), device="cpu"), torch.tensor(steps, device="cpu"))
    k_dev = S.keys(torch.tensor(S.as_int64(streams), device="cpu").to(dev), torch.tensor(steps, device="cpu").to(dev))
    assert k_dev.cpu().tolist() == k_cpu.tolist()
    b_dev, b_cpu = S.uniform_bits(k_dev, 900).cpu(), S.uniform_bits(k_cpu, 900)
    assert torch.equal(b_dev, b_cpu)
    assert b_cpu[2, :50].tolist() == S.as_int64([S.uniform_bits_ref(streams[2], steps[2], i) for i in range(50)])
    assert torch.equal(S.uniform(k_dev, 900).cpu().view(torch.int64), S.uniform(k_cpu, 900).view(torch.int64))


def test_a_rows_token_never_depends_on_its_batch_on_the_device(dev):
    V, n = 151936, 9
    g = torch.Generator(device="cpu").manual_seed(0)
    logp = torch.log_softmax(torch.randn(n, V, generator=g, device="cpu") * 3, -1).to(dev)
    temp = torch.tensor([1.0, 0.0, 0.7, 1.0, 2.0, 1.0, 1.0, 0.3, 1.0], device="cpu").to(dev)
    streams = torch.tensor(S.as_int64([S.stream_of(None, f"r{i}") for i in range(n)]), device="cpu").to(dev)
    steps = torch.arange(n, device="cpu").to(dev)
    tok, lp = S.sample(logp, temp, streams, steps)
    for i in range(n):
        t1, l1 = S.sample(logp[i : i + 1], temp[i : i + 1], streams[i : i + 1], steps[i : i + 1])
        assert t1.item() == tok[i].item() and l1.view(torch.int32).item() == lp[i].view(torch.int32).item()
    perm = torch.tensor([3, 1, 8, 0, 5, 2, 7, 4, 6], device="cpu").to(dev)
    t2, _ = S.sample(logp[perm], temp[perm], streams[perm], steps[perm])
    assert torch.equal(t2, tok[perm])


@pytest.mark.parametrize(
    "kw", [{"max_batch": 6}, {"max_batch": 2}, {"max_batch": 3, "sync_every": 3}, {"max_batch": 4, "chunk": 3}]
)
def test_graph_decode_equals_eager_decode(tiny, kw):
    """The CUDA graph of each bucket, replayed, gives eager decode's tokens and log-probs bit for bit (a profile
    whose kernels cannot be captured yet: the eager contiguous path equals the paged one instead)."""
    rs = reqs(6)
    eager = generate(tiny, rs, cache="contiguous", graphs=False, **kw)
    paged = generate(tiny, rs, graphs=False, **kw)
    assert flat(paged) == flat(eager)
    if capture_refused(tiny) is None:
        st = {}  # graphs=None: captured on a GPU; the static step called directly under the cpu_bf16 logic check
        graph = generate(
            tiny, rs, cache="contiguous", stats=st, graphs=None if tiny.device.type == "cuda" else True, **kw
        )
        assert st["graphs"] and st["buckets"], st
        assert flat(graph) == flat(eager)


def test_decode_reads_nothing_back_per_token(tiny, dev):
    """Counted on the device: no scalar read and exactly one device->host copy per window of decode steps (the
    CUDA graph path where the profile allows it, else eager). A prefill may read (the Triton attention plans an
    eager call on the host; ws1_cuda reads nothing): the same prompts decoded for 4x as many tokens must add
    exactly the extra windows' copies."""

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._opname
            if name in ("_local_scalar_dense", "nonzero", "_unique2", "masked_select"):
                self.n[name] = self.n.get(name, 0) + 1
            if name == "_to_copy" and args[0].device.type == "cuda" and str((kwargs or {}).get("device", "")) == "cpu":
                self.n["device_to_host"] = self.n.get("device_to_host", 0) + 1
            return func(*args, **(kwargs or {}))

    runs = []
    for scale in (1, 4):
        rs = [dataclasses.replace(r, max_new_tokens=r.max_new_tokens * scale, stop_token_ids=()) for r in reqs(6)]
        st = {}
        with Count() as c:
            out = generate(tiny, rs, cache="contiguous", sync_every=4, max_batch=6, stats=st)
        assert sum(len(o.tokens) for o in out) == sum(r.max_new_tokens for r in rs)
        assert st["host_syncs"] <= -(-st["decode_steps"] // 4) + 2
        runs.append((c.n, st))
    (n1, s1), (n4, s4) = runs
    if dev.type != "cuda":  # (WS1_DEVICE_PROFILE=cpu_bf16, the logic check: a CPU tensor's tolist dispatches no copy)
        assert n1 == n4 == {}, (n1, n4)
        return
    extra = {k: n4.get(k, 0) - n1.get(k, 0) for k in {*n1, *n4}}
    assert {k: v for k, v in extra.items() if v} == {"device_to_host": s4["host_syncs"] - s1["host_syncs"]}, (n1, n4)
    if ws1_accel.family_of(PROFILE) == "cuda":
        assert n1 == {"device_to_host": s1["host_syncs"]}, n1
