"""lm_head: FP32 logits = x @ weight.T, the det_gemm arithmetic with an FP32 output (no rounding).

Shapes: x [M, K] BF16, weight [V, K] -> logits [M, V] FP32.
"""

from __future__ import annotations

import torch

from .det_gemm import DetGemm, _check

OP = "lm_head"


def lm_head(x: torch.Tensor, weight: torch.Tensor, row_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Logits. x [M, K] BF16, weight [V, K] -> [M, V] FP32 (the policy keeps logits in FP32)."""
    _check(OP, x, weight)
    return DetGemm.apply(x.contiguous(), weight, row_keys, OP)
