"""pack / unpack: the profile-independent helper. Its cells are N/A (profile_independent), but the
round trip is still executed here and a failure is red, never N/A.

pack is index copies, so every check is bitwise — its "reference" is the copy itself:

* forward_accuracy:   unpack(pack(x)) equals x on the valid positions and the pad value elsewhere;
  cu_seqlens are the fixture's offsets.
* forward_invariance: the packed rows of a right-padded and a left-padded batch of the same
  sequences are the same bits.
* gradient_accuracy:  pack's backward puts dpacked back at the valid positions, zeros elsewhere;
  unpack's backward is pack of the gradient.
* gradient_invariance: those input gradients, read at the valid positions, are the same for left and
  right padding.

Shapes: x [B, S, H] BF16 (S = the case's padded length), lengths [B] from the fixture.
"""

from __future__ import annotations

import torch

import ws1_ops
from ws1_contract import Comparison, bitwise

from .cases import PackCase


def _valid(lengths: list[int], S: int, side: str, dev) -> torch.Tensor:
    v = torch.zeros(len(lengths), S, dtype=torch.bool, device="cpu")
    for b, L in enumerate(lengths):
        if side == "right":
            v[b, :L] = True
        else:
            v[b, S - L :] = True
    return v.to(dev)


def _padded(pc: PackCase, side: str, dev) -> tuple[torch.Tensor, torch.Tensor]:
    """The same logical tokens padded on ``side``: token j of sequence b is pc.x[b, j] either way."""
    B, S, _ = pc.x.shape
    valid = _valid(pc.lengths, S, side, dev)
    x = torch.full_like(pc.x, -7.0)  # a visible pad value (not 0): a leak would show
    for b, L in enumerate(pc.lengths):
        x[b][valid[b].cpu()] = pc.x[b, :L]
    return x.to(dev), valid


def check(pc: PackCase, judgment: str, dev: torch.device) -> list[Comparison]:
    out: list[Comparison] = []
    cu_want = ws1_ops.cu_seqlens_from_lengths(torch.tensor(pc.lengths, device="cpu"))
    packed_by_side, grad_by_side = {}, {}
    g = torch.Generator().manual_seed(17)
    T = sum(pc.lengths)
    dpacked = torch.randn(T, pc.x.shape[2], generator=g, device="cpu").to(pc.x.dtype).to(dev)
    for side in ("right", "left"):
        x, valid = _padded(pc, side, dev)
        if judgment.startswith("forward"):
            packed, cu = ws1_ops.pack(x, valid)
            packed_by_side[side] = packed
            if judgment == "forward_accuracy":
                out.append(bitwise(cu.cpu(), cu_want, f"{side}-padded cu_seqlens"))
                back = ws1_ops.unpack(packed, valid, pad_value=0)
                want = torch.where(valid[..., None], x, torch.zeros_like(x))
                out.append(bitwise(back, want, f"{side}-padded unpack(pack(x))"))
        else:
            leaf = x.detach().requires_grad_()
            packed, _ = ws1_ops.pack(leaf, valid)
            packed.backward(dpacked)
            want = ws1_ops.unpack(dpacked, valid, pad_value=0)
            grad_by_side[side] = leaf.grad[valid]
            if judgment == "gradient_accuracy":
                out.append(bitwise(leaf.grad, want, f"{side}-padded d(pack)"))
                pk = dpacked.detach().requires_grad_()
                ws1_ops.unpack(pk, valid, pad_value=0).backward(want)
                out.append(bitwise(pk.grad, dpacked, f"{side}-padded d(unpack)"))
    if judgment == "forward_invariance":
        out.append(bitwise(packed_by_side["left"], packed_by_side["right"], "packed rows, left vs right padding"))
    if judgment == "gradient_invariance":
        out.append(
            bitwise(
                grad_by_side["left"], grad_by_side["right"], "d(pack) at the valid positions, left vs right padding"
            )
        )
    return out
