"""Bitwise invariance of the emulated Ascend kernels under the cpu family's transforms (ws1_ops.invariance:
batch size M, a row alone, permuted, random positions among filler rows, left/right padding), under the
launch's blockDim — the SoC's core counts (AIC / AIV: 24 / 48 on a 910B2, 20 / 40 on others; here several, down to
one core) — and, for attention, under packing, chunked prefill and decode, forward and backward. Parameter
gradients: the same canonical rows give the same bits whatever blockDim and whatever filler rows were dropped."""

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


# (AIC, AIV) core counts: one core each, a 910B2's 24 / 48, odd counts, and more blocks than work items
SOCS = ((1, 1), (24, 48), (7, 3), (33, 64))


@pytest.mark.parametrize("op", ["rms_norm", "det_gemm", "lm_head", "logprob", "embedding", "swiglu"])
def test_forward_blockdim_invariance(op, soc):
    c = make(op, n=N)
    ref = c.fwd(*c.rows, *c.params)
    for aic, aiv in SOCS:
        soc(aic, aiv)
        assert same_bits(c.fwd(*c.rows, *c.params), ref), f"{op}: {aic} AIC / {aiv} AIV changed bits"


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


def test_param_grads_canonical_rows(soc):
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
    for aic, aiv in SOCS:
        soc(aic, aiv)
        assert same_bits(E.rms_norm_bwd(dy, x, w, rstd)[1], ref_dw)
        assert same_bits(E.gemm(dg.t(), xg.t(), True), ref_gw)
        assert same_bits(E.embedding_bwd(de_dy, ids, 30), ref_de)
    # embedding's sorted segments: a permuted batch, put back in canonical order by the caller, gives the
    # same dE; the rows of one id are summed in the given order (stable sort)
    perm = torch.randperm(N, generator=g)
    inv = torch.argsort(perm)
    assert same_bits(E.embedding_bwd(de_dy[perm][inv], ids[perm][inv], 30), ref_de)


# one sequence longer than a 128-key tile (keys 0..149: two tiles), short ones, a single-token one; Hq 4, Hkv 2
LENS = [5, 40, 1, 33, 150]
SCALE = 0.125


def _cu(*lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])


def test_attention_packing_chunking_decode():
    q, k, v, cu, qp = attention_inputs(LENS)
    out, lse = E.attention(q, k, v, cu, cu, qp, SCALE)
    # each sequence alone (B = 1) == its rows of the packed launch
    for b, n in enumerate(LENS):
        s, e = int(cu[b]), int(cu[b + 1])
        o1, l1 = E.attention(q[s:e], k[s:e], v[s:e], _cu(n), _cu(n), qp[s:e], SCALE)
        assert same_bits(o1, out[s:e]) and same_bits(l1, lse[s:e]), f"sequence {b} alone differs from packed"
    # the 150-token sequence as chunked prefill, chunk boundaries off the 128-key tile: queries [0, 70), [70, 131),
    # [131, 150), each against keys 0..the chunk's end
    s = int(cu[4])
    for a, e in ((0, 70), (70, 131), (131, 150)):
        o2, l2 = E.attention(q[s + a : s + e], k[s : s + e], v[s : s + e], _cu(e - a), _cu(e), qp[s + a : s + e], SCALE)
        assert same_bits(o2, out[s + a : s + e]) and same_bits(l2, lse[s + a : s + e]), f"chunk [{a}, {e}) differs"
    # decode: single tokens alone against their cached keys (in the first tile, at its last key, in the second tile)
    for p in (39, 127, 128, 149):
        o3, l3 = E.attention(
            q[s + p : s + p + 1], k[s : s + p + 1], v[s : s + p + 1], _cu(1), _cu(p + 1), qp[s + p : s + p + 1], SCALE
        )
        assert same_bits(o3, out[s + p : s + p + 1]) and same_bits(l3, lse[s + p : s + p + 1]), f"decode at {p}"
    # batched decode: the last tokens of three sequences in one call == their rows of the prefill
    rows = [int(cu[1]) - 1, int(cu[3]) - 1, int(cu[5]) - 1]
    ks = [torch.arange(int(cu[b]), int(cu[b + 1])) for b in (0, 2, 4)]
    kk = torch.cat(ks)
    o4, l4 = E.attention(q[rows], k[kk], v[kk], _cu(1, 1, 1), _cu(*(len(x) for x in ks)), qp[rows], SCALE)
    assert same_bits(o4, out[rows]) and same_bits(l4, lse[rows])


def test_attention_random_query_subsets_and_neighbours():
    # a query's bits do not depend on which other queries of its sequence share its 64-row block
    q, k, v, cu, qp = attention_inputs([150], seed=3)
    out, lse = E.attention(q, k, v, cu, cu, qp, SCALE)
    g = torch.Generator().manual_seed(4)
    for _ in range(2):
        pick = torch.randperm(150, generator=g)[:23].sort().values
        o, l = E.attention(q[pick], k, v, _cu(23), _cu(150), qp[pick], SCALE)
        assert same_bits(o, out[pick]) and same_bits(l, lse[pick])


def test_attention_backward_packing_and_blockdim(soc):
    # dq per query and dk/dv per key: a sequence alone == its rows of the packed backward; blockDim changes nothing
    q, k, v, cu, qp = attention_inputs(LENS)
    out, lse = E.attention(q, k, v, cu, cu, qp, SCALE)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(10)).bfloat16()
    ref = E.attention_bwd(dout, q, k, v, out, lse, cu, cu, qp, SCALE)
    for b, n in enumerate(LENS):
        s, e = int(cu[b]), int(cu[b + 1])
        got = E.attention_bwd(dout[s:e], q[s:e], k[s:e], v[s:e], out[s:e], lse[s:e], _cu(n), _cu(n), qp[s:e], SCALE)
        for name, a, r in zip(("dq", "dk", "dv"), got, ref):
            assert same_bits(a, r[s:e]), f"sequence {b} alone: {name} differs from packed"
    for aic, aiv in ((1, 1), (24, 48), (7, 3)):
        soc(aic, aiv)
        for name, a, r in zip(("dq", "dk", "dv"), E.attention_bwd(dout, q, k, v, out, lse, cu, cu, qp, SCALE), ref):
            assert same_bits(a, r), f"{aic} AIC / {aiv} AIV: {name} changed bits"


def test_attention_backward_decode_step_and_pad_rows():
    # dK/dV rows are aligned to absolute positions: a decode step's backward (one query at position p, its keys
    # 0..p) == the prefill's backward with dO only on that row (keys after p: +0); pad rows (dO = 0) change nothing
    q, k, v, cu, qp = attention_inputs([150], seed=5)
    out, lse = E.attention(q, k, v, cu, cu, qp, SCALE)
    for p in (0, 100, 149):
        dout = torch.zeros(out.shape, dtype=torch.bfloat16)
        dout[p] = torch.randn(out.shape[1:], generator=torch.Generator().manual_seed(p)).bfloat16()
        full = E.attention_bwd(dout, q, k, v, out, lse, cu, cu, qp, SCALE)
        step = E.attention_bwd(
            dout[p : p + 1],
            q[p : p + 1],
            k[: p + 1],
            v[: p + 1],
            out[p : p + 1],
            lse[p : p + 1],
            _cu(1),
            _cu(p + 1),
            qp[p : p + 1],
            SCALE,
        )
        assert same_bits(step[0], full[0][p : p + 1]), f"decode-step dq at {p}"
        for name, a, r in (("dk", step[1], full[1]), ("dv", step[2], full[2])):
            assert same_bits(a, r[: p + 1]), f"decode-step {name} at {p}"
            assert torch.equal(r[p + 1 :].view(torch.int32), torch.zeros_like(r[p + 1 :]).view(torch.int32))
    # two queries at one position of a sequence would share a row slot: refused with one line
    with pytest.raises(RuntimeError, match="two queries at position 3"):
        E.attention_bwd(out[:2], q[:2], k[:4], v[:4], out[:2], lse[:2], _cu(2), _cu(4), torch.tensor([3, 3]), SCALE)


def test_attention_blockdim_invariance(soc):
    q, k, v, cu, qp = attention_inputs([3, 35, 150])
    ref = E.attention(q, k, v, cu, cu, qp, SCALE)
    for aic, aiv in ((1, 1), (24, 48), (7, 3)):
        soc(aic, aiv)
        got = E.attention(q, k, v, cu, cu, qp, SCALE)
        assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1]), f"{aic} AIC / {aiv} AIV changed bits"
