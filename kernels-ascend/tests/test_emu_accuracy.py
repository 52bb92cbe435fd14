"""The emulated Ascend kernels against the FP32 references (ws1_ops.reference), forward and backward, with the
contract's accuracy judgments (no private tolerance), and the cross-node identities."""

import pytest
import torch
from emu_cases import BF16, EPS, F32, E, attention_inputs, make, same_bits

from ws1_contract import within_tolerance
from ws1_contract.compare import accuracy
from ws1_contract.manifest import load_manifest
from ws1_ops import reference

PER_ROW = load_manifest().nodes_where(rows="token", required=True)


@pytest.mark.parametrize("op", PER_ROW)
def test_forward_accuracy(op, contract):
    c = make(op, n=70)
    got = c.fwd(*c.rows, *c.params)
    th = contract.resolve("forward_accuracy", op, "bfloat16")
    r = within_tolerance(got, c.ref(*c.rows, *c.params), th.atol, th.rtol, op)
    assert r.passed, r.detail


# (Hq, Hkv, D): GQA groups of 2, 4 and 5 (one not dividing the 64-row block), MHA, head_dim 64, 128 and 40 (zero-padded
# to the Mmad's 64-wide d chunks); the sequences cross the 128-key tile (150 keys)
ATTN_SHAPES = [(4, 2, 64), (8, 2, 128), (5, 1, 40), (2, 2, 16)]
ATTN_LENS = [5, 40, 1, 33, 150]


@pytest.mark.parametrize("hq, hkv, d", ATTN_SHAPES)
def test_attention_forward_accuracy(contract, hq, hkv, d):
    q, k, v, cu, qp = attention_inputs(ATTN_LENS, Hq=hq, Hkv=hkv, D=d)
    out, lse = E.attention(q, k, v, cu, cu, qp, d**-0.5)
    th = contract.resolve("forward_accuracy", "attention", "bfloat16")
    r = within_tolerance(out, reference.attention(q, k, v, cu, cu, qp, d**-0.5), th.atol, th.rtol, "attention")
    assert r.passed, r.detail


def test_attention_refuses_fp32_and_bad_shapes():
    # the Cube kernels take BF16 q, k, v (kernels-cuda's contract too); FP32 or a head_dim past 128 is one line
    q, k, v, cu, qp = attention_inputs([5, 40])
    with pytest.raises(RuntimeError) as e:
        E.attention(q.float(), k.float(), v.float(), cu, cu, qp, 0.125)
    assert "q, k, v must be bfloat16" in str(e.value).splitlines()[0]
    big = torch.zeros(3, 2, 136, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="head_dim 136 outside"):
        E.attention(big, big, big, torch.tensor([0, 3]), torch.tensor([0, 3]), torch.arange(3), 0.1)


@pytest.mark.parametrize("hq, hkv, d", ATTN_SHAPES[:3])
def test_attention_backward(contract, hq, hkv, d):
    q, k, v, cu, qp = attention_inputs(ATTN_LENS, Hq=hq, Hkv=hkv, D=d)
    out, lse = E.attention(q, k, v, cu, cu, qp, d**-0.5)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).bfloat16()
    dq, dk, dv = E.attention_bwd(dout, q, k, v, out, lse, cu, cu, qp, d**-0.5)
    refs = _grad_ref(lambda a, b, c: reference.attention(a, b, c, cu, cu, qp, d**-0.5), q, k, v, dy=dout)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        _check(contract, "attention", got, ref, f"attention {name}")
    # FP32 dO is rounded to BF16 for the Mmads (the only rounding of dO): the same bits as the BF16 dO it rounds to
    got32 = E.attention_bwd(dout.float(), q, k, v, out, lse, cu, cu, qp, d**-0.5)
    for a, r in zip(got32, (dq, dk, dv)):
        assert same_bits(a, r)


def _grad_ref(fn, *inputs, dy):
    xs = [t.detach().float().requires_grad_() for t in inputs]
    fn(*xs).backward(dy.float())
    return [x.grad for x in xs]


def _check(contract, op, got, ref, name):
    r = accuracy(got, ref, contract.resolve("gradient_accuracy", op, "bfloat16"), name)
    assert r.passed, r.detail


def test_rms_norm_and_qk_norm_backward(contract):
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(40, 4200, generator=g) * 2, (1 + 0.2 * torch.randn(4200, generator=g)).bfloat16()
    dy = torch.randn(40, 4200, generator=g)
    _, rstd = E.rms_norm(x, w, EPS)
    dx, dw = E.rms_norm_bwd(dy, x, w, rstd)
    rx, rw = _grad_ref(lambda a, b: reference.rms_norm(a, b, EPS), x, w, dy=dy)
    _check(contract, "rms_norm", dx, rx, "rms_norm dx")
    _check(contract, "rms_norm", dw, rw, "rms_norm dw")
    xq, wq = torch.randn(9, 4, 128, generator=g).bfloat16(), torch.randn(128, generator=g).bfloat16()
    dq = torch.randn(9, 4, 128, generator=g)
    _, rq = E.qk_norm(xq, wq, EPS)
    dxq, dwq = E.qk_norm_bwd(dq, xq, wq, rq)
    rxq, rwq = _grad_ref(lambda a, b: reference.qk_norm(a, b, EPS), xq, wq, dy=dq)
    _check(contract, "qk_norm", dxq, rxq, "qk_norm dx")
    _check(contract, "qk_norm", dwq, rwq, "qk_norm dw")


def test_gemm_backward_fp32_vjp(contract):
    # the row-fold VJP on the FP32-input Cube GEMM: dx = dy · W, dW = dyᵀ · x (Bᵀ passed, as the backend does)
    c = make("det_gemm", n=70)
    x, w = c.rows[0], c.params[0]
    dy = torch.randn(70, 150, generator=torch.Generator().manual_seed(2))
    dx = E.gemm(dy, w.t(), True)
    dw = E.gemm(dy.t(), x.t(), True)
    rx, rw = _grad_ref(reference.det_gemm, x, w, dy=dy)
    _check(contract, "det_gemm", dx, rx, "det_gemm dx")
    _check(contract, "det_gemm", dw, rw, "det_gemm dw")


def test_gemm_fp32_over_65536_rows_of_k(contract):
    # dW = dyᵀ · x over 65600 tokens: K >= 65536 does not fit Nd2NzParams' 16-bit srcDValue; the host passes K
    # panels of 65472 columns (cube_gemm.h). It raised "K must be < 65536" before. ~1 s on the emulator.
    g = torch.Generator().manual_seed(12)
    dy, x = torch.randn(65600, 3, generator=g), torch.randn(65600, 5, generator=g)
    dw = E.gemm(dy.t(), x.t(), True)
    _check(contract, "det_gemm", dw, (dy.double().t() @ x.double()).float(), "det_gemm dW, K = 65600")


def test_k_panels_change_no_bit():
    # the same baseK chunks in the same order whatever the panel width: panels of 64 or 192 columns give the bits
    # of the unpanelled layout (K = 200 < 65472), for the FP32 GEMM and both bf16 GEMMs
    import ws1_kernels_ascend_emu as emu

    g = torch.Generator().manual_seed(13)
    a, b = torch.randn(70, 200, generator=g), torch.randn(150, 200, generator=g)
    x, w = a.bfloat16(), (b * 0.07).bfloat16()
    calls = [lambda: E.gemm(a, b, True), lambda: E.det_gemm(x, w), lambda: E.lm_head(x, w)]
    refs = [f() for f in calls]
    try:
        for kp in (64, 192):
            emu.set_gemm_k_panel(kp)
            for f, r in zip(calls, refs):
                assert same_bits(f(), r), f"K panel {kp} changed bits"
    finally:
        emu.set_gemm_k_panel(0)


def test_activation_rope_embedding_backward(contract):
    g = torch.Generator().manual_seed(4)
    a, b = (torch.randn(8, 4200, generator=g) * 3).bfloat16(), torch.randn(8, 4200, generator=g).bfloat16()
    dy = torch.randn(8, 4200, generator=g)
    dg, du = E.swiglu_bwd(dy, a, b)
    ra, rb = _grad_ref(reference.swiglu, a, b, dy=dy)
    _check(contract, "swiglu", dg, ra, "swiglu dgate")
    _check(contract, "swiglu", du, rb, "swiglu dup")
    _check(contract, "silu", E.silu_bwd(dy, a), _grad_ref(reference.silu, a, dy=dy)[0], "silu dx")
    x, pos = torch.randn(6, 2, 128, generator=g).bfloat16(), torch.randint(0, 5000, (6,), generator=g)
    dr = torch.randn(6, 2, 128, generator=g)
    rr = _grad_ref(lambda t: reference.rope(t, pos, 1e6), x, dy=dr)[0]
    _check(contract, "rope", E.rope(dr, pos, 1e6, True), rr, "rope dx (inverse rotation)")
    ids = torch.tensor([4, 1, 4, 0, 4, 2])
    de = E.embedding_bwd(dr.reshape(6, -1), ids, 7)
    assert torch.equal(de, torch.zeros(7, 256).index_add_(0, ids, dr.reshape(6, -1)))  # 3 fp32 adds from +0: exact
    # the host's stable order: id 4's rows summed as ((+0 + row0) + row2) + row4, in that order, bit for bit
    big = torch.tensor([[1e8], [1.0], [-1e8], [2.0], [1.0], [3.0]]).expand(6, 8).contiguous()
    got = E.embedding_bwd(big, ids, 7)[4]
    want = ((torch.tensor(0.0) + big[0, 0]) + big[2, 0]) + big[4, 0]
    assert torch.equal(got, want.expand(8)) and float(want) == 1.0


def test_logprob_backward(contract):
    c = make("logprob", n=6)
    lg, t = c.rows
    gv = torch.randn(6, generator=torch.Generator().manual_seed(5))
    _, lse = E.logprob(lg, t)
    d = E.logprob_bwd(gv, lg, lse, t)
    _check(contract, "logprob", d, _grad_ref(lambda z: reference.logprob(z, t), lg, dy=gv)[0], "logprob dlogits")
    logp, _ = E.batch_invariant_logp(lg)
    gg = torch.randn(6, 5000, generator=torch.Generator().manual_seed(6))
    d2 = E.batch_invariant_logp_bwd(gg, logp)
    _check(
        contract, "batch_invariant_logp", d2, _grad_ref(reference.batch_invariant_logp, lg, dy=gg)[0], "bilp dlogits"
    )


def test_silu_equals_swiglu_with_ones_bitwise():
    x = (torch.randn(5, 4200) * 4).bfloat16()
    assert same_bits(E.silu(x), E.swiglu(x, torch.ones_like(x)))
    dy = torch.randn(5, 4200)
    assert same_bits(E.silu_bwd(dy, x), E.swiglu_bwd(dy, x, torch.ones_like(x))[0])


def test_logprob_equals_log_softmax_at_target_bitwise():
    c = make("logprob", n=9)
    lg, t = c.rows
    assert same_bits(E.logprob(lg, t)[0], E.batch_invariant_logp(lg)[0].gather(1, t[:, None]).squeeze(1))


def test_fp32_inputs_accepted_bf16_out():
    x = torch.randn(3, 300)
    y, rstd = E.rms_norm(x, torch.ones(300), EPS)
    assert y.dtype == BF16 and rstd.dtype == F32
