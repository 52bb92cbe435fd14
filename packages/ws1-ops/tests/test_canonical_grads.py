"""canonical_grads(): a parameter's gradient over rows split across calls (the B1 cell: four
B=1 forwards, losses summed, one backward) equals the single-call gradient bitwise."""

import pytest
import torch
from cases import make

import ws1_ops
from ws1_contract import bitwise


def _split_vs_whole(op, splits, scoped=True, n=60):
    c = make(op, n=n)
    keys = torch.randperm(n, generator=torch.Generator().manual_seed(2))  # logical keys, any order
    dy = None

    def grads(parts):
        nonlocal dy
        ps = [p.detach().clone().requires_grad_() for p in c.params]
        total = 0
        for lo, hi in parts:
            out = c.call(*[r[lo:hi] for r in c.rows], *ps, row_keys=keys[lo:hi])
            if dy is None:
                dy = torch.randn((n, *out.shape[1:]), generator=torch.Generator().manual_seed(4)).to(out.dtype)
            total = total + (out.float() * dy[lo:hi].float()).sum()
        if scoped:
            with ws1_ops.canonical_grads():
                total.backward()
        else:
            total.backward()
        return [p.grad for p in ps]

    whole = grads([(0, n)])
    split = grads(splits)
    return [bitwise(a, b, f"{op} d{name}") for a, b, name in zip(split, whole, c.names[len(c.rows) :])]


@pytest.mark.parametrize("op", ["det_gemm", "lm_head", "rms_norm", "qk_norm", "embedding"])
def test_split_calls_equal_one_call(op, cpu):
    res = _split_vs_whole(op, [(0, 11), (11, 27), (27, 40), (40, 60)])
    assert res and all(r.passed for r in res), [r.detail for r in res]


def test_negative_control_without_the_scope_split_calls_differ(cpu):
    """Without canonical_grads(), autograd adds the per-call partial dW's: the bits change."""
    res = _split_vs_whole("det_gemm", [(0, 11), (11, 27), (27, 40), (40, 60)], scoped=False)
    assert not res[0].passed


def test_missing_row_keys_is_an_error(cpu):
    x = torch.randn(3, 8).bfloat16()
    w = torch.randn(4, 8).bfloat16().requires_grad_()
    with pytest.raises(ValueError, match="needs row_keys"):
        with ws1_ops.canonical_grads():
            ws1_ops.det_gemm(x, w).float().sum().backward()


PARAM_CALLS = {  # op -> (inputs, weight, call(x, w, row_keys))
    "det_gemm": lambda r: (r(3, 8), r(4, 8), lambda x, w, k: ws1_ops.det_gemm(x, w, k)),
    "lm_head": lambda r: (r(3, 8), r(5, 8), lambda x, w, k: ws1_ops.lm_head(x, w, k)),
    "rms_norm": lambda r: (r(3, 8, dtype=torch.float32), r(8), lambda x, w, k: ws1_ops.rms_norm(x, w, 1e-6, k)),
    "qk_norm": lambda r: (r(3, 2, 8), r(8), lambda x, w, k: ws1_ops.qk_norm(x, w, 1e-6, k)),
    "embedding": lambda r: (torch.tensor([1, 0, 1]), r(4, 8), lambda x, w, k: ws1_ops.embedding(x, w, k)),
}


@pytest.mark.parametrize("op", sorted(PARAM_CALLS))
def test_parameter_gradient_without_row_keys_is_an_error(cpu, op):
    """Outside canonical_grads(), no row_keys used to mean 'rows as given' — batch order, the one
    order that changes with the layout. Now it is an OpInputError naming the op; a frozen weight
    needs no keys, and with keys the gradient is formed."""
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(dtype)

    x, w, call = PARAM_CALLS[op](r)
    with pytest.raises(ws1_ops.OpInputError, match=f"^{op}: a parameter gradient needs row_keys"):
        call(x, w.clone().requires_grad_(), None).float().sum().backward()
    if x.is_floating_point():  # a frozen weight: the input gradient needs no order
        xx = x.clone().requires_grad_()
        call(xx, w, None).float().sum().backward()
        assert xx.grad is not None
    ww = w.clone().requires_grad_()
    call(x, ww, ws1_ops.logical_keys(torch.zeros(3, dtype=torch.int64), torch.arange(3))).float().sum().backward()
    assert ww.grad is not None


def test_cast_once_casts_a_master_once_per_version_with_the_same_bits():
    """Inside ws1_ops.cast_once() every call executing one FP32 master shares one BF16 copy; an
    in-place update makes a new one; outputs and gradients are bitwise those without the scope."""
    from ws1_ops.ops._common import exec_dtype

    g = torch.Generator().manual_seed(5)
    w = torch.randn(64, 32, generator=g).bfloat16().float().requires_grad_()
    x = torch.randn(6, 32, generator=g).bfloat16()
    with ws1_ops.cast_once():
        a, b = exec_dtype(w), exec_dtype(w)
        assert a is b and a.dtype == torch.bfloat16 and torch.equal(a.float(), w.detach())
        with torch.no_grad():
            w.mul_(2)
        c = exec_dtype(w)
        assert c is not a and torch.equal(c.float(), w.detach())
    assert exec_dtype(w) is not exec_dtype(w)  # no scope: a fresh cast per call
    with torch.inference_mode():
        wi = w.detach().clone()
    with ws1_ops.cast_once():  # inference tensors (no version counter): cast per call
        assert torch.equal(exec_dtype(wi).float(), wi)

    def run(scope):
        p = w.detach().clone().requires_grad_()
        keys = torch.arange(6)
        with ws1_ops.use_profile("cpu_bf16"), scope:
            y = ws1_ops.det_gemm(x[:3], p, keys[:3]).float().sum() + ws1_ops.det_gemm(x[3:], p, keys[3:]).float().sum()
            with ws1_ops.canonical_grads():
                y.backward()
        return y.detach(), p.grad

    import contextlib

    y0, g0 = run(contextlib.nullcontext())
    y1, g1 = run(ws1_ops.cast_once())
    assert bitwise(y1, y0).passed and bitwise(g1, g0).passed


def _tied_chain(table, ids, keys, head_rows, dlogits):
    """embedding(ids) -> (row i of head_rows) -> lm_head against the same table; loss <logits, dlogits>.
    ids [T], keys [T], head_rows [M] (rows of the embedding output the head reads), dlogits [M, V] FP32."""
    x = ws1_ops.embedding(ids, table, keys)  # [T, H] BF16
    logits = ws1_ops.lm_head(x.index_select(0, head_rows), table, keys.index_select(0, head_rows))  # [M, V]
    return (logits * dlogits).sum()


def test_tied_weight_gradient_is_the_fp32_sum_rounded_once(cpu):
    """A table read by embedding and lm_head (tied embeddings): inside canonical_grads() its gradient is
    ``(fp32 dE + fp32 dW_head).to(bf16)`` — each contribution the op's own canonical reduction (what an untied
    copy gets, before its rounding) — not autograd's BF16 sum of two rounded contributions, which differs here."""
    g = torch.Generator().manual_seed(11)
    V, H, T = 40, 24, 30
    table = (torch.randn(V, H, generator=g) * 0.5).bfloat16()
    ids = torch.randint(V, (T,), generator=g)
    keys = torch.randperm(T, generator=g)
    head_rows = torch.arange(4, T, 2)
    dlogits = torch.randn(head_rows.numel(), V, generator=g)

    tied = ws1_ops.tie(table.clone().requires_grad_())
    assert ws1_ops.is_tied(tied) and not ws1_ops.is_tied(table)
    parts = []
    real = ws1_ops.grads.combine

    def spy(contributions, dtype):
        parts.append([(op, t.clone()) for op, t in contributions])
        return real(contributions, dtype)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ws1_ops.grads, "combine", spy)
        loss = _tied_chain(tied, ids, keys, head_rows, dlogits)
        with ws1_ops.canonical_grads():
            loss.backward()
    (contributions,) = parts
    assert [op for op, _ in contributions] == ["embedding", "lm_head"]
    (_, d_emb), (_, d_head) = contributions
    assert d_emb.dtype == d_head.dtype == torch.float32
    assert bitwise(tied.grad, (d_emb + d_head).to(torch.bfloat16)).passed

    # each contribution is the op's own canonical gradient: an untied pair of tables gets it, rounded
    emb, head = table.clone().requires_grad_(), table.clone().requires_grad_()
    x = ws1_ops.embedding(ids, emb, keys)
    logits = ws1_ops.lm_head(x.index_select(0, head_rows), head, keys.index_select(0, head_rows))
    with ws1_ops.canonical_grads():
        (logits * dlogits).sum().backward()
    assert bitwise(emb.grad, d_emb.to(torch.bfloat16)).passed and bitwise(head.grad, d_head.to(torch.bfloat16)).passed
    # autograd's way (each rounded to BF16, then a BF16 add) is another gradient: the rule is not vacuous
    assert not bitwise(tied.grad, emb.grad + head.grad).passed


def test_tied_weight_gradient_is_invariant_to_the_split_and_order_of_calls(cpu):
    """The tied table's gradient over the same logical rows, in one call or four (any order), is bitwise one."""
    g = torch.Generator().manual_seed(12)
    V, H, T = 40, 24, 32
    table = (torch.randn(V, H, generator=g) * 0.5).bfloat16()
    ids = torch.randint(V, (T,), generator=g)
    keys = torch.arange(T)
    dlogits = torch.randn(T, V, generator=g)

    def grad(splits):
        tied = ws1_ops.tie(table.clone().requires_grad_())
        loss = sum(
            _tied_chain(tied, ids[lo:hi], keys[lo:hi], torch.arange(hi - lo), dlogits[lo:hi]) for lo, hi in splits
        )
        with ws1_ops.canonical_grads():
            loss.backward()
        return tied.grad

    whole = grad([(0, T)])
    assert bitwise(grad([(20, 32), (0, 7), (7, 20)]), whole).passed
    assert bitwise(grad([(0, 1), (1, 30), (30, 32)]), whole).passed


@pytest.mark.parametrize("first", ["embedding", "lm_head"])
def test_tied_weight_backward_outside_the_scope_is_refused(cpu, first):
    """Outside canonical_grads() autograd would round each contribution to BF16 and add them in BF16: refused,
    one line naming the op whose backward runs first (lm_head: the head is last in the forward)."""
    g = torch.Generator().manual_seed(13)
    table = ws1_ops.tie(torch.randn(16, 8, generator=g).bfloat16().requires_grad_())
    ids, keys = torch.tensor([3, 1, 3]), torch.arange(3)
    if first == "lm_head":
        loss = _tied_chain(table, ids, keys, torch.arange(3), torch.randn(3, 16, generator=g))
    else:
        loss = ws1_ops.embedding(ids, table, keys).float().sum()
    with pytest.raises(ws1_ops.OpInputError, match=f"^{first}: the weight is tied .* inside ws1_ops.canonical_grads"):
        loss.backward()
    assert table.grad is None


def test_sink_takes_each_gradient_instead_of_grad(cpu):
    """canonical_grads(sink=...): each finished gradient goes to the sink (once per parameter, the bits it would
    have put in .grad), and .grad stays unset — how ws1_dist hands them to its reduce-scatter."""
    c = make("det_gemm", n=24)
    keys = torch.arange(24)

    def run(sink):
        ps = [p.detach().clone().requires_grad_() for p in c.params]
        out = c.call(*c.rows, *ps, row_keys=keys)
        with ws1_ops.canonical_grads(sink=sink):
            out.float().sum().backward()
        return ps

    plain = run(None)
    got = []
    sunk = run(lambda p, g: got.append((p, g)))
    assert len(got) == len(sunk) and all(p.grad is None for p in sunk)
    assert [id(p) for p, _ in got] == [id(p) for p in sunk]
    for (_, g), p in zip(got, plain):
        assert bitwise(g, p.grad, "sunk").passed


def test_freed_parameter_storage_is_refused(cpu):
    """A parameter whose storage was freed before the scope exits (FSDP2 frees unsharded parameters after backward)
    is refused with a line naming the fix, not given a gradient no optimizer would see."""
    c = make("det_gemm", n=8)
    ps = [p.detach().clone().requires_grad_() for p in c.params]
    out = c.call(*c.rows, *ps, row_keys=torch.arange(8))
    with pytest.raises(ws1_ops.OpInputError, match="storage is freed.*ws1_dist.canonical_grads"):
        with ws1_ops.canonical_grads():
            out.float().sum().backward()
            ps[0].untyped_storage().resize_(0)


def test_tree_sum_is_one_fixed_tree_whose_aligned_blocks_are_its_nodes():
    """tree_sum: a pairwise tree over indices with absent leaves the identity. The node of an aligned power-of-two
    block, computed from that block's leaves alone, then summed with the other blocks' nodes (block number as the
    index), is the whole tree's bits — what lets data-parallel ranks finish one device's tree. A fold in index order
    is another order (it differs here)."""
    g = torch.Generator().manual_seed(7)
    leaves = {i: torch.randn(4096, generator=g) * (10.0 ** (i % 5)) for i in (0, 1, 2, 3, 5, 6, 9, 12, 13)}
    whole = ws1_ops.tree_sum(list(leaves.items()))
    for block in (2, 4, 8, 16):
        nodes = {}
        for i, v in leaves.items():
            nodes.setdefault(i // block, []).append((i, v))
        parts = [(b, ws1_ops.tree_sum(items)) for b, items in nodes.items()]
        assert torch.equal(ws1_ops.tree_sum(parts), whole), block
    # lazily made leaves give the same bits; a single leaf is itself
    assert torch.equal(ws1_ops.tree_sum([(i, (lambda v=v: v)) for i, v in leaves.items()]), whole)
    assert torch.equal(ws1_ops.tree_sum([(5, leaves[5])]), leaves[5])
    fold = leaves[0].clone()
    for i in sorted(leaves)[1:]:
        fold = fold + leaves[i]
    assert not torch.equal(fold, whole)
    with pytest.raises(ws1_ops.OpInputError, match="distinct and >= 0"):
        ws1_ops.tree_sum([(1, whole), (1, whole)])
    with pytest.raises(ws1_ops.OpInputError, match="no items"):
        ws1_ops.tree_sum([])


def _split_grads(c, keys: torch.Tensor, dy: torch.Tensor, parts, order: str) -> torch.Tensor:
    """Case ``c``'s first parameter's gradient of sum(out * dy), its rows run in calls of ``parts`` [(lo, hi)],
    reduced in ``order``."""
    ps = [p.detach().clone().requires_grad_() for p in c.params]
    total = 0
    for lo, hi in parts:
        out = c.call(*[r[lo:hi] for r in c.rows], *ps, row_keys=keys[lo:hi])
        total = total + (out.float() * dy[lo:hi]).sum()
    with ws1_ops.canonical_grads(order=order):
        total.backward()
    return ps[0].grad


def test_sample_tree_order_is_split_invariant_and_refuses_unknown_orders(cpu):
    """order='sample_tree': the gradient of a set of samples is the same bits however the samples are split into
    calls (each sample's rows whole in one call: its leaf), and in general not the serial order's bits."""
    c = make("det_gemm", n=60)
    sample = torch.arange(60) // 8  # 8 rows per sample (the last has 4)
    keys = ws1_ops.logical_keys(sample, torch.arange(60) % 8)
    dy = torch.randn(
        (60, c.call(*c.rows, *c.params, row_keys=keys).shape[1]), generator=torch.Generator().manual_seed(4)
    )

    def grads(parts, order):
        return _split_grads(c, keys, dy, parts, order)

    whole = grads([(0, 60)], "sample_tree")
    assert torch.equal(grads([(0, 16), (16, 40), (40, 60)], "sample_tree"), whole)
    assert not torch.equal(grads([(0, 60)], "serial"), whole)
    with pytest.raises(ws1_ops.OpInputError, match="order must be one of"):
        with ws1_ops.canonical_grads(order="tree"):
            pass


def test_chunk_tree_leaves_are_each_samples_128_position_chunks(cpu):
    """order='chunk_tree': a leaf per (128-position chunk, sample), chunk-major — split-invariant when a call holds
    whole chunks of a sample (context parallel's blocks), equal to sample_tree where no sample passes 128 positions,
    and not sample_tree's bits where one does (its rows then sum in two leaves)."""
    assert ws1_ops.TREE_CHUNK == 128
    keys = ws1_ops.logical_keys(torch.tensor([0, 0, 3, 3]), torch.tensor([5, 300, 127, 128]))
    assert ws1_ops.grads.leaf_of(keys, "chunk_tree").tolist() == [0, (2 << 32), 3, (1 << 32) | 3]
    assert ws1_ops.grads.leaf_of(keys, "sample_tree").tolist() == [0, 0, 3, 3]

    def grads(n_rows: int, positions: torch.Tensor, samples: torch.Tensor, parts, order):
        c = make("det_gemm", n=n_rows)
        dy = torch.randn((n_rows, c.params[0].shape[0]), generator=torch.Generator().manual_seed(5))
        return _split_grads(c, ws1_ops.logical_keys(samples, positions), dy, parts, order)

    # one 512-token sample cut in aligned chunk blocks, as context-parallel ranks hold it
    pos, one = torch.arange(512), torch.zeros(512, dtype=torch.int64)
    whole = grads(512, pos, one, [(0, 512)], "chunk_tree")
    assert torch.equal(grads(512, pos, one, [(0, 256), (256, 384), (384, 512)], "chunk_tree"), whole)
    assert not torch.equal(grads(512, pos, one, [(0, 512)], "sample_tree"), whole)
    # short samples: one leaf each, as in sample_tree
    short = torch.arange(96) // 12
    pos_s = torch.arange(96) % 12
    assert torch.equal(
        grads(96, pos_s, short, [(0, 96)], "chunk_tree"), grads(96, pos_s, short, [(0, 96)], "sample_tree")
    )


def test_in_force_puts_the_kernels_of_a_forward_back_for_its_backward():
    """ws1_ops.in_force(): what an autograd backward that calls ops itself (ws1_dist's context parallel) re-enters,
    since it runs outside the forward's `with`; without an active profile it is ws1_ops' one-line NoProfile."""
    with ws1_ops.use_profile("cpu_bf16", torch.device("cpu")):
        again = ws1_ops.in_force()
        want = ws1_ops.active()
    with pytest.raises(ws1_ops.NoProfile):
        ws1_ops.active()
    with again():
        assert ws1_ops.active() == want
    with pytest.raises(ws1_ops.NoProfile):
        ws1_ops.in_force()
