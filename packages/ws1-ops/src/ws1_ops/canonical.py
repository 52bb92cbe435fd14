"""Canonical row order: what makes a parameter gradient independent of the batch layout.

A parameter's gradient is a sum over rows (tokens). Every such sum runs over rows in one order
fixed by the rows' *logical keys* — (sample rank, position) — never by where the rows sit in the
batch: padding rows dropped, rows stable-sorted by key, then reduced by a fixed-order kernel.
The same set of logical rows therefore feeds the reduction the same sequence of inputs, and the
bits of dW, dweight and dE match across B1/BN, padding, permutation and packing.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from .errors import OpInputError

PAD_KEY = -1
_POS_BITS = 32  # positions < 2**32, sample ranks < 2**31


def logical_keys(sample_rank: torch.Tensor, position: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """int64 key per row: ``sample_rank << 32 | position``; ``-1`` where ``valid`` is False (padding).

    Shapes: sample_rank, position, valid — [T]."""
    key = (sample_rank.to(torch.int64) << _POS_BITS) | position.to(torch.int64)
    if valid is not None:
        key = torch.where(valid.to(torch.bool), key, torch.full_like(key, PAD_KEY))
    return key


def sample_of(keys: torch.Tensor) -> torch.Tensor:
    """The sample rank of each (valid) logical key: its upper half. Shapes: [n] int64 -> [n] int64."""
    return keys >> _POS_BITS


def position_of(keys: torch.Tensor) -> torch.Tensor:
    """The position of each (valid) logical key: its lower half. Shapes: [n] int64 -> [n] int64."""
    return keys & ((1 << _POS_BITS) - 1)


# canonical_order's recent answers: one order per keys tensor (its identity and version; the entry holds the
# tensor, so the id cannot be reused while cached). A model passes one keys tensor to every op of a forward,
# so a backward computes the order once instead of once per parameter gradient.
_ORDERS: OrderedDict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
_ORDERS_KEPT = 8


def is_identity(perm: torch.Tensor, n_rows: int) -> bool:
    """True when ``perm`` is known to be 0..n_rows-1 (marked by :func:`canonical_order` or
    :func:`expand_rows`): the rows are already in canonical order and gathering them would be a copy of
    the same values in the same order. Never reads a tensor (no host sync)."""
    return bool(getattr(perm, "_ws1_identity", False)) and perm.numel() == n_rows


def canonical_order(row_keys: torch.Tensor | None, n_rows: int, op: str = "canonical_order") -> torch.Tensor:
    """Indices of the valid rows in canonical (ascending key) order, for ``op``'s parameter gradient.

    ``None`` keys are an error: rows "as given" would be batch order, the one order that changes
    with the layout. (A frozen weight needs no keys: its backward never asks for an order.)

    Keys on the host (how the model passes them) cost no device sync; the order is then also marked
    when it is the identity (:func:`is_identity`: no padding, rows already in key order), so a
    parameter gradient can read the rows in place instead of gathering a copy.

    Shapes: row_keys [n_rows] int64 -> [n_valid] int64."""
    if row_keys is None:
        raise OpInputError(
            f"{op}: a parameter gradient needs row_keys (the rows' logical keys); without them "
            "its rows would be reduced in batch order"
        )
    if row_keys.shape != (n_rows,):
        raise ValueError(f"row_keys must have shape [{n_rows}], got {tuple(row_keys.shape)}")
    ck = (id(row_keys), row_keys._version, n_rows)
    hit = _ORDERS.get(ck)
    if hit is not None and hit[0] is row_keys:
        _ORDERS.move_to_end(ck)
        return hit[1]
    valid = torch.nonzero(row_keys >= 0).flatten()
    keys = row_keys.index_select(0, valid)
    if keys.unique().numel() != keys.numel():
        raise ValueError("row_keys: two rows share a logical key; keys must identify rows")
    order = torch.sort(keys, stable=True).indices
    perm = valid.index_select(0, order)
    if (
        perm.device.type == "cpu"
        and perm.numel() == n_rows
        and bool(torch.equal(perm, torch.arange(n_rows, dtype=perm.dtype, device="cpu")))
    ):
        perm._ws1_identity = True
    _ORDERS[ck] = (row_keys, perm)
    while len(_ORDERS) > _ORDERS_KEPT:
        _ORDERS.popitem(last=False)
    return perm


def expand_rows(perm: torch.Tensor, inner: int) -> torch.Tensor:
    """Row order of a [T, inner] -> [T*inner] view: each token's ``inner`` rows (heads) in order."""
    out = (perm[:, None] * inner + torch.arange(inner, dtype=torch.int64, device=perm.device)[None, :]).reshape(-1)
    if getattr(perm, "_ws1_identity", False):
        out._ws1_identity = True  # 0..T-1 expanded is 0..T*inner-1
    return out
