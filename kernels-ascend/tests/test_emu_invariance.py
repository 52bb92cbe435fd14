"""Bitwise invariance of the emulated Ascend kernels under the cpu family's transforms (ws1_ops.invariance:
batch size M, a row alone, permuted, random positions among filler rows, left/right padding), under the
launch's blockDim, and — for attention — under packing, chunked prefill and decode. Parameter gradients:
the same canonical rows give the same bits whatever blockDim and whatever filler rows were dropped."""

import pytest
import torch
from emu_cases import EPS, E, attention_inputs, make, same_bits

from ws1_contract.manifest import load_manifest
from ws1_ops.invariance import check, summarize

PER_ROW = load_manifest().nodes_where(rows="token", required=True)
N = 70


@pytest.mark.parametrize("op", PER_ROW)
def test_forward_row_invariance(op):
    c = make(op, n=N)
    verdicts = check(lambda *a, row_keys: c.fwd(*a), c.rows, c.params)
    assert all(v.passed for v in verdicts), summarize(verdicts)


@pytest.mark.parametrize("op", ["rms_norm", "det_gemm", "lm_head", "logprob", "embedding", "swiglu"])
def test_forward_blockdim_invariance(op, blocks):
    c = make(op, n=N)
    ref = c.fwd(*c.rows, *c.params)
    for vec, cube in ((1, 1), (3, 7), (64, 33)):
        blocks(vec, cube)
        assert same_bits(c.fwd(*c.rows, *c.params), ref), f"{op}: blockDim vec={vec} cube={cube} changed bits"


def _dx_rows(fn, *rows):
    verdicts = check(lambda *a, row_keys: fn(*a), list(rows), [])
    assert all(v.passed for v in verdicts), summarize(verdicts)


def test_backward_row_invariance():
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(N, 4200, generator=g), torch.randn(4200, generator=g).bfloat16()
    dy = torch.randn(N, 4200, generator=g)
    _, rstd = E.rms_norm(x, w, EPS)
    _dx_rows(lambda d, xx, r: E.rms_norm_bwd(d, xx, w, r)[0], dy, x, rstd)
    a, b = torch.randn(N, 300, generator=g).bfloat16(), torch.randn(N, 300, generator=g).bfloat16()
    _dx_rows(lambda d, aa, bb: E.swiglu_bwd(d, aa, bb)[0], torch.randn(N, 300, generator=g), a, b)
    wg = torch.randn(150, 200, generator=g).bfloat16()
    _dx_rows(lambda d: E.gemm(d, wg.t(), True), torch.randn(N, 150, generator=g))
    lg = torch.randn(N, 5000, generator=g) * 3
    t = torch.randint(0, 5000, (N,), generator=g)
    _, lse = E.logprob(lg, t)
    _dx_rows(lambda gg, l, ls, tt: E.logprob_bwd(gg, l, ls, tt), torch.randn(N, generator=g), lg, lse, t)


def test_param_grads_canonical_rows(blocks):
    # the same canonical rows in the same order -> the same dW bits, whatever filler rows the batch held
    # (the caller drops them) and whatever blockDim the launch used
    g = torch.Generator().manual_seed(8)
    x, w = torch.randn(N, 4200, generator=g), torch.randn(4200, generator=g).bfloat16()
    dy = torch.randn(N, 4200, generator=g)
    _, rstd = E.rms_norm(x, w, EPS)
    ref_dw = E.rms_norm_bwd(dy, x, w, rstd)[1]
    xg, dg = torch.randn(N, 200, generator=g).bfloat16(), torch.randn(N, 150, generator=g)
    ref_gw = E.gemm(dg.t(), xg.t(), True)
    ids = torch.randint(0, 30, (N,), generator=g)
    de_dy = torch.randn(N, 260, generator=g)
    ref_de = E.embedding_bwd(de_dy, ids, 30)
    for vec, cube in ((1, 1), (5, 3), (64, 33)):
        blocks(vec, cube)
        assert same_bits(E.rms_norm_bwd(dy, x, w, rstd)[1], ref_dw)
        assert same_bits(E.gemm(dg.t(), xg.t(), True), ref_gw)
        assert same_bits(E.embedding_bwd(de_dy, ids, 30), ref_de)
    # embedding's sorted segments: a permuted batch, put back in canonical order by the caller, gives the
    # same dE; the rows of one id are summed in the given order (stable sort)
    perm = torch.randperm(N, generator=g)
    inv = torch.argsort(perm)
    assert same_bits(E.embedding_bwd(de_dy[perm][inv], ids[perm][inv], 30), ref_de)


def test_attention_packing_chunking_decode():
    lens = [5, 40, 1, 33]
    q, k, v, cu, qp = attention_inputs(lens)
    out, lse = E.attention(q, k, v, cu, cu, qp, 0.125)
    # each sequence alone (B = 1) == its rows of the packed launch
    for b, n in enumerate(lens):
        s, e = int(cu[b]), int(cu[b + 1])
        one = torch.tensor([0, n])
        o1, l1 = E.attention(q[s:e], k[s:e], v[s:e], one, one, qp[s:e], 0.125)
        assert same_bits(o1, out[s:e]) and same_bits(l1, lse[s:e]), f"sequence {b} alone differs from packed"
    # sequence 1 (40 tokens) as chunked prefill: queries [0, 17) then [17, 40), each against keys 0..chunk end
    s = int(cu[1])
    for a, e in ((0, 17), (17, 40)):
        o2, l2 = E.attention(q[s + a : s + e], k[s : s + e], v[s : s + e], torch.tensor([0, e - a]),
                             torch.tensor([0, e]), qp[s + a : s + e], 0.125)
        assert same_bits(o2, out[s + a : s + e]) and same_bits(l2, lse[s + a : s + e]), f"chunk [{a}, {e}) differs"
    # decode: the last token alone against its 40 cached keys
    o3, _ = E.attention(q[s + 39 : s + 40], k[s : s + 40], v[s : s + 40], torch.tensor([0, 1]), torch.tensor([0, 40]),
                        qp[s + 39 : s + 40], 0.125)
    assert same_bits(o3, out[s + 39 : s + 40])


def test_attention_backward_packing_and_blockdim(blocks):
    # dq per query and dk/dv per key: a sequence alone == its rows of the packed backward; blockDim changes nothing
    lens = [5, 40, 1, 33]
    q, k, v, cu, qp = attention_inputs(lens)
    out, lse = E.attention(q, k, v, cu, cu, qp, 0.125)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(10)).bfloat16()
    ref = E.attention_bwd(dout, q, k, v, out, lse, cu, cu, qp, 0.125)
    for b, n in enumerate(lens):
        s, e = int(cu[b]), int(cu[b + 1])
        one = torch.tensor([0, n])
        got = E.attention_bwd(dout[s:e], q[s:e], k[s:e], v[s:e], out[s:e], lse[s:e], one, one, qp[s:e], 0.125)
        for name, a, r in zip(("dq", "dk", "dv"), got, ref):
            assert same_bits(a, r[s:e]), f"sequence {b} alone: {name} differs from packed"
    blocks(3, 0)
    for a, r in zip(E.attention_bwd(dout, q, k, v, out, lse, cu, cu, qp, 0.125), ref):
        assert same_bits(a, r)


def test_attention_blockdim_invariance(blocks):
    q, k, v, cu, qp = attention_inputs([3, 35])
    ref = E.attention(q, k, v, cu, cu, qp, 0.125)[0]
    blocks(7, 0)
    assert same_bits(E.attention(q, k, v, cu, cu, qp, 0.125)[0], ref)
