"""A GPU (or NPU) profile's ops on its own device, through the public ws1_ops API — the tests a device host adds.

    WS1_DEVICE_PROFILE=cuda_bf16 pytest packages/ws1-ops/tests_device        (nox -s tests_device -- cuda_bf16)

The CPU CI runs every package's tests; a GPU host's C11 test step runs only what needs its device: these, the
kernel package's own device tests (kernels-cuda/tests/test_gpu_*.py) and, for triton_cuda_bf16, the Triton unit
tests on the device. Each test here checks one property the gates rely on, on small shapes, bitwise: a row alone
equals the same row inside batches of other sizes at other positions (det_gemm, lm_head, the norms, rope, the
activations, logprob), silu == swiglu(x, 1), logprob == batch_invariant_logp[target], attention prefill ==
chunked prefill == decode, and a sequence packed behind another equals it alone; plus accuracy against FP64.

Without the profile's device every test is skipped with the reason (a CPU host: none of this can pass there);
the nox session refuses to run without the device (exit 2), so a GPU host cannot pass this step by skipping.
"""

import os

import pytest
import torch

import ws1_accel
import ws1_ops

PROFILE = os.environ.get("WS1_DEVICE_PROFILE", "")
_WHY = (
    "WS1_DEVICE_PROFILE is not set (nox -s tests_device -- PROFILE sets it)"
    if not PROFILE
    else ws1_accel.unavailable_reason(PROFILE)
)
pytestmark = pytest.mark.skipif(_WHY is not None, reason=str(_WHY))
BF, F32 = torch.bfloat16, torch.float32
SIZES = (1, 2, 7, 64, 65, 130)


@pytest.fixture(scope="module")
def dev():
    return ws1_accel.resolve_device(PROFILE)


@pytest.fixture(autouse=True)
def _profile():
    with ws1_ops.use_profile(PROFILE):
        yield


def rnd(dev, *shape, seed=0, scale=1.0, dtype=BF):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(*shape, generator=g, device="cpu") * scale).to(dtype).to(dev)


def same(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    view = {2: torch.int16, 4: torch.int32}[a.element_size()]
    diff = int((a.detach().contiguous().view(view) != b.detach().contiguous().view(view)).sum())
    assert diff == 0, f"{what}: {diff} elements differ bitwise"


def rows_alone_vs_batched(fn, x, dev, sizes=SIZES, seed=0):
    """Row i alone == row i inside a batch of M rows drawn at random positions (bitwise)."""
    alone = [fn(x[i : i + 1]) for i in range(x.shape[0])]
    g = torch.Generator(device="cpu").manual_seed(seed)
    for M in sizes:
        idx = torch.randint(0, x.shape[0], (M,), generator=g, device="cpu")
        out = fn(x[idx.to(dev)])
        for r, i in enumerate(idx.tolist()):
            same(out[r : r + 1], alone[i], f"M={M} row {r} (source row {i})")


def test_det_gemm_and_lm_head_rows(dev):
    x, w = rnd(dev, 70, 512, seed=1, scale=0.5), rnd(dev, 384, 512, seed=2, scale=0.05)
    rows_alone_vs_batched(lambda a: ws1_ops.det_gemm(a, w), x, dev)
    rows_alone_vs_batched(lambda a: ws1_ops.lm_head(a, w), x, dev, sizes=(1, 65))
    torch.testing.assert_close(ws1_ops.lm_head(x, w).double(), x.double() @ w.double().t(), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("op", ["rms_norm", "qk_norm"])
def test_norm_rows(dev, op):
    x = (
        rnd(dev, 70, 4, 128, seed=3) if op == "qk_norm" else rnd(dev, 70, 1024, seed=3, dtype=F32)
    )  # qk_norm takes BF16 q/k
    w = rnd(dev, x.shape[-1], seed=4)
    f = getattr(ws1_ops, op)
    rows_alone_vs_batched(lambda a: f(a, w, 1e-6), x, dev)


def test_rope_activations_and_identities(dev):
    x = rnd(dev, 40, 8, 128, seed=5)
    pos = torch.arange(40, device=dev) * 131
    alone = torch.cat([ws1_ops.rope(x[i : i + 1], pos[i : i + 1], 1e6) for i in range(40)])
    same(ws1_ops.rope(x, pos, 1e6), alone, "rope batched vs alone")
    g, u = rnd(dev, 70, 1000, seed=6, scale=3), rnd(dev, 70, 1000, seed=7)
    gu = torch.cat([g, u], 1)  # a row of gate and its row of up travel together
    rows_alone_vs_batched(lambda a: ws1_ops.swiglu(a[:, :1000].contiguous(), a[:, 1000:].contiguous()), gu, dev)
    same(ws1_ops.silu(g), ws1_ops.swiglu(g, torch.ones_like(g)), "silu vs swiglu(x, 1)")


def test_logprob_is_batch_invariant_logp_at_the_target(dev):
    lg = rnd(dev, 9, 151936, seed=8, scale=3, dtype=F32)
    t = torch.randint(0, 151936, (9,), generator=torch.Generator(device="cpu").manual_seed(9), device="cpu").to(dev)
    full = ws1_ops.batch_invariant_logp(lg)
    same(ws1_ops.logprob(lg, t), full.gather(1, t[:, None]).squeeze(1), "logprob vs batch_invariant_logp[t]")
    rows_alone_vs_batched(ws1_ops.batch_invariant_logp, lg, dev, sizes=(1, 4, 9))
    torch.testing.assert_close(full.double(), torch.log_softmax(lg.double(), -1), atol=5e-5, rtol=0)


def _cu(lens, dev):
    return ws1_ops.cu_seqlens_from_lengths(torch.tensor(lens, device="cpu")).to(dev)


def test_attention_prefill_chunked_decode_and_packing(dev):
    Hq, Hkv, D, S = 32, 8, 128, 150
    q, k, v = rnd(dev, S, Hq, D, seed=10), rnd(dev, S, Hkv, D, seed=11), rnd(dev, S, Hkv, D, seed=12)
    pos = torch.arange(S, device=dev)
    out = ws1_ops.attention(q, k, v, _cu([S], dev), _cu([S], dev), pos)
    for c0, c1 in ((0, 7), (7, 64), (64, 149), (149, 150)):  # chunks; the last a decode step
        o = ws1_ops.attention(q[c0:c1], k[:c1], v[:c1], _cu([c1 - c0], dev), _cu([c1], dev), pos[c0:c1])
        same(o, out[c0:c1], f"query rows {c0}:{c1} against keys 0:{c1}")
    q2, k2, v2 = rnd(dev, 13, Hq, D, seed=13), rnd(dev, 13, Hkv, D, seed=14), rnd(dev, 13, Hkv, D, seed=15)
    o = ws1_ops.attention(
        torch.cat([q2, q]),
        torch.cat([k2, k]),
        torch.cat([v2, v]),
        _cu([13, S], dev),
        _cu([13, S], dev),
        torch.cat([torch.arange(13, device=dev), pos]),
    )
    same(o[13:], out, "packed behind another sequence vs alone")
    qd, kd, vd = (t.double().transpose(0, 1)[None] for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        qd, kd.repeat_interleave(Hq // Hkv, 1), vd.repeat_interleave(Hq // Hkv, 1), is_causal=True
    )[0].transpose(0, 1)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
