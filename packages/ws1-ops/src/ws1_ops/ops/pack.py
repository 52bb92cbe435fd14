"""pack / unpack: padded [B, S, ...] <-> packed [T, ...] + cu_seqlens. Profile-independent.

Pure index copies (no arithmetic), so one implementation serves every profile and the values are
moved bit for bit; its backward is the inverse copy. Left or right padding is described by a
boolean ``valid`` mask [B, S]. :func:`padded_segments` is the other way to run a padded batch:
every row, pad rows included, through the kernels, with padding as segments of its own.
"""

from __future__ import annotations

import torch

from ..errors import check


def cu_seqlens_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """[B] lengths -> [B+1] int64 offsets (0, l0, l0+l1, ...)."""
    return torch.cat(
        [torch.zeros(1, dtype=torch.int64, device=lengths.device), torch.cumsum(lengths.to(torch.int64), 0)]
    )


def pack(x: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop padding. x [B, S, ...], valid [B, S] bool -> (packed [T, ...], cu_seqlens [B+1] int64).

    Tokens keep their order within a sequence; sequences keep batch order."""
    check(
        valid.dtype == torch.bool and valid.dim() == 2,
        "pack",
        f"valid must be a [B, S] bool mask, got {valid.dtype} {tuple(valid.shape)}",
    )
    check(
        tuple(x.shape[:2]) == tuple(valid.shape),
        "pack",
        f"x must be [B, S, ...] with [B, S] = {tuple(valid.shape)}, got {tuple(x.shape)}",
    )
    idx = torch.nonzero(valid.reshape(-1)).flatten()
    packed = x.reshape(-1, *x.shape[2:]).index_select(0, idx)
    return packed, cu_seqlens_from_lengths(valid.sum(1))


def padded_segments(valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch as attention segments over *all* its rows, padding included.

    valid [B, S] bool (each batch row's valid tokens one contiguous run: left or right padding) ->
    (cu_seqlens [G+1] int64 over the B*S rows, q_pos [B*S] int64). In row order, each row's valid
    run is one segment and each run of padding another, and a row's position counts from its
    segment's start. An attention call over the whole padded layout then runs the pad rows as
    queries (garbage in, garbage out, their gradient included) while cu_seqlens keeps every
    sequence's queries and keys to its own tokens — and keeps the pad queries off them: a pad query
    attending real keys would carry its (garbage) dO into their dK/dV. Left padding needs the
    segments anyway: the kernel's key index is the key's position."""
    check(
        valid.dtype == torch.bool and valid.dim() == 2,
        "padded_segments",
        f"valid must be a [B, S] bool mask, got {valid.dtype} {tuple(valid.shape)}",
    )
    lengths, pos = [], []
    for b, row in enumerate(valid.cpu().tolist()):
        runs: list[list] = []  # [is_valid, length] per run of equal validity
        for v in row:
            if runs and runs[-1][0] == v:
                runs[-1][1] += 1
            else:
                runs.append([v, 1])
        check(
            sum(v for v, _ in runs) <= 1,
            "padded_segments",
            f"batch row {b}: its valid tokens are not one contiguous run",
        )
        for _, n in runs:
            lengths.append(n)
            pos += range(n)
    return cu_seqlens_from_lengths(torch.tensor(lengths, dtype=torch.int64, device="cpu")), torch.tensor(
        pos, dtype=torch.int64, device="cpu"
    )


def unpack(packed: torch.Tensor, valid: torch.Tensor, pad_value: float | int = 0) -> torch.Tensor:
    """Inverse of :func:`pack`: packed [T, ...], valid [B, S] -> [B, S, ...] with ``pad_value`` in padding."""
    check(valid.dtype == torch.bool and valid.dim() == 2, "unpack", "valid must be a [B, S] bool mask")
    B, S = valid.shape
    idx = torch.nonzero(valid.reshape(-1)).flatten()
    check(
        idx.numel() == packed.shape[0],
        "unpack",
        f"{packed.shape[0]} packed rows but the mask has {idx.numel()} valid positions",
    )
    out = torch.full((B * S, *packed.shape[1:]), pad_value, dtype=packed.dtype, device=packed.device)
    out = out.index_copy(0, idx, packed)
    return out.reshape(B, S, *packed.shape[1:])
