"""embedding: gather rows of the table; dE is a segmented sum per token id in canonical row order.

Shapes: ids [T] int64, weight [V, H] -> [T, H] (BF16).
"""

from __future__ import annotations

import torch

from .. import grads
from ..canonical import canonical_order
from ..errors import check, check_float, check_rank, value_checks
from ._common import exec_dtype, param_grad, start

OP = "embedding"


class Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, row_keys):
        w = exec_dtype(weight)
        k = start(OP, ids, w)
        ctx.k, ctx.V, ctx.weight = k, weight.shape[0], weight
        ctx.save_for_backward(ids, row_keys)
        return k.fwd(ids, w)

    @staticmethod
    def backward(ctx, dy):
        ids, row_keys = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return None, None, None
        dy = dy.contiguous()
        scope = grads.current()
        if scope is not None:
            scope.stash(ctx.weight, ctx.k, row_keys, dy, ids, extra=(ctx.V,))
            return None, None, None
        grads.refuse_tied_outside_scope(ctx.weight, OP)  # tied embeddings: the table is lm_head's weight too
        # dE[v] = sum over rows with id v, in canonical order (padding rows dropped)
        return None, param_grad(ctx.k, dy, ids, ctx.V, canonical_order(row_keys, ids.shape[0], OP)), None


def embedding(ids: torch.Tensor, weight: torch.Tensor, row_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Token embeddings. ids [T] int64 (each in [0, V)), weight [V, H] -> [T, H] BF16.

    ``row_keys`` [T] (see :mod:`ws1_ops.canonical`) orders dE's per-id sums; -1 marks padding."""
    check(
        isinstance(ids, torch.Tensor) and ids.dtype == torch.int64,
        OP,
        f"ids must be an int64 tensor, got {getattr(ids, 'dtype', type(ids))}",
    )
    check_rank(ids, 1, OP, "ids", "[T]")
    check_float(weight, OP, "weight")
    check_rank(weight, 2, OP, "weight", "[V, H]")
    if ids.numel() and value_checks(ids):  # a host sync on a device: see ws1_ops.trusted_inputs
        lo, hi = int(ids.min()), int(ids.max())
        check(
            lo >= 0 and hi < weight.shape[0],
            OP,
            f"token id {hi if hi >= weight.shape[0] else lo} out of range [0, {weight.shape[0]})",
        )
    return Embedding.apply(ids, weight, row_keys)
