"""ws1_dist's tensor-parallel pieces on one process: the row-parallel sum's tree is the one-device GEMM's chunk tree
(TP 1), a single chunk rounded is det_gemm's bits, and the split rules are refused one line each. The multi-rank
results are ws1_matrix's tp check (packages/ws1-matrix/tests/test_tp_check.py)."""

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
        tree = ws1_dist.TPOps(1, 0, None, set()).row_parallel_sum(x, w)
        kc = 512 // ws1_dist.CHUNKS
        parts = [
            (c, ws1_ops.det_gemm_partial(x[:, c * kc : (c + 1) * kc], w[:, c * kc : (c + 1) * kc])) for c in range(8)
        ]
        assert torch.equal(tree, ws1_ops.tree_sum(parts))
        if not AMX:
            assert torch.equal(ws1_ops.det_gemm_partial(x, w).bfloat16(), ws1_ops.det_gemm(x, w))
        # a row's FP32 sum is its own: the same row alone
        assert torch.equal(ws1_dist.TPOps(1, 0, None, set()).row_parallel_sum(x[7:8], w), tree[7:8])


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
