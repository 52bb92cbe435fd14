"""pack / unpack: padded [B, S, ...] <-> packed [T, ...] + cu_seqlens. Profile-independent.

Pure index copies (no arithmetic), so one implementation serves every profile and the values are
moved bit for bit; its backward is the inverse copy. Left or right padding is described by a
boolean ``valid`` mask [B, S].
"""

from __future__ import annotations

import torch

from ..errors import check


def cu_seqlens_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """[B] lengths -> [B+1] int64 offsets (0, l0, l0+l1, ...)."""
    return torch.cat([torch.zeros(1, dtype=torch.int64, device=lengths.device), torch.cumsum(lengths.to(torch.int64), 0)])


def pack(x: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop padding. x [B, S, ...], valid [B, S] bool -> (packed [T, ...], cu_seqlens [B+1] int64).

    Tokens keep their order within a sequence; sequences keep batch order."""
    check(valid.dtype == torch.bool and valid.dim() == 2, "pack", f"valid must be a [B, S] bool mask, got {valid.dtype} {tuple(valid.shape)}")
    check(tuple(x.shape[:2]) == tuple(valid.shape), "pack", f"x must be [B, S, ...] with [B, S] = {tuple(valid.shape)}, got {tuple(x.shape)}")
    idx = torch.nonzero(valid.reshape(-1)).flatten()
    packed = x.reshape(-1, *x.shape[2:]).index_select(0, idx)
    return packed, cu_seqlens_from_lengths(valid.sum(1))


def unpack(packed: torch.Tensor, valid: torch.Tensor, pad_value: float | int = 0) -> torch.Tensor:
    """Inverse of :func:`pack`: packed [T, ...], valid [B, S] -> [B, S, ...] with ``pad_value`` in padding."""
    check(valid.dtype == torch.bool and valid.dim() == 2, "unpack", "valid must be a [B, S] bool mask")
    B, S = valid.shape
    idx = torch.nonzero(valid.reshape(-1)).flatten()
    check(idx.numel() == packed.shape[0], "unpack", f"{packed.shape[0]} packed rows but the mask has {idx.numel()} valid positions")
    out = torch.full((B * S, *packed.shape[1:]), pad_value, dtype=packed.dtype, device=packed.device)
    out = out.index_copy(0, idx, packed)
    return out.reshape(B, S, *packed.shape[1:])
