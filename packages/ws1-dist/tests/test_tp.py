"""ws1_dist's tensor-parallel pieces on one process: the row-parallel sum's tree is the one-device GEMM's chunk tree
(TP 1), a single chunk rounded is det_gemm's bits, and the split rules are refused one line each. The multi-rank
results are ws1_matrix's tp check, run by the parallel gate (packages/ws1-matrix/tests/test_parallel_gate.py)."""

import os

import pytest
import torch

import ws1_dist
import ws1_ops
import ws1_qwen3

# det_gemm's opt-in AMX path (WS1_CPU_ISA=amx) sums pairs of products in its tile instruction: a fixed order, but
# not the serial FMA chain of the FP32 GEMM behind det_gemm_partial, so "one chunk rounded = det_gemm" holds on every
# other cpu path only. The TP order itself uses det_gemm_partial at every degree: its equalities hold on AMX too.
AMX = os.environ.get("WS1_CPU_ISA") == "amx"


def test_row_parallel_sum_is_the_chunk_tree_and_one_chunk_is_det_gemm():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(20, 512, generator=g, device="cpu").bfloat16()
    w = (torch.randn(48, 512, generator=g, device="cpu") / 16).bfloat16()
    with ws1_ops.use_profile("cpu_bf16", torch.device("cpu")):
        tree = ws1_dist.TPOps(1, 0, None).row_parallel_sum(x, w)
        kc = 512 // ws1_dist.CHUNKS
        parts = [
            (c, ws1_ops.det_gemm_partial(x[:, c * kc : (c + 1) * kc], w[:, c * kc : (c + 1) * kc])) for c in range(8)
        ]
        assert torch.equal(tree, ws1_ops.tree_sum(parts))
        if not AMX:
            assert torch.equal(ws1_ops.det_gemm_partial(x, w).bfloat16(), ws1_ops.det_gemm(x, w))
        # a row's FP32 sum is its own: the same row alone
        assert torch.equal(ws1_dist.TPOps(1, 0, None).row_parallel_sum(x[7:8], w), tree[7:8])


def test_tp_model_at_one_rank_runs_and_refuses_bad_splits(tmp_path):
    ws1_qwen3.save_pretrained(ws1_qwen3.synthetic("tiny", "cpu_bf16"), tmp_path / "tiny")
    samples = ws1_qwen3.fixture_samples()
    plain = ws1_qwen3.teacher_forcing(ws1_qwen3.from_pretrained(tmp_path / "tiny", "cpu_bf16"), samples).logp
    # the default order under "no split": each row-parallel GEMM one serial chain = det_gemm's bits
    serial = ws1_dist.tp_model(str(tmp_path / "tiny"), "cpu_bf16", 1, 0, cross="serial_split")
    if not AMX:
        assert torch.equal(ws1_qwen3.teacher_forcing(serial, samples).logp, plain)
    with pytest.raises(ws1_dist.DistError, match="num_key_value_heads=2 is not divisible by 4"):
        ws1_dist.tp_model(str(tmp_path / "tiny"), "cpu_bf16", 4, 0)
    with pytest.raises(ws1_dist.DistError, match="world 3 does not divide 8"):
        ws1_dist.tp_model(str(tmp_path / "tiny"), "cpu_bf16", 3, 0)
    with pytest.raises(ws1_dist.DistError, match="cross must be one of"):
        ws1_dist.tp_model(str(tmp_path / "tiny"), "cpu_bf16", 1, 0, cross="nccl")


def test_tp_model_without_a_process_group_is_one_line(tmp_path):
    config = ws1_qwen3.preset("tiny").replace(num_attention_heads=8, num_key_value_heads=8, head_dim=16, name="t8")
    ws1_qwen3.save_pretrained(ws1_qwen3.synthetic(config, "cpu_bf16"), tmp_path / "t8")
    with pytest.raises(ws1_dist.DistError, match="torch.distributed is not initialized"):
        ws1_dist.tp_model(str(tmp_path / "t8"), "cpu_bf16", 2, 0)


def test_det_gemm_k_chunks_is_the_tp_order_forward_with_det_gemms_backward():
    """det_gemm(k_chunks=8): the forward is TPOps' row-parallel sum at TP 1, rounded once; dx and dweight are
    det_gemm's own bits (neither sums over K); a K the chunks do not divide is one line."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(12, 256, generator=g, device="cpu").bfloat16()
    w = (torch.randn(40, 256, generator=g, device="cpu") / 16).bfloat16()
    dy = torch.randn(12, 40, generator=g, device="cpu").bfloat16()
    keys = ws1_ops.logical_keys(torch.zeros(12, dtype=torch.int64), torch.arange(12))
    got = {}
    with ws1_ops.use_profile("cpu_bf16", torch.device("cpu")):
        for k_chunks in (None, 8):
            xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
            y = ws1_ops.det_gemm(xl, wl, keys, k_chunks=k_chunks)
            y.backward(dy)
            got[k_chunks] = (y.detach(), xl.grad, wl.grad)
        tree = ws1_dist.TPOps(1, 0, None).row_parallel_sum(x, w)
        assert torch.equal(got[8][0], tree.bfloat16())
        # the control: in FP32 the chunk tree is another sum than the one serial chain (480 sums of 256 products)
        assert not torch.equal(tree, ws1_ops.det_gemm_partial(x, w))
        with pytest.raises(ws1_ops.OpInputError, match="k_chunks must be a positive int dividing K=256, got 3"):
            ws1_ops.det_gemm(x, w, k_chunks=3)
    assert torch.equal(got[8][1], got[None][1]) and torch.equal(got[8][2], got[None][2])


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A checkpoint wide enough that the TP order is observable in the log-probs (K of 1,024 and 4,096 over 2 layers:
    the FP32 differences of the two orders survive the BF16 rounding on some tokens — 24 to 40 of 44 across the cpu
    ISA paths; on tiny's widths none do), 8 seeded samples, and its log-probs in both orders on one device."""
    path = tmp_path_factory.mktemp("wide") / "m"
    config = ws1_qwen3.preset("tiny").replace(
        hidden_size=1024,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=4096,
        num_hidden_layers=2,
        name="wide",
    )
    ws1_qwen3.save_pretrained(ws1_qwen3.synthetic(config, "cpu_bf16"), path)
    g = torch.Generator().manual_seed(20261207)
    samples = []
    for rank in range(8):
        n_prompt = 3 + rank % 4
        tokens = torch.randint(4, config.vocab_size, (n_prompt + 2 + rank,), generator=g, device="cpu").tolist()
        samples.append(ws1_qwen3.Sample(rank, tuple(tokens), n_prompt, f"s{rank}"))
    tp1 = ws1_qwen3.teacher_forcing(ws1_dist.tp_model(str(path), "cpu_bf16", 1, 0), samples).logp
    plain = ws1_qwen3.teacher_forcing(ws1_qwen3.from_pretrained(path, "cpu_bf16"), samples).logp
    return path, samples, tp1, plain


def test_the_tp_order_is_another_order_on_the_wide_checkpoint(wide):
    """The control of the two tests below: there the orders give other log-probs, so a model that ignored
    ``k_chunks`` would fail them."""
    _path, _samples, tp1, plain = wide
    assert int((tp1.view(torch.int32) != plain.view(torch.int32)).sum()) > 0


def test_a_model_in_the_tp_order_on_one_device_is_tp_model_at_one_rank(wide):
    """``model.k_chunks = 8`` (WS1's model): the log-probs of ws1_dist.tp_model at TP 1, the reference of every TP
    degree."""
    path, samples, tp1, _plain = wide
    model = ws1_qwen3.from_pretrained(path, "cpu_bf16")
    model.k_chunks = ws1_dist.CHUNKS
    assert torch.equal(ws1_qwen3.teacher_forcing(model, samples).logp, tp1)


def test_transformers_patched_in_the_tp_order_is_tp_model_at_one_rank(wide):
    """apply_ws1(k_chunks=8): transformers' Qwen3 on WS1's kernels gives tp_model's TP-1 log-probs (so a trainer set
    so gets a tensor-parallel rollout's bits); with the default order it gives WS1's default model's."""
    transformers = pytest.importorskip("transformers")
    path, samples, tp1, plain = wide
    hf = transformers.Qwen3ForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    ids, mask, completion = ws1_qwen3.left_padded(samples)
    ranks = torch.tensor([s.rank for s in samples], device="cpu")
    for k_chunks, want in ((ws1_dist.CHUNKS, tp1), (None, plain)):
        ws1_qwen3.apply_ws1(hf, "cpu_bf16", k_chunks=k_chunks)
        with torch.no_grad():
            lp = ws1_qwen3.token_logprobs(hf, ids, mask, completion_mask=completion, sample_ranks=ranks)
        got = torch.cat([lp[b][completion[b].bool()] for b in range(len(samples))])
        assert torch.equal(got, want), k_chunks
