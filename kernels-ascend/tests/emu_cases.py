"""Shared inputs and calls for the emulated Ascend kernels' tests: one Case per node, on the raw
torch.ops.ws1_ascend_emu ops (no ws1_ops profile: emulated runs are never a WS1 family's evidence).

Shapes are smaller than the cpu family's (the emulator runs every vector lane and every Cube MAC as scalar C++)
but cross every fixed tile boundary the kernels have: rows/N past the Cube's 64 x 128 tile, K past baseK 64,
H and V past the 4096-element UB tile, keys past the 32-key attention tile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import ws1_kernels_ascend_emu  # noqa: F401  registers torch.ops.ws1_ascend_emu

from ws1_ops import reference

E = torch.ops.ws1_ascend_emu
BF16, F32 = torch.bfloat16, torch.float32
EPS = 1e-6


@dataclass
class Case:
    op: str
    rows: list[torch.Tensor]  # row inputs [n, ...]
    params: list[torch.Tensor]  # shared inputs
    fwd: Callable  # (*rows, *params) -> output tensor [n, ...]
    ref: Callable  # (*rows, *params) -> FP32 reference


def make(op: str, n: int, seed: int = 0) -> Case:
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, dtype=BF16):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    if op == "embedding":
        V, H = 300, 4200
        ids = torch.randint(0, V, (n,), generator=g)
        return Case(op, [ids], [r(V, H)], lambda i, w: E.embedding(i, w), reference.embedding)
    if op == "rms_norm":
        return Case(
            op,
            [r(n, 4200, scale=3, dtype=F32)],
            [r(4200)],
            lambda x, w: E.rms_norm(x, w, EPS)[0],
            lambda x, w: reference.rms_norm(x, w, EPS),
        )
    if op == "qk_norm":
        return Case(
            op,
            [r(n, 4, 128, scale=2)],
            [r(128)],
            lambda x, w: E.qk_norm(x, w, EPS)[0],
            lambda x, w: reference.qk_norm(x, w, EPS),
        )
    if op == "det_gemm":
        return Case(op, [r(n, 200)], [r(150, 200, scale=0.07)], lambda x, w: E.det_gemm(x, w), reference.det_gemm)
    if op == "lm_head":
        return Case(op, [r(n, 136)], [r(260, 136, scale=0.09)], lambda x, w: E.lm_head(x, w), reference.lm_head)
    if op == "rope":
        pos = torch.randint(0, 40960, (n,), generator=g)
        return Case(
            op, [r(n, 2, 128), pos], [], lambda x, p: E.rope(x, p, 1e6, False), lambda x, p: reference.rope(x, p, 1e6)
        )
    if op == "silu":
        return Case(op, [r(n, 4200, scale=3)], [], lambda x: E.silu(x), reference.silu)
    if op == "swiglu":
        return Case(op, [r(n, 4200, scale=3), r(n, 4200, scale=2)], [], lambda a, b: E.swiglu(a, b), reference.swiglu)
    if op == "logprob":
        V = 5000
        return Case(
            op,
            [r(n, V, scale=4, dtype=F32), torch.randint(0, V, (n,), generator=g)],
            [],
            lambda lg, t: E.logprob(lg, t)[0],
            reference.logprob,
        )
    if op == "batch_invariant_logp":
        return Case(
            op,
            [r(n, 5000, scale=4, dtype=F32)],
            [],
            lambda lg: E.batch_invariant_logp(lg)[0],
            reference.batch_invariant_logp,
        )
    raise KeyError(op)


def attention_inputs(lens, Hq=4, Hkv=2, D=64, seed=0):
    """Packed prefill inputs for sequences of the given lengths: q, k, v, cu, q_pos."""
    g = torch.Generator().manual_seed(seed)
    T = sum(lens)
    q = torch.randn(T, Hq, D, generator=g).bfloat16()
    k = torch.randn(T, Hkv, D, generator=g).bfloat16()
    v = torch.randn(T, Hkv, D, generator=g).bfloat16()
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    q_pos = torch.cat([torch.arange(n) for n in lens])
    return q, k, v, cu, q_pos


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return t.view(torch.int16) if t.dtype == BF16 else t.view(torch.int32) if t.dtype == F32 else t


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))
