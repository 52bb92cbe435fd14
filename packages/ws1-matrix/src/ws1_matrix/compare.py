"""The contract's comparators over tensors of any size, in row blocks.

``ws1_contract.bitwise`` / ``within_tolerance`` materialize several full-size temporaries (an FP32
copy, the error, the bound, a mask). For the vocabulary-sized gradients of the representative cases
— dE and lm_head's dW are [151936, 4096] FP32, 2.5 GB each — that would need ~10 GB at once. The
rules are elementwise, so judging the tensor block by block with the same functions and merging the
results is the same judgment: every element is compared once, ``passed`` is the AND, ``n_diff`` the
sum, ``max_abs``/``max_rel`` the max, and the first failing block gives the first difference (with
its index shifted back to the whole tensor).
"""

from __future__ import annotations

import hashlib

import torch

from ws1_contract import Comparison, bitwise, within_tolerance

BLOCK_ELEMENTS = 1 << 24  # 16M elements: 64 MB of FP32 per temporary


def blocks(t: torch.Tensor) -> list[tuple[int, int]]:
    if t.dim() == 0 or t.numel() <= BLOCK_ELEMENTS:
        return [(0, t.shape[0] if t.dim() else 1)]
    per_row = max(1, t.numel() // max(1, t.shape[0]))
    step = max(1, BLOCK_ELEMENTS // per_row)
    return [(lo, min(t.shape[0], lo + step)) for lo in range(0, t.shape[0], step)]


def merge(parts: list[tuple[int, Comparison]], name: str, total: int, what: str) -> Comparison:
    bad = [(lo, c) for lo, c in parts if not c.passed]
    max_abs = max((c.max_abs for _, c in parts if c.max_abs is not None), default=None)
    rels = [c.max_rel for _, c in parts if c.max_rel is not None]
    max_rel = max(rels) if rels else None
    n_diff = sum(c.n_diff for _, c in parts)
    if not bad:
        extra = f"; max |err| {max_abs:.3e}" if what == "tolerance" and max_abs is not None else ""
        ok = f"bitwise equal ({total} elements)" if what == "bitwise" else f"within tolerance ({total} elements){extra}"
        return Comparison(True, f"{name}: {ok}", n_total=total, max_abs=max_abs, max_rel=max_rel)
    lo, first = bad[0]
    fd = dict(first.first_diff) if first.first_diff else None
    if fd is not None:
        fd["index"] = [fd["index"][0] + lo, *fd["index"][1:]]
    where = f" (index {fd['index']})" if fd is not None else ""
    mx = "n/a" if max_abs is None else f"{max_abs:.3e}"
    detail = (
        f"{name}: {n_diff} of {total} elements fail in {len(bad)} of {len(parts)} row blocks; "
        f"max |delta| {mx}; first failing block starts at row {lo}{where}: {first.detail}"
    )
    return Comparison(False, detail, n_total=total, n_diff=n_diff, max_abs=max_abs, max_rel=max_rel, first_diff=fd)


def bitwise_blocks(lhs: torch.Tensor, rhs: torch.Tensor, name: str) -> Comparison:
    """``ws1_contract.bitwise`` over row blocks (same verdict, bounded memory)."""
    if (
        not isinstance(lhs, torch.Tensor)
        or not isinstance(rhs, torch.Tensor)
        or lhs.shape != rhs.shape
        or lhs.dim() == 0
        or lhs.numel() <= BLOCK_ELEMENTS
    ):
        return bitwise(lhs, rhs, name)
    parts = [(lo, bitwise(lhs[lo:hi], rhs[lo:hi], name)) for lo, hi in blocks(lhs)]
    return merge(parts, name, lhs.numel(), "bitwise")


def tolerance_blocks(cand: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, name: str) -> Comparison:
    """``ws1_contract.within_tolerance`` over row blocks (same verdict, bounded memory)."""
    if (
        not isinstance(cand, torch.Tensor)
        or not isinstance(ref, torch.Tensor)
        or cand.shape != ref.shape
        or cand.dim() == 0
        or cand.numel() <= BLOCK_ELEMENTS
    ):
        return within_tolerance(cand, ref, atol, rtol, name)
    parts = [(lo, within_tolerance(cand[lo:hi], ref[lo:hi], atol, rtol, name)) for lo, hi in blocks(cand)]
    return merge(parts, name, cand.numel(), "tolerance")


_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def digest(t: torch.Tensor) -> list[str]:
    """sha256 of the raw bits of each row block of ``t`` (CPU). Two tensors of one shape and dtype
    have equal digests exactly when their bits are equal (up to a sha256 collision), so a gate can
    keep the digest of a 2.5 GB canonical gradient instead of the gradient itself."""
    c = t.detach().cpu().contiguous().reshape(t.shape if t.dim() else (1,))
    view = c.view(_INT[c.element_size()]) if c.is_floating_point() else c
    return [hashlib.sha256(view[lo:hi].numpy().data).hexdigest() for lo, hi in blocks(view)]
