"""C6's b4-padded cases: the prefill hands the attention kernel every row of the padded [4, 20] batch,
pad rows (garbage) included as segments of their own, not just the packed valid rows."""

import dataclasses

import torch

import ws1_ops
from ws1_matrix.kv_ops import PADDED_LENGTH, decode_vs_prefill
from ws1_ops import registry


def test_padded_prefill_runs_the_pad_rows_through_the_kernel():
    real = ws1_ops.kernels_for("cpu")["attention"]
    calls = []

    def fwd(q, k, v, cu_q, cu_k, q_pos, scale):
        calls.append((q.shape[0], cu_q.numel() - 1))
        return real.fwd(q, k, v, cu_q, cu_k, q_pos, scale)

    registry._KERNELS[("attention", "cpu")] = dataclasses.replace(real, fwd=fwd)
    try:
        lengths = (11, 16, 13, 19)
        for layout in ("padded_right", "padded_left"):
            calls.clear()
            with ws1_ops.use_profile("cpu_bf16"):
                out = decode_vs_prefill("b4", lengths, layout, hq=8, hkv=2, d=64)
            assert all(o.passed for o in out), [o.comparison.detail for o in out]
            # the prefill: 80 rows in 8 segments (4 sequences, 4 pad runs); then decode/chunk steps
            assert calls[0] == (len(lengths) * PADDED_LENGTH, 2 * len(lengths)), (layout, calls[0])
    finally:
        registry._KERNELS[("attention", "cpu")] = real


def test_padded_segments_right_and_left():
    valid = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], dtype=torch.bool)
    cu, pos = ws1_ops.padded_segments(valid)
    assert cu.tolist() == [0, 3, 5, 10, 12, 15]
    assert pos.tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 0, 1, 0, 1, 2]
    try:
        ws1_ops.padded_segments(torch.tensor([[1, 0, 1]], dtype=torch.bool))
    except ws1_ops.OpInputError as e:
        assert "not one contiguous run" in str(e)
    else:
        raise AssertionError("a row with two valid runs must be refused")
