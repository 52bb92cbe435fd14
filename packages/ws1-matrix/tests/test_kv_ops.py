"""C6/C7 operator checks: green on cpu_bf16, red on plain PyTorch ops (the negative control), and
chunked attention's canonical backward."""

import pytest
import torch

import ws1_ops
from ws1_matrix.kv_ops import DECODE_CASES, b1_roundtrip, c6_operator_cases, decode_vs_prefill, paged_vs_contiguous

SMALL = dict(hq=8, hkv=2, d=64)


def test_c6_cases_are_the_design_six():
    assert [(n, lens, lay) for n, lens, lay in DECODE_CASES] == [
        ("b1-len8", (8,), "packed"),
        ("b1-len32", (32,), "packed"),
        ("b1-len19", (19,), "packed"),
        ("b4-varlen", (11, 16, 13, 19), "packed"),
        ("b4-padded-right20", (11, 16, 13, 19), "padded_right"),
        ("b4-padded-left20", (11, 16, 13, 19), "padded_left"),
    ]


def test_c6_operator_cases_bitwise_on_cpu(cpu):
    out = c6_operator_cases(**SMALL)
    assert len(out) == 12
    bad = [o.comparison.detail for o in out if not o.passed]
    assert not bad, bad


@pytest.mark.parametrize("cache", ["contiguous", "paged"])
def test_decode_through_either_cache(cpu, cache):
    assert all(o.passed for o in decode_vs_prefill("b4", (11, 16, 13, 19), "padded_left", cache=cache, **SMALL))


def test_c6_negative_control_plain_torch_is_red():
    """SDPA's decode differs from its prefill: the same check must say so."""
    with ws1_ops.use_candidate("torch_default"):
        out = c6_operator_cases(**SMALL)
    red = [o.name for o in out if not o.passed]
    assert len(red) >= 6, [o.comparison.detail for o in out]
    assert all(o.comparison.n_diff > 0 for o in out if not o.passed)


def test_c7_operator_checks(cpu):
    out = b1_roundtrip(**SMALL) + paged_vs_contiguous(**SMALL)
    assert [o.name for o in out] == [
        "b1/write-read-k",
        "b1/write-read-v",
        "b1/cursor",
        "b1/decode-finite",
        "b2/paged-vs-contiguous",
    ]
    assert all(o.passed for o in out), [o.comparison.detail for o in out]


def _qkv(lengths, seed=0, hq=8, hkv=2, d=64):
    g = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    q, k, v = ((torch.randn(T, h, d, generator=g) * 2).to(torch.bfloat16) for h in (hq, hkv, hkv))
    cu = ws1_ops.cu_seqlens_from_lengths(torch.tensor(lengths))
    pos = torch.cat([torch.arange(n) for n in lengths])
    return q, k, v, cu, pos


def _run(chunk, q, k, v, cu, pos, dout):
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = ws1_ops.attention(*leaves, cu, cu, pos, chunk=chunk)
    out.backward(dout)
    return out.detach(), [t.grad for t in leaves]


def test_chunked_attention_equals_full_forward_and_backward(cpu):
    q, k, v, cu, pos = _qkv((11, 16, 13, 19))
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    full, gfull = _run(None, q, k, v, cu, pos, dout)
    for chunk in (1, 3, 7, 64):
        out, g = _run(chunk, q, k, v, cu, pos, dout)
        assert torch.equal(out.view(torch.int16), full.view(torch.int16)), chunk
        for a, b in zip(g, gfull):
            assert torch.equal(a.view(torch.int16), b.view(torch.int16)), chunk


def test_per_chunk_autograd_would_change_dk(cpu):
    """Why chunked attention needs the canonical backward: letting autograd sum per-chunk dK
    partials (each chunk a separate attention call on a prefix of the keys) changes the bits."""
    q, k, v, cu, pos = _qkv((19,))
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    _, gfull = _run(None, q, k, v, cu, pos, dout)
    kk, vv = k.clone().requires_grad_(True), v.clone().requires_grad_(True)
    for s in range(0, 19, 7):
        e = min(s + 7, 19)
        o = ws1_ops.attention(q[s:e], kk[:e], vv[:e], torch.tensor([0, e - s]), torch.tensor([0, e]), pos[s:e])
        o.backward(dout[s:e])
    assert not torch.equal(kk.grad.view(torch.int16), gfull[1].view(torch.int16))
