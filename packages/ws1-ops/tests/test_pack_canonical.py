"""pack/unpack are exact index copies; canonical order sorts by logical key and drops padding."""

import pytest
import torch

import ws1_ops
from ws1_contract import bitwise


def test_pack_unpack_roundtrip_right_and_left():
    x = torch.randn(3, 6, 4).bfloat16()
    right = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    left = right.flip(1)
    for valid in (right, left):
        p, cu = ws1_ops.pack(x, valid)
        assert p.shape == (11, 4) and cu.tolist() == [0, 3, 9, 11]
        back = ws1_ops.unpack(p, valid)
        assert bitwise(back[valid], x[valid]).passed
        assert (back[~valid] == 0).all()


def test_pack_gradient_is_an_exact_copy():
    x = torch.randn(2, 3, 4, requires_grad=True)
    valid = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    p, _ = ws1_ops.pack(x, valid)
    g = torch.randn_like(p)
    p.backward(g)
    assert bitwise(x.grad[valid], g).passed and (x.grad[~valid] == 0).all()


def test_canonical_order():
    keys = ws1_ops.logical_keys(
        torch.tensor([1, 0, 1, 0, 0]), torch.tensor([0, 1, 1, 0, 2]), torch.tensor([1, 1, 1, 1, 0], dtype=torch.bool)
    )
    assert ws1_ops.canonical_order(keys, 5).tolist() == [3, 1, 0, 2]
    with pytest.raises(ws1_ops.OpInputError, match="^det_gemm: a parameter gradient needs row_keys"):
        ws1_ops.canonical_order(None, 3, "det_gemm")  # no keys is no order: never batch order
    assert ws1_ops.expand_rows(torch.tensor([1, 0]), 2).tolist() == [2, 3, 0, 1]
