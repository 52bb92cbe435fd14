"""batch_invariant_logp: the rollout's full-vocabulary log-softmax, FP32, same lse as logprob.

Shapes: logits [T, V] FP32 -> logp [T, V] FP32 = logits - lse (row-wise).
"""

from __future__ import annotations

import torch

from ..errors import check_float, check_rank
from ._common import backward, start

OP = "batch_invariant_logp"


class BatchInvariantLogp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits):
        k = start(OP, logits)
        logp, _lse = k.fwd(logits)
        ctx.k = k
        ctx.save_for_backward(logp)
        return logp

    @staticmethod
    def backward(ctx, g):
        (logp,) = ctx.saved_tensors
        return backward(ctx.k, g.contiguous(), logp)


def batch_invariant_logp(logits: torch.Tensor) -> torch.Tensor:
    """Full log-softmax. logits [T, V] FP32 -> [T, V] FP32; row i depends on row i only."""
    check_float(logits, OP, "logits", ("float32",))
    check_rank(logits, 2, OP, "logits", "[T, V]")
    return BatchInvariantLogp.apply(logits.contiguous())
