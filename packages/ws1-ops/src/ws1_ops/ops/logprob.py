"""logprob: the trainer's fused selected-token log-probability, FP32.

Shapes: logits [T, V] FP32, targets [T] int64 -> logp [T] FP32, logp[i] = logits[i, t_i] - lse_i.
lse uses a fixed-order reduction (row max, then exp-sum over lanes v mod 16 combined in a fixed
tree), shared with batch_invariant_logp, so logprob(l, t)[i] == batch_invariant_logp(l)[i, t[i]]
bitwise: the trainer's selected log-prob and the rollout's full log-softmax agree.
"""

from __future__ import annotations

import torch

from ..errors import check, check_float, check_rank, value_checks
from ._common import backward, start

OP = "logprob"


class LogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        k = start(OP, logits, targets)
        logp, lse = k.fwd(logits, targets)
        ctx.k = k
        ctx.save_for_backward(logits, lse, targets)
        return logp

    @staticmethod
    def backward(ctx, g):
        logits, lse, targets = ctx.saved_tensors
        return backward(ctx.k, g.contiguous(), logits, lse, targets), None


def logprob(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Selected log-probs. logits [T, V] FP32, targets [T] int64 in [0, V) -> [T] FP32."""
    check_float(logits, OP, "logits", ("float32",))
    check_rank(logits, 2, OP, "logits", "[T, V]")
    check(isinstance(targets, torch.Tensor) and targets.dtype == torch.int64, OP, "targets must be an int64 tensor")
    check(targets.shape == (logits.shape[0],), OP, f"targets must be [{logits.shape[0]}], got {tuple(targets.shape)}")
    if targets.numel() and value_checks(targets):  # a host sync on a device: see ws1_ops.trusted_inputs
        lo, hi = int(targets.min()), int(targets.max())
        check(
            lo >= 0 and hi < logits.shape[1],
            OP,
            f"target id {hi if hi >= logits.shape[1] else lo} out of range [0, {logits.shape[1]})",
        )
    return LogProb.apply(logits.contiguous(), targets.contiguous())
