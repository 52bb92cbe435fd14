"""WS1 KV caches: B1 contiguous and B2 paged (with prefix reuse), and the cache-attending step.

    from ws1_kv import PagedKVCache, cached_attention
    cache = PagedKVCache(n_layers, n_kv_heads, head_dim, num_blocks=64, block_size=16)
    cache.begin("req-0", prompt_ids)               # -> tokens reused from cached full blocks
    step = cache.reserve({"req-0": n_new})           # validate + allocate, all or nothing
    out = cached_attention(cache, layer, step, q, k, v)   # per layer: write K/V, attend from the cache
    cache.commit(step, {"req-0": new_ids})           # advance the cursor

K/V are stored in BF16 exactly as computed; prefill, chunked prefill and decode attend to those
stored values with one kernel, so their outputs agree bitwise (C6), and paged equals contiguous,
warm prefix equals cold (C7).
"""

from .base import KVCache, SeqState, Step
from .contiguous import ContiguousKVCache
from .errors import CacheFull, KVCacheError, SequenceFinished, UnknownSequence
from .paged import PagedKVCache
from .step import cached_attention

__all__ = [
    "CacheFull",
    "ContiguousKVCache",
    "KVCache",
    "KVCacheError",
    "PagedKVCache",
    "SeqState",
    "SequenceFinished",
    "Step",
    "UnknownSequence",
    "cached_attention",
]
