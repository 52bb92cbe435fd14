"""qk_norm: per-head RMSNorm of q or k over head_dim (Qwen3 normalizes q and k before RoPE).

Shapes: x [T, n_heads, D] BF16, weight [D] -> [T, n_heads, D] BF16. Its own entry point (a node
reports its own kernel), the same arithmetic and the same autograd Function as rms_norm
(:class:`~ws1_ops.ops.rms_norm.RowNorm`) on [T * n_heads, D] rows.
"""

from __future__ import annotations

import torch

from ..errors import check, check_float, check_rank
from .rms_norm import RowNorm

OP = "qk_norm"


def qk_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, row_keys: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-head RMSNorm. x [T, n_heads, D] BF16, weight [D] -> [T, n_heads, D] BF16.

    Gradient order: tokens in canonical order, heads ascending within a token."""
    check_float(x, OP, "x", ("bfloat16",))
    check_rank(x, 3, OP, "x", "[T, n_heads, D]")
    check_float(weight, OP, "weight")
    check(weight.shape == (x.shape[2],), OP, f"weight must be [{x.shape[2]}], got {tuple(weight.shape)}")
    return RowNorm.apply(OP, x.contiguous(), weight, float(eps), row_keys)
