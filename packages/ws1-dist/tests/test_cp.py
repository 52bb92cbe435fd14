"""ws1_dist's context parallel on one process (CP 1): the forward and dq are the default kernel's bits, dk/dv are the
tree of the kernel's per-chunk partials (and, with ``cross="serial_split"``, the default backward's own bits), the
model's log-probs are teacher forcing's, and the split rules are refused one line each. The multi-rank results are
ws1_matrix's cp check (the parallel gate, packages/ws1-matrix/tests/test_parallel_gate.py)."""

import pytest
import torch

import ws1_dist
import ws1_ops
import ws1_qwen3

S, HQ, HKV, D = 300, 4, 2, 64  # three chunks, the last one partial


def _inputs():
    g = torch.Generator().manual_seed(11)
    q = torch.randn(S, HQ, D, generator=g, device="cpu").bfloat16()
    k = torch.randn(S, HKV, D, generator=g, device="cpu").bfloat16()
    v = torch.randn(S, HKV, D, generator=g, device="cpu").bfloat16()
    dout = (torch.randn(S, HQ, D, generator=g, device="cpu") / 8).bfloat16()
    return q, k, v, dout


def _grads(fn, q, k, v, dout):
    ql, kl, vl = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = fn(ql, kl, vl)
    out.backward(dout)
    return out.detach(), ql.grad, kl.grad, vl.grad


def test_cp1_is_the_default_forward_and_dq_and_the_chunk_tree_of_dk_dv():
    q, k, v, dout = _inputs()
    cu = torch.tensor([0, S], dtype=torch.int64, device="cpu")
    pos = torch.arange(S, dtype=torch.int64, device="cpu")
    with ws1_ops.use_profile("cpu_bf16", torch.device("cpu")):
        base = _grads(lambda a, b, c: ws1_ops.attention(a, b, c, cu, cu, pos), q, k, v, dout)
        cp = ws1_dist.ContextParallel(S)
        assert (cp.world, cp.tokens) == (1, range(S))
        tree = _grads(cp.attention, q, k, v, dout)
        serial = _grads(ws1_dist.ContextParallel(S, cross="serial_split").attention, q, k, v, dout)
        out, lse = ws1_ops.attention_lse(q, k, v, cu, cu, pos)
        # the leaves by hand: each 128-position chunk's FP32 partial, the pairwise tree, one rounding
        leaves = []
        for c, first in enumerate(range(0, S, ws1_dist.CP_CHUNK)):
            stop = min(first + ws1_dist.CP_CHUNK, S)
            cq = torch.tensor([0, stop - first], dtype=torch.int64, device="cpu")
            ck = torch.tensor([0, stop], dtype=torch.int64, device="cpu")
            _, dk, dv = ws1_ops.attention_bwd_partial(
                dout[first:stop], q[first:stop], k[:stop], v[:stop], out[first:stop], lse[first:stop], cq, ck,
                pos[first:stop],
            )  # fmt: skip
            full = torch.zeros((2, S, HKV, D), dtype=torch.float32, device="cpu")
            full[0, :stop], full[1, :stop] = dk, dv
            leaves.append((c, full))
        by_hand = ws1_ops.tree_sum(leaves).bfloat16()
    assert torch.equal(out, base[0]) and torch.equal(tree[0], base[0])
    assert torch.equal(tree[1], base[1]) and torch.equal(serial[1], base[1])
    assert torch.equal(tree[2], by_hand[0]) and torch.equal(tree[3], by_hand[1])
    # the default order under "no split" is the default backward
    assert torch.equal(serial[2], base[2]) and torch.equal(serial[3], base[3])
    # the control: here the chunk tree is another order than the default's one fold (so the equalities above can fail)
    assert not (torch.equal(tree[2], base[2]) and torch.equal(tree[3], base[3]))


def test_cp1_logprobs_are_teacher_forcing(tmp_path):
    config = ws1_qwen3.preset("tiny").replace(max_position_embeddings=512, name="tiny-512")
    ws1_qwen3.save_pretrained(ws1_qwen3.synthetic(config, "cpu_bf16"), tmp_path / "m")
    model = ws1_qwen3.from_pretrained(tmp_path / "m", "cpu_bf16")
    ids = torch.randint(4, config.vocab_size, (S,), generator=torch.Generator().manual_seed(5), device="cpu")
    with torch.no_grad():
        logp = ws1_dist.cp_logprobs(model, ids, ws1_dist.ContextParallel(S))
        tf = ws1_qwen3.teacher_forcing(model, [ws1_qwen3.Sample(0, tuple(ids.tolist()), 1, "s")], layout="packed")
    assert logp.shape == (S - 1,) and torch.equal(logp, tf.logp)
    with pytest.raises(ws1_dist.DistError, match=r"ids must be int64 \[300\]"):
        ws1_dist.cp_logprobs(model, ids[:10], ws1_dist.ContextParallel(S))


def test_blocks_are_aligned_chunks_and_bad_splits_are_one_line():
    assert [ws1_dist.cp_tokens(1000, 4, r) for r in range(4)] == [
        range(0, 256), range(256, 512), range(512, 768), range(768, 1000)
    ]  # fmt: skip
    assert [ws1_dist.cp_tokens(1000, 2, r) for r in range(2)] == [range(0, 512), range(512, 1000)]
    with pytest.raises(ws1_dist.DistError, match="at most 2 context-parallel ranks, got 4"):
        ws1_dist.cp_tokens(200, 4, 0)
    with pytest.raises(ws1_dist.DistError, match="leave rank 3 of 4 without one"):
        ws1_dist.cp_tokens(5 * 128, 4, 3)
    with pytest.raises(ws1_dist.DistError, match="cross must be one of"):
        ws1_dist.ContextParallel(S, cross="nccl")
    q, k, v, _ = _inputs()
    with pytest.raises(ws1_dist.DistError, match=r"k must be \[300, heads, head_dim\]"):
        ws1_dist.ContextParallel(S).attention(q, k[:10], v)
