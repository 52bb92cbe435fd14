"""embedding: gather rows of the table; dE is a segmented sum per token id in canonical row order.

Shapes: ids [T] int64, weight [V, H] -> [T, H] (BF16).
"""

from __future__ import annotations

import torch

from ..canonical import canonical_order
from ..errors import check, check_float, check_rank
from ._common import backward, exec_dtype, start

OP = "embedding"


class Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, row_keys):
        w = exec_dtype(weight)
        k = start(OP, ids, w)
        ctx.k, ctx.V = k, weight.shape[0]
        ctx.save_for_backward(ids, row_keys)
        return k.fwd(ids, w)

    @staticmethod
    def backward(ctx, dy):
        ids, row_keys = ctx.saved_tensors
        perm = canonical_order(row_keys, ids.shape[0])
        # dE[v] = sum over rows with id v, in canonical order (padding rows dropped)
        de = backward(ctx.k, dy.index_select(0, perm), ids.index_select(0, perm), ctx.V)
        return None, de, None


def embedding(ids: torch.Tensor, weight: torch.Tensor, row_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Token embeddings. ids [T] int64 (each in [0, V)), weight [V, H] -> [T, H] BF16.

    ``row_keys`` [T] (see :mod:`ws1_ops.canonical`) orders dE's per-id sums; -1 marks padding."""
    check(isinstance(ids, torch.Tensor) and ids.dtype == torch.int64, OP, f"ids must be an int64 tensor, got {getattr(ids, 'dtype', type(ids))}")
    check_rank(ids, 1, OP, "ids", "[T]")
    check_float(weight, OP, "weight")
    check_rank(weight, 2, OP, "weight", "[V, H]")
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        check(lo >= 0 and hi < weight.shape[0], OP, f"token id {hi if hi >= weight.shape[0] else lo} out of range [0, {weight.shape[0]})")
    return Embedding.apply(ids, weight, row_keys)
