"""WS1's attention on vLLM's paged KV cache.

The model declares one vLLM ``Attention`` layer per decoder layer and never calls it: the layers only make vLLM
allocate a KV cache per layer (``layer.kv_cache``) and build per-layer metadata each step (``attn_metadata[layer
name]``: ``query_start_loc``, ``seq_lens``, ``block_table``, ``slot_mapping``). Each step, per layer, this module
writes the step's K/V rows at their slots, gathers every sequence's keys ``0..seq_len-1`` through its block table,
and runs ``ws1_ops.attention`` over them — the arithmetic of WS1's own KV path, so a token's attention output has
the bits of teacher forcing's whatever the batch, the chunking, the prefix-cache hits or the block placement.

The one layout this knows (all its facts are in :func:`kv_rows`)::

    CPU_ATTN (vLLM 0.32 CPUAttentionBackend, KV layout LBHNC), one tensor per layer:
        [num_blocks, num_kv_heads, block_size, 2 * head_dim]  BF16
    viewed as [num_blocks, num_kv_heads, 2 * block_size, head_dim]: per (block, kv head) the block's K rows
    [0, block_size) then its V rows [block_size, 2 * block_size). Slot s is block s // block_size, row
    s % block_size. Block 0 is vLLM's null block; newly allocated blocks are zeroed.

Any other backend or shape is refused (a GPU backend's ``[2, num_blocks, block_size, Hkv, D]``, for one): reading it
as this one would feed attention other bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import ws1_ops

from .errors import WS1VllmRefused

KNOWN_BACKEND = "CPU_ATTN"


def kv_rows(kv_cache: torch.Tensor, backend: str, num_kv_heads: int, head_dim: int) -> torch.Tensor:
    """The layer's KV cache as ``[num_blocks, num_kv_heads, 2 * block_size, head_dim]`` (a view: writes reach vLLM's
    tensor), K rows then V rows per (block, head); refused unless it is CPU_ATTN's layout (module docstring)."""
    shape = tuple(kv_cache.shape)
    if (
        backend != KNOWN_BACKEND
        or kv_cache.dim() != 4
        or shape[1] != num_kv_heads
        or shape[3] != 2 * head_dim
        or kv_cache.dtype != torch.bfloat16
    ):
        raise WS1VllmRefused(
            f"ws1_vllm: KV cache of backend {backend} with shape {list(shape)} {kv_cache.dtype} is not the layout the "
            f"plugin reads ({KNOWN_BACKEND}: [num_blocks, {num_kv_heads}, block_size, {2 * head_dim}] bfloat16)"
        )
    num_blocks, _, block_size, _ = shape
    return kv_cache.view(num_blocks, num_kv_heads, 2 * block_size, head_dim)


@dataclass(frozen=True)
class PagedStep:
    """One step's index tensors, shared by every layer of one metadata object (all on the metadata's device).

    T query rows (the step's tokens, requests in vLLM's batch order), R requests, Tk gathered key rows
    (``sum(seq_lens)``: each request's keys 0..seq_len-1, cached and new):

    * ``cu_q`` [R+1], ``cu_k`` [R+1] int64: the requests' query and key segments;
    * ``write_block``, ``write_row`` [T]: where each new token's K row sits (its V row: ``write_row + block_size``);
    * ``read_block``, ``read_row`` [Tk]: where each gathered key's K row sits (V likewise);
    * ``block_size``."""

    cu_q: torch.Tensor
    cu_k: torch.Tensor
    write_block: torch.Tensor
    write_row: torch.Tensor
    read_block: torch.Tensor
    read_row: torch.Tensor
    block_size: int

    @classmethod
    def of(cls, metadata, num_tokens: int, block_size: int) -> PagedStep:
        """From vLLM's per-layer attention metadata (``query_start_loc`` [R+1], ``seq_lens`` [R], ``block_table``
        [R, max_blocks], ``slot_mapping`` [>=T]) for a step of ``num_tokens`` rows. One host sync (the key count)."""
        cu_q = metadata.query_start_loc.long()
        actual = int(metadata.num_actual_tokens)
        if actual != num_tokens or int(cu_q[-1]) != num_tokens:
            # vLLM pads the token axis for CUDA graphs / compiled shapes; the plugin runs eager with no padding
            raise WS1VllmRefused(
                f"ws1_vllm: a step of {num_tokens} token rows has {actual} real tokens (query_start_loc ends at "
                f"{int(cu_q[-1])}): padded batches are refused (use enforce_eager=True)"
            )
        slots = metadata.slot_mapping[:num_tokens].long()
        seq_lens = metadata.seq_lens.long()
        cu_k = torch.nn.functional.pad(seq_lens.cumsum(0), (1, 0))
        num_keys = int(cu_k[-1])
        # key j of request r (0 <= j < seq_lens[r]) is row j % block_size of block block_table[r, j // block_size]
        request = torch.repeat_interleave(torch.arange(seq_lens.numel(), device=seq_lens.device), seq_lens)
        key_pos = torch.arange(num_keys, device=seq_lens.device) - cu_k[:-1][request]
        read_block = metadata.block_table.long()[request, key_pos // block_size]
        return cls(
            cu_q=cu_q,
            cu_k=cu_k,
            write_block=slots // block_size,
            write_row=slots % block_size,
            read_block=read_block,
            read_row=key_pos % block_size,
            block_size=block_size,
        )

    def attend(self, kv: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """Write the step's ``k``, ``v`` [T, Hkv, D] into ``kv`` (:func:`kv_rows`' view), gather every request's keys
        and values [Tk, Hkv, D], and return ``ws1_ops.attention`` of ``q`` [T, Hq, D] at absolute ``positions`` [T]
        -> [T, Hq, D] BF16 (the active ws1 profile's kernel)."""
        bs = self.block_size
        # kv[block, :, row] with two [n] index tensors around a slice: the indexed dims come first -> [n, Hkv, D]
        kv[self.write_block, :, self.write_row] = k
        kv[self.write_block, :, self.write_row + bs] = v
        keys = kv[self.read_block, :, self.read_row]
        values = kv[self.read_block, :, self.read_row + bs]
        return ws1_ops.attention(q, keys, values, self.cu_q, self.cu_k, positions)
