"""B1: the in-repo contiguous KV cache — one slot of ``max_len`` consecutive rows per sequence.

Position p of the sequence in slot s lives in row ``s * max_len + p``. Allocation is a free slot;
freeing a sequence returns its slot (its rows are overwritten by the next user).
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

from .base import KVCache, check_room


class ContiguousKVCache(KVCache):
    """``max_seqs`` slots × ``max_len`` positions, per layer ``[max_seqs * max_len, Hkv, D]``."""

    kind = "contiguous"

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, *, max_seqs: int, max_len: int, **kw):
        super().__init__(n_layers, n_kv_heads, head_dim, max_len=max_len, **kw)
        if not isinstance(max_seqs, int) or max_seqs <= 0:
            raise ValueError(f"contiguous cache: max_seqs must be a positive int, got {max_seqs!r}")
        self.max_seqs = max_seqs
        self._free_slots = list(range(max_seqs))
        self._slot: dict[Hashable, int] = {}

    @property
    def capacity_rows(self) -> int:
        return self.max_seqs * self.max_len

    def _admit(self, seq_id: Hashable) -> None:
        check_room(self.kind, 1, len(self._free_slots), "slot(s)")
        # the lowest free slot: the live sequences stay packed at the front (the rollout engine's decode
        # graphs cover slots 0..n-1); which slot a sequence holds never changes a bit
        slot = min(self._free_slots)
        self._free_slots.remove(slot)
        self._slot[seq_id] = slot

    def _allocate(self, plan) -> None:
        pass  # a slot holds max_len positions; reserve() already checked the length

    def _release(self, seq_id: Hashable) -> None:
        self._free_slots.append(self._slot.pop(seq_id))

    def _view_starts(self, plan) -> list[int] | None:
        # in place when the step's sequences come in ascending slot order (each slot's rows run from its
        # position 0 up to the next slot, which covers every key the sequence has)
        slots = [self._slot[s] for s, _, _ in plan]
        if any(b <= a for a, b in zip(slots, slots[1:])):
            return None
        return [slot * self.max_len for slot in slots]

    def _rows(self, seq_id: Hashable, start: int, end: int) -> torch.Tensor:
        return torch.arange(start, end, dtype=torch.int64, device="cpu") + self._slot[seq_id] * self.max_len

    def slot(self, seq_id: Hashable) -> int:
        self._state(seq_id)
        return self._slot[seq_id]
