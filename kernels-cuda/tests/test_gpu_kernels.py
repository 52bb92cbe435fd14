"""The ws1_cuda kernels on a GPU: accuracy against FP32/FP64 references and bitwise invariance (a row alone
vs the same row among others at another position; prefill vs chunked prefill vs decode; silu == swiglu(x, 1);
logprob == batch_invariant_logp at the target; the vectorized and element-wise GEMM loaders).

Skipped, with the reason, on a host without a CUDA device or without the built ws1_kernels_cuda (every CPU
host): nothing here can pass without executing the kernels. ci/gpu_check.sh runs it on the GPU host
(small shapes: well under a minute)."""
import json

import pytest
import torch

try:
    import ws1_kernels_cuda  # noqa: F401
    _WHY = None if torch.cuda.is_available() else "no CUDA device on this host"
except ImportError as exc:
    _WHY = f"ws1_kernels_cuda is not built here ({str(exc).splitlines()[0][:120]})"

pytestmark = pytest.mark.skipif(_WHY is not None, reason=str(_WHY))
BF, F32 = torch.bfloat16, torch.float32
DEV = "cuda"


def K():
    return torch.ops.ws1_cuda


def bits(t):
    t = t.detach().contiguous()
    return t.view(torch.int16) if t.dtype == BF else t.view(torch.int32) if t.dtype == F32 else t


def same(a, b, what=""):
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    diff = int((bits(a) != bits(b)).sum())
    assert diff == 0, f"{what}: {diff} elements differ bitwise"


def gen(seed=0):
    return torch.Generator(device="cpu").manual_seed(seed)


def rnd(*shape, seed=0, scale=1.0, dtype=BF):
    return (torch.randn(*shape, generator=gen(seed)) * scale).to(dtype).to(DEV)


def rows_alone_vs_batched(fn, inputs, sizes=(1, 2, 7, 59, 64, 65, 130), seed=0):
    """Row i computed alone equals row i inside batches of M rows at random positions (bitwise)."""
    n = inputs[0].shape[0]
    alone = [fn(*(x[i:i + 1] for x in inputs)) for i in range(n)]
    g = gen(seed)
    for M in sizes:
        idx = torch.randint(0, n, (M,), generator=g)
        out = fn(*(x[idx.to(x.device)] for x in inputs))
        outs = out if isinstance(out, tuple) else (out,)
        for r, i in enumerate(idx.tolist()):
            ref = alone[i] if isinstance(alone[i], tuple) else (alone[i],)
            for o, a in zip(outs, ref):
                same(o[r:r + 1], a, f"M={M} row {r} (source row {i})")


def test_det_gemm_rows_are_invariant_and_accurate():
    x, w = rnd(70, 4096, seed=1, scale=0.5), rnd(384, 4096, seed=2, scale=0.02)
    rows_alone_vs_batched(lambda a: K().det_gemm(a, w), [x])
    ref = x.double() @ w.double().t()
    torch.testing.assert_close(K().lm_head(x, w).double(), ref, atol=1e-3, rtol=1e-3)
    # det_gemm is lm_head's FP32 accumulator rounded once (RNE)
    same(K().det_gemm(x, w), K().lm_head(x, w).to(BF), "det_gemm vs bf16(lm_head)")


def test_gemm_edges_and_the_elementwise_loader_give_the_same_bits():
    # M, N, K not multiples of the tile; K % 8 != 0 takes the element-wise loader
    for M, N, Kd in ((1, 1, 1), (3, 130, 37), (65, 129, 100), (64, 128, 32)):
        x, w = rnd(M, Kd, seed=M, scale=0.5), rnd(N, Kd, seed=N, scale=0.1)
        torch.testing.assert_close(K().lm_head(x, w).double(), x.double() @ w.double().t(), atol=1e-4, rtol=1e-4)
    # the same data through a view whose row stride is odd (no 16-byte cp.async): bitwise the same
    x, w = rnd(33, 256, seed=3), rnd(200, 256, seed=4, scale=0.1)
    xb = torch.zeros(33, 257, dtype=BF, device=DEV)
    xb[:, 1:] = x
    assert xb[:, 1:].stride() == (257, 1)
    same(K().det_gemm(xb[:, 1:], w), K().det_gemm(x, w), "vectorized vs element-wise loader")


def test_fp32_gemm_backward_shapes_and_accuracy():
    dy, x, w = rnd(37, 300, seed=5, dtype=F32), rnd(37, 260, seed=6), rnd(300, 260, seed=7, scale=0.05)
    dx = K().gemm(dy, w.t(), True)
    torch.testing.assert_close(dx.double(), dy.double() @ w.double(), atol=1e-4, rtol=1e-4)
    perm = torch.randperm(37, generator=gen(8)).to(DEV)
    dw = K().gemm(dy.index_select(0, perm).t(), x.index_select(0, perm).t(), True)
    torch.testing.assert_close(dw.double(), dy.double().t() @ x.double(), atol=1e-4, rtol=1e-4)
    rows_alone_vs_batched(lambda a: K().gemm(a, w.t(), True), [dy], sizes=(1, 5, 64, 65))


@pytest.mark.parametrize("op, shape, wdim", [("rms_norm", (70, 4096), 4096), ("qk_norm", (20, 32, 128), 128)])
def test_norms(op, shape, wdim):
    x, w = rnd(*shape, seed=9, dtype=F32), rnd(wdim, seed=10)
    f = getattr(K(), op)
    rows_alone_vs_batched(lambda a: f(a.contiguous(), w, 1e-6), [x])
    y, rstd = f(x, w, 1e-6)
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    torch.testing.assert_close(y.double(), ref, atol=2e-2, rtol=1e-2)
    dy = rnd(*shape, seed=11, dtype=F32)
    dx, dw = getattr(K(), op + "_bwd")(dy, x, w, rstd)
    xr = x.double().requires_grad_(True)
    (xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()).backward(dy.double())
    torch.testing.assert_close(dx.double(), xr.grad, atol=1e-3, rtol=1e-3)
    ref_dw = (dy.double() * xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)).reshape(-1, wdim).sum(0)
    torch.testing.assert_close(dw.double(), ref_dw, atol=1e-3, rtol=1e-3)


def test_silu_is_swiglu_with_up_one_bitwise():
    g, u = rnd(70, 1000, seed=12, scale=3), rnd(70, 1000, seed=13)
    same(K().silu(g), K().swiglu(g, torch.ones_like(g)), "silu vs swiglu(x, 1)")
    dy = rnd(70, 1000, seed=14, dtype=F32)
    same(K().silu_bwd(dy, g), K().swiglu_bwd(dy, g, torch.ones_like(g))[0], "silu_bwd vs swiglu_bwd dgate")
    gd, ud = g.double(), u.double()
    torch.testing.assert_close(K().swiglu(g, u).double(), torch.nn.functional.silu(gd) * ud, atol=2e-2, rtol=1e-2)


def test_logprob_equals_batch_invariant_logp_at_the_target():
    lg = rnd(9, 151936, seed=15, scale=3, dtype=F32)
    t = torch.randint(0, 151936, (9,), generator=gen(16)).to(DEV)
    lp, lse = K().logprob(lg, t)
    full, lse2 = K().batch_invariant_logp(lg)
    same(lse, lse2, "lse")
    same(lp, full.gather(1, t[:, None]).squeeze(1), "logprob vs batch_invariant_logp[t]")
    torch.testing.assert_close(full.double(), torch.log_softmax(lg.double(), -1), atol=1e-4, rtol=1e-5)
    rows_alone_vs_batched(lambda a: K().batch_invariant_logp(a), [lg], sizes=(1, 4, 9))


def test_embedding_and_sorted_segment_backward():
    w = rnd(50, 64, seed=17)
    ids = torch.tensor([3, 7, 3, 0, 49, 7, 3], device=DEV)
    same(K().embedding(ids, w), w[ids], "gather")
    dy = rnd(7, 64, seed=18, dtype=F32)
    dE = K().embedding_bwd(dy, ids, 50)
    ref = torch.zeros(50, 64, dtype=F32, device=DEV)
    for r in range(7):  # rows in the given order, plain FP32 adds from +0
        ref[ids[r]] = ref[ids[r]] + dy[r]
    same(dE, ref, "dE by sorted segments vs serial adds")


def test_rope_inverse_undoes_forward():
    x = rnd(11, 8, 128, seed=19, dtype=F32)
    pos = torch.arange(11, device=DEV) * 997
    y = K().rope(x, pos, 1e6, False)
    torch.testing.assert_close(K().rope(y, pos, 1e6, True), x, atol=1e-5, rtol=1e-5)
    rows_alone_vs_batched(lambda a, p: K().rope(a.contiguous(), p.contiguous(), 1e6, False), [x, pos], sizes=(1, 3, 11))


def _attn(q, k, v, lens_q, lens_k, pos, scale):
    cu = lambda ls: torch.tensor([0, *ls], device=DEV).cumsum(0)  # noqa: E731
    return K().attention(q, k, v, cu(lens_q), cu(lens_k), pos, scale)


def test_attention_prefill_chunked_and_decode_are_bitwise_equal():
    Hq, Hkv, D, S = 32, 8, 128, 70
    q, k, v = rnd(S, Hq, D, seed=20), rnd(S, Hkv, D, seed=21), rnd(S, Hkv, D, seed=22)
    scale = D ** -0.5
    pos = torch.arange(S, device=DEV)
    out, lse = _attn(q, k, v, [S], [S], pos, scale)
    for c0, c1 in ((0, 7), (7, 40), (40, 70), (69, 70)):  # chunks (the last one a decode step)
        o, ls = _attn(q[c0:c1], k[:c1], v[:c1], [c1 - c0], [c1], pos[c0:c1], scale)
        same(o, out[c0:c1], f"chunk {c0}:{c1}")
        same(ls, lse[c0:c1], f"lse chunk {c0}:{c1}")
    # packed with another sequence in front: the same bits
    q2, k2, v2 = rnd(13, Hq, D, seed=23), rnd(13, Hkv, D, seed=24), rnd(13, Hkv, D, seed=25)
    o, _ = _attn(torch.cat([q2, q]), torch.cat([k2, k]), torch.cat([v2, v]), [13, S], [13, S],
                 torch.cat([torch.arange(13, device=DEV), pos]), scale)
    same(o[13:], out, "packed after another sequence")
    # accuracy vs SDPA in FP64 (causal, GQA)
    qd, kd, vd = (t.double().transpose(0, 1)[None] for t in (q, k, v))
    kd, vd = kd.repeat_interleave(Hq // Hkv, 1), vd.repeat_interleave(Hq // Hkv, 1)
    ref = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True, scale=scale)[0].transpose(0, 1)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


def test_attention_backward_against_autograd():
    Hq, Hkv, D, S = 4, 2, 64, 37
    q, k, v = rnd(S, Hq, D, seed=26), rnd(S, Hkv, D, seed=27), rnd(S, Hkv, D, seed=28)
    scale = D ** -0.5
    pos = torch.arange(S, device=DEV)
    cu = torch.tensor([0, S], device=DEV)
    out, lse = K().attention(q, k, v, cu, cu, pos, scale)
    dout = rnd(S, Hq, D, seed=29, dtype=F32)
    dq, dk, dv = K().attention_bwd(dout, q, k, v, out, lse, cu, cu, pos, scale)
    qd, kd, vd = (t.double().requires_grad_(True) for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        qd.transpose(0, 1)[None], kd.transpose(0, 1)[None].repeat_interleave(Hq // Hkv, 1),
        vd.transpose(0, 1)[None].repeat_interleave(Hq // Hkv, 1), is_causal=True, scale=scale)[0].transpose(0, 1)
    ref.backward(dout.double())
    for name, a, b in (("dq", dq, qd.grad), ("dk", dk, kd.grad), ("dv", dv, vd.grad)):
        torch.testing.assert_close(a.double(), b, atol=3e-2, rtol=3e-2, msg=lambda m, name=name: f"{name}: {m}")


def test_calls_count_what_ran():
    before = json.loads(K().calls())
    K().silu(rnd(4, 8))
    after = json.loads(K().calls())
    arch = "sm_{}{}".format(*torch.cuda.get_device_capability())
    assert after["ws1_cuda::silu"][arch] == before.get("ws1_cuda::silu", {}).get(arch, 0) + 1
    with pytest.raises(RuntimeError, match="K mismatch"):  # an entry point that raised is not counted
        K().det_gemm(torch.zeros(2, 8, dtype=BF, device=DEV), torch.zeros(4, 9, dtype=BF, device=DEV))
    assert json.loads(K().calls()).get("ws1_cuda::det_gemm") == after.get("ws1_cuda::det_gemm")


def test_attention_tile_loaders_give_the_same_bits():
    """K/V 16-byte aligned take the 16-byte tile loads; the same data 2 bytes off alignment (contiguous) takes
    the 16-bit loads: the outputs must be bitwise the same."""
    Hq, Hkv, D, S = 8, 2, 128, 45
    q, k, v = rnd(S, Hq, D, seed=30), rnd(S, Hkv, D, seed=31), rnd(S, Hkv, D, seed=32)

    def off(t):
        buf = torch.empty(t.numel() + 1, dtype=BF, device=DEV)
        view = buf[1:].view(t.shape)
        view.copy_(t)
        assert view.is_contiguous() and view.data_ptr() % 16 != 0
        return view

    pos = torch.arange(S, device=DEV)
    a = _attn(q, k, v, [S], [S], pos, D ** -0.5)
    b = _attn(q, off(k), off(v), [S], [S], pos, D ** -0.5)
    same(a[0], b[0], "attention out, 16-byte vs 16-bit loads")
    same(a[1], b[1], "attention lse, 16-byte vs 16-bit loads")
