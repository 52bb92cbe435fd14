"""The cache-attending attention step: what prefill, chunked prefill and decode all run per layer.

Shapes: q [T, Hq, D], k, v [T, Hkv, D] (BF16, the step's new tokens in ``step`` order) -> [T, Hq, D].
The new K/V are written to the cache first and attention then reads every key 0..end-1 of each
sequence back from the cache, so a query sees the same stored BF16 keys whether it is computed in a
full prefill, a chunk, or a one-token decode step — with the same kernel and the same key tiles. B1
with its sequences in slot order lets the kernel read the storage in place (``Step.view``); otherwise
the keys are gathered into a packed copy first. The kernel reads the same values either way.
"""

from __future__ import annotations

import torch

import ws1_ops

from .base import KVCache, Step


def cached_attention(
    cache: KVCache,
    layer: int,
    step: Step,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Write the step's K/V into ``cache`` at ``layer``, then attend its queries to the cache."""
    cache.write(layer, step, k, v)
    K, V, cu_k = cache.keys_for_attention(layer, step)
    return ws1_ops.attention(q, K, V, step.dev["cu_seqlens_q"], cu_k, step.dev["q_pos"], scale)
