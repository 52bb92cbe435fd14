"""What both KV caches share: sequences, the reserve → write → gather → commit step, and storage.

Storage, per layer: K and V as ``[rows, Hkv, D]`` in the execution dtype (BF16), where a *row* is
one token's K (or V) for all KV heads. The cache stores exactly the BF16 values the layer computed
(after qk_norm and RoPE for K), and attention reads exactly those values back — prefill, chunked
prefill and decode all attend to the cache, so they see identical keys.

How rows are laid out is the only thing the caches differ in: B1 (:class:`ContiguousKVCache`) gives
each sequence a slot of ``max_len`` consecutive rows; B2 (:class:`PagedKVCache`) maps positions to
rows through a block table. Both turn a step into index tensors once, and every layer uses them.

A step is all-or-nothing: :meth:`KVCache.reserve` validates every sequence of the step and
allocates before anything is written, so a request that cannot be served raises and leaves every
other sequence's entries untouched; :meth:`KVCache.commit` advances the cursors only after every
layer has written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch

from .errors import CacheFull, KVCacheError, SequenceFinished, UnknownSequence


@dataclass
class SeqState:
    length: int = 0  # tokens whose K/V are committed (the cursor)
    finished: bool = False
    tokens: list[int] = field(default_factory=list)  # committed token ids (B2 hashes full blocks of them)


@dataclass(frozen=True)
class Step:
    """One model step over some sequences, turned into index tensors.

    Shapes: ``write_rows`` [T] (storage row of each new token, sequences in ``seq_ids`` order, each
    sequence's new tokens in position order; on the cache's device), ``q_pos`` [T], ``read_rows``
    [sum(ends)] (storage rows of positions 0..end-1 of each sequence, on the device; made on first use),
    ``cu_seqlens_q`` / ``cu_seqlens_k`` [B+1] (host; ``dev`` holds their device copies, made once per step
    rather than once per layer).

    ``view``: when the sequences' storage rows lie in ascending runs that start at each sequence's
    position 0 (B1's slots in ascending slot order), attention can read the keys in place: rows
    [lo, hi) of the storage as one contiguous view, sequence b's keys from ``dev["cu_view_k"][b]`` on
    (its range runs up to the next sequence's slot; only keys 0..q_pos are ever read). No gather then."""

    seq_ids: tuple
    starts: tuple[int, ...]
    counts: tuple[int, ...]
    write_rows: torch.Tensor
    read_host: torch.Tensor
    q_pos: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    dev: dict = field(default_factory=dict, compare=False)
    view: tuple[int, int] | None = None

    @property
    def ends(self) -> tuple[int, ...]:
        return tuple(s + n for s, n in zip(self.starts, self.counts))

    @property
    def read_rows(self) -> torch.Tensor:
        if "read_rows" not in self.dev:
            self.dev["read_rows"] = self.read_host.to(self.write_rows.device)
        return self.dev["read_rows"]


def _offsets(lengths: Sequence[int]) -> torch.Tensor:
    return torch.tensor([0, *lengths], dtype=torch.int64, device="cpu").cumsum(0)


class KVCache(ABC):
    """K/V of every layer for a set of sequences (see the module docstring).

    Shapes: ``n_layers`` layers of K and V, each ``[rows, n_kv_heads, head_dim]`` in ``dtype``."""

    kind = "abstract"

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        max_len: int,
        dtype: torch.dtype = torch.bfloat16,
        device: str | torch.device = "cpu",
    ):
        for name, val in (
            ("n_layers", n_layers),
            ("n_kv_heads", n_kv_heads),
            ("head_dim", head_dim),
            ("max_len", max_len),
        ):
            if not isinstance(val, int) or val <= 0:
                raise KVCacheError(f"{self.kind} cache: {name} must be a positive int, got {val!r}")
        self.n_layers, self.n_kv_heads, self.head_dim, self.max_len = n_layers, n_kv_heads, head_dim, max_len
        self.dtype, self.device = dtype, torch.device(device)
        self.seqs: dict[Hashable, SeqState] = {}
        self._k: list[torch.Tensor | None] = [None] * n_layers
        self._v: list[torch.Tensor | None] = [None] * n_layers

    # ---- layout (what B1 and B2 define) ------------------------------------------------------

    @property
    @abstractmethod
    def capacity_rows(self) -> int:
        """Rows of storage per layer."""

    @abstractmethod
    def _rows(self, seq_id: Hashable, start: int, end: int) -> torch.Tensor:
        """Storage rows of positions [start, end) of a sequence (its space must be allocated)."""

    @abstractmethod
    def _allocate(self, plan: list[tuple[Hashable, int, int]]) -> None:
        """Make room for positions [start, end) of every (seq, start, end), all or nothing."""

    @abstractmethod
    def _release(self, seq_id: Hashable) -> None:
        """Give a freed sequence's space back."""

    def _on_commit(self, seq_id: Hashable, state: SeqState, start: int) -> None:
        """Hook after a sequence's cursor advanced (B2 registers full blocks for prefix reuse)."""
        return None

    # ---- sequences ---------------------------------------------------------------------------

    def _state(self, seq_id: Hashable) -> SeqState:
        st = self.seqs.get(seq_id)
        if st is None:
            raise UnknownSequence(f"{self.kind} cache: unknown sequence {seq_id!r} (never begun, or freed)")
        return st

    def begin(self, seq_id: Hashable, prompt: Sequence[int] | None = None) -> int:
        """Start a sequence; returns how many leading prompt tokens already have cached K/V (0 here)."""
        if seq_id in self.seqs:
            raise KVCacheError(f"{self.kind} cache: sequence {seq_id!r} already exists")
        self._admit(seq_id)
        self.seqs[seq_id] = SeqState()
        return 0

    def _admit(self, seq_id: Hashable) -> None:
        """Check there is room for one more sequence (B1: a free slot)."""
        return None

    def length(self, seq_id: Hashable) -> int:
        return self._state(seq_id).length

    def finish(self, seq_id: Hashable) -> None:
        """Mark a sequence finished: its entries stay readable, further writes are refused."""
        self._state(seq_id).finished = True

    def free(self, seq_id: Hashable) -> None:
        self._state(seq_id)
        self._release(seq_id)
        del self.seqs[seq_id]

    # ---- a step ------------------------------------------------------------------------------

    def reserve(self, counts: dict[Hashable, int]) -> Step:
        """Validate and allocate ``counts[seq]`` new positions per sequence (appended at its cursor).

        Nothing is written and no cursor moves; an error leaves the cache exactly as it was."""
        if not counts:
            raise KVCacheError(f"{self.kind} cache: a step needs at least one sequence")
        plan = []
        for sid, n in counts.items():
            st = self._state(sid)
            if st.finished:
                raise SequenceFinished(f"{self.kind} cache: sequence {sid!r} is finished; it takes no more tokens")
            if not isinstance(n, int) or n <= 0:
                raise KVCacheError(
                    f"{self.kind} cache: sequence {sid!r}: new token count must be a positive int, got {n!r}"
                )
            if st.length + n > self.max_len:
                raise CacheFull(
                    f"{self.kind} cache: sequence {sid!r} would hold {st.length + n} tokens; max_len is {self.max_len}"
                )
            plan.append((sid, st.length, st.length + n))
        self._allocate(plan)
        write = torch.cat([self._rows(s, a, b) for s, a, b in plan])
        read = torch.cat([self._rows(s, 0, b) for s, _, b in plan])
        q_pos = torch.cat([torch.arange(a, b, dtype=torch.int64, device="cpu") for _, a, b in plan])
        cu_q, cu_k = _offsets([b - a for _, a, b in plan]), _offsets([b for _, _, b in plan])
        # the index tensors on the storage's device, once per step (every layer uses them)
        dev = {
            "q_pos": q_pos.to(self.device),
            "cu_seqlens_q": cu_q.to(self.device),
            "cu_seqlens_k": cu_k.to(self.device),
        }
        starts = self._view_starts(plan)
        view = None
        if starts is not None:
            lo, hi = starts[0], starts[-1] + plan[-1][2]
            view = (lo, hi)
            dev["cu_view_k"] = torch.tensor([s - lo for s in starts] + [hi - lo], dtype=torch.int64, device="cpu").to(
                self.device
            )
        return Step(
            seq_ids=tuple(s for s, _, _ in plan),
            starts=tuple(a for _, a, _ in plan),
            counts=tuple(b - a for _, a, b in plan),
            write_rows=write.to(self.device),
            read_host=read,  # write rows index the storage where it lives
            q_pos=q_pos,
            cu_seqlens_q=cu_q,
            cu_seqlens_k=cu_k,
            dev=dev,
            view=view,
        )

    def _view_starts(self, plan) -> list[int] | None:
        """Storage row of each planned sequence's position 0 when attention can read the keys in place (see
        :class:`Step`), else None. B2 (block tables) never can."""
        return None

    def storage(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s K and V storage, each [capacity_rows, n_kv_heads, head_dim] in the cache dtype on
        its device, zero-filled on first use. A caller that captures a CUDA graph over the cache calls this for
        every layer first, so that the zero-fill is not captured; the rows belong to the cache (written by
        :meth:`write`, laid out by the step's ``write_rows``/``read_host``)."""
        if not 0 <= layer < self.n_layers:
            raise KVCacheError(f"{self.kind} cache: layer {layer} out of range [0, {self.n_layers})")
        if self._k[layer] is None:
            shape = (self.capacity_rows, self.n_kv_heads, self.head_dim)
            self._k[layer] = torch.zeros(shape, dtype=self.dtype, device=self.device)
            self._v[layer] = torch.zeros(shape, dtype=self.dtype, device=self.device)
        return self._k[layer], self._v[layer]

    def write(self, layer: int, step: Step, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the step's new K/V rows. k, v [T, Hkv, D] in the cache dtype (stored bit for bit)."""
        want = (step.write_rows.numel(), self.n_kv_heads, self.head_dim)
        for name, t in (("k", k), ("v", v)):
            if tuple(t.shape) != want:
                raise KVCacheError(f"{self.kind} cache: {name} must be {list(want)}, got {list(t.shape)}")
            if t.dtype != self.dtype:
                raise KVCacheError(
                    f"{self.kind} cache: {name} must be {self.dtype} (stored exactly, never cast), got {t.dtype}"
                )
        ks, vs = self.storage(layer)
        ks.index_copy_(0, step.write_rows, k.detach())
        vs.index_copy_(0, step.write_rows, v.detach())

    def gather(self, layer: int, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V [sum(ends), Hkv, D] of positions 0..end-1 of each of the step's sequences (packed)."""
        ks, vs = self.storage(layer)
        return ks.index_select(0, step.read_rows), vs.index_select(0, step.read_rows)

    def keys_for_attention(self, layer: int, step: Step) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(K, V, cu_seqlens_k) for the step's attention on the device: the storage rows read in place
        (``step.view``, no copy) when the layout allows, else the packed :meth:`gather`. The same keys at
        the same positions either way, so the same bits (a query reads keys 0..q_pos of its sequence)."""
        if step.view is not None:
            ks, vs = self.storage(layer)
            lo, hi = step.view
            return ks[lo:hi], vs[lo:hi], step.dev["cu_view_k"]
        k, v = self.gather(layer, step)
        return k, v, step.dev["cu_seqlens_k"]

    def commit(self, step: Step, tokens: dict[Hashable, Sequence[int]] | None = None) -> None:
        """Advance each sequence's cursor past the step's tokens (``tokens``: their ids, for B2's prefix reuse)."""
        for sid, start, n in zip(step.seq_ids, step.starts, step.counts):
            st = self._state(sid)
            if st.length != start:
                raise KVCacheError(
                    f"{self.kind} cache: sequence {sid!r} moved from {start} to {st.length} during the step"
                )
            st.length = start + n
            ids = list(tokens[sid]) if tokens and sid in tokens else None
            if ids is not None and len(ids) != n:
                raise KVCacheError(f"{self.kind} cache: sequence {sid!r}: {len(ids)} token ids for {n} new positions")
            st.tokens.extend(ids if ids is not None else [-1] * n)
            self._on_commit(sid, st, start)

    def advance(self, counts: dict[Hashable, int]) -> None:
        """Commit ``counts[seq]`` positions per sequence whose K/V something else wrote at the rows the cache
        assigns them (the rollout engine's replayed decode graphs write in place): the checks and allocation
        of :meth:`reserve`, the cursor move of :meth:`commit`, token ids unknown (-1) until
        :meth:`fill_tokens`; no index tensors are made."""
        if not counts:
            return
        plan = []
        for sid, n in counts.items():
            st = self._state(sid)
            if st.finished:
                raise SequenceFinished(f"{self.kind} cache: sequence {sid!r} is finished; it takes no more tokens")
            if st.length + n > self.max_len:
                raise CacheFull(
                    f"{self.kind} cache: sequence {sid!r} would hold {st.length + n} tokens; max_len is {self.max_len}"
                )
            plan.append((sid, st.length, st.length + n))
        self._allocate(plan)
        for sid, start, end in plan:
            st = self.seqs[sid]
            st.length = end
            st.tokens.extend([-1] * (end - start))
            self._on_commit(sid, st, start)

    def fill_tokens(self, seq_id: Hashable, start: int, ids: Sequence[int]) -> None:
        """The token ids of committed positions [start, start + len(ids)) that were committed without them
        (the rollout engine learns its sampled tokens once per window of decode steps); B2 registers the
        blocks they complete for prefix reuse, as a commit with the ids would have."""
        st = self._state(seq_id)
        ids = [int(t) for t in ids]
        if start < 0 or start + len(ids) > st.length:
            raise KVCacheError(
                f"{self.kind} cache: sequence {seq_id!r}: positions [{start}, {start + len(ids)}) are not all "
                f"committed (length {st.length})"
            )
        st.tokens[start : start + len(ids)] = ids
        self._on_commit(seq_id, st, start)

    def read(self, layer: int, seq_id: Hashable) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V [length, Hkv, D] committed for one sequence."""
        st = self._state(seq_id)
        ks, vs = self.storage(layer)
        rows = self._rows(seq_id, 0, st.length).to(self.device)
        return ks.index_select(0, rows), vs.index_select(0, rows)

    def stats(self) -> dict:
        return {
            "kind": self.kind,
            "sequences": len(self.seqs),
            "max_len": self.max_len,
            "capacity_rows": self.capacity_rows,
        }


def check_room(kind: str, need: int, have: int, what: str) -> None:
    if need > have:
        raise CacheFull(f"{kind} cache: the step needs {need} {what}, {have} free")
