"""B2: a paged KV cache (vLLM-style) with prefix reuse.

Storage is ``num_blocks`` blocks of ``block_size`` rows; a sequence's block table maps position p
to row ``table[p // block_size] * block_size + p % block_size``. Blocks are taken from a free list
as a sequence grows and returned when it is freed.

Prefix reuse: once a block is full, it is registered under a hash of *all* token ids up to its end
(a chain: the hash of the previous block's key and this block's ids), so only an identical prefix
matches. A new sequence whose prompt starts with registered full blocks shares them (reference
counted) and starts at the first uncached position: the model prefills only the rest (a warm
prefix, continued). The last prompt token is always recomputed, since its logits are needed.
Shared blocks are full and never written again (a sequence writes only past its cursor), so no
copy-on-write is needed. A freed block keeps its registration until the free list hands it out
again (least recently freed first).

Warm equals cold bitwise because the cached rows are the very BF16 values a cold prefill of the
same tokens at the same positions computes (invariant kernels), and attention reads them back the
same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence

import torch

from .base import KVCache, SeqState, check_room
from .errors import KVCacheError


def _block_key(parent: bytes, ids: Sequence[int]) -> bytes:
    h = hashlib.sha256(parent)
    h.update(b",".join(str(int(i)).encode() for i in ids))
    return h.digest()


class PagedKVCache(KVCache):
    """``num_blocks`` × ``block_size`` rows per layer; per-sequence block tables; prefix reuse."""

    kind = "paged"

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        num_blocks: int,
        block_size: int = 16,
        max_len: int | None = None,
        prefix_reuse: bool = True,
        **kw,
    ):
        for name, val in (("num_blocks", num_blocks), ("block_size", block_size)):
            if not isinstance(val, int) or val <= 0:
                raise KVCacheError(f"paged cache: {name} must be a positive int, got {val!r}")
        super().__init__(n_layers, n_kv_heads, head_dim, max_len=max_len or num_blocks * block_size, **kw)
        self.num_blocks, self.block_size, self.prefix_reuse = num_blocks, block_size, prefix_reuse
        self._free: list[int] = list(range(num_blocks))
        self._ref = [0] * num_blocks
        self._tables: dict[Hashable, list[int]] = {}
        self._key_of_block: dict[int, bytes] = {}  # registered full blocks: block -> chain key
        self._block_of_key: dict[bytes, int] = {}
        self.hits = 0  # prompt tokens served from cached blocks

    @property
    def capacity_rows(self) -> int:
        return self.num_blocks * self.block_size

    # ---- allocation --------------------------------------------------------------------------

    def _take(self) -> int:
        b = self._free.pop(0)
        key = self._key_of_block.pop(b, None)  # reusing a registered block ends its registration
        if key is not None:
            del self._block_of_key[key]
        self._ref[b] = 1
        return b

    def _allocate(self, plan) -> None:
        need = []
        for sid, _start, end in plan:
            have = len(self._tables[sid])
            need.append((sid, max(0, -(-end // self.block_size) - have)))
        check_room(self.kind, sum(n for _, n in need), len(self._free), "block(s)")
        for sid, n in need:
            self._tables[sid].extend(self._take() for _ in range(n))

    def _release(self, seq_id: Hashable) -> None:
        for b in self._tables.pop(seq_id):
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free.append(b)

    def _rows(self, seq_id: Hashable, start: int, end: int) -> torch.Tensor:
        pos = torch.arange(start, end, dtype=torch.int64, device="cpu")
        table = torch.tensor(self._tables[seq_id], dtype=torch.int64, device="cpu")
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def block_table(self, seq_id: Hashable) -> list[int]:
        self._state(seq_id)
        return list(self._tables[seq_id])

    # ---- prefix reuse ------------------------------------------------------------------------

    def begin(self, seq_id: Hashable, prompt: Sequence[int] | None = None) -> int:
        """Start a sequence; share the registered full blocks its prompt starts with.

        Returns the number of prompt tokens whose K/V are reused (a multiple of block_size, at most
        ``len(prompt) - 1``); the caller prefills ``prompt[returned:]``."""
        if seq_id in self.seqs:
            raise KVCacheError(f"paged cache: sequence {seq_id!r} already exists")
        blocks: list[int] = []
        if self.prefix_reuse and prompt:
            key = b""
            bs = self.block_size
            for i in range((len(prompt) - 1) // bs):
                key = _block_key(key, prompt[i * bs : (i + 1) * bs])
                b = self._block_of_key.get(key)
                if b is None:
                    break
                blocks.append(b)
        for b in blocks:
            if self._ref[b] == 0:
                self._free.remove(b)  # a freed but still registered block: revived
            self._ref[b] += 1
        n = len(blocks) * self.block_size
        self._tables[seq_id] = blocks
        self.seqs[seq_id] = SeqState(length=n, tokens=list(prompt[:n]) if n else [])
        self.hits += n
        return n

    def _on_commit(self, seq_id: Hashable, st: SeqState, start: int) -> None:
        if not self.prefix_reuse:
            return
        bs = self.block_size
        table = self._tables[seq_id]
        # register every block that became full in this step (chain keys over all ids so far)
        for i in range(start // bs, st.length // bs):
            ids = st.tokens[: (i + 1) * bs]
            if any(t < 0 for t in ids):
                return  # ids unknown (commit without tokens): not shareable
            key = b""
            for j in range(i + 1):
                key = _block_key(key, ids[j * bs : (j + 1) * bs])
            if key not in self._block_of_key and table[i] not in self._key_of_block:
                self._block_of_key[key] = table[i]
                self._key_of_block[table[i]] = key

    def stats(self) -> dict:
        return {
            **super().stats(),
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "free_blocks": len(self._free),
            "registered_blocks": len(self._block_of_key),
            "prefix_hit_tokens": self.hits,
        }
