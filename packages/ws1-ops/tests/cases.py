"""Per-op test cases: canonical row inputs, shared params, and the call — one place for every test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

import ws1_ops
from ws1_contract.manifest import load_manifest
from ws1_ops import reference

BF16, F32 = torch.bfloat16, torch.float32
N_ROWS = 260  # > 257 so that every M in DEFAULT_MS is a strict subset


@dataclass
class Case:
    op: str
    rows: list[torch.Tensor]
    params: list[torch.Tensor]
    call: Callable  # (*rows, *params, row_keys) -> out
    ref: Callable  # (*rows, *params) -> FP32 out
    names: list[str]


def make(op: str, n: int = N_ROWS, seed: int = 0) -> Case:
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, dtype=BF16):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    if op == "embedding":
        V, H = 1000, 64
        ids = torch.randint(0, V, (n,), generator=g)
        ids[: n // 3] = ids[n // 3 : 2 * (n // 3)]  # repeated ids: dE sums several rows per id
        return Case(
            op,
            [ids],
            [r(V, H)],
            lambda i, w, row_keys: ws1_ops.embedding(i, w, row_keys),
            reference.embedding,
            ["ids", "weight"],
        )
    if op == "rms_norm":
        return Case(
            op,
            [r(n, 256, scale=3, dtype=F32)],
            [r(256)],
            lambda x, w, row_keys: ws1_ops.rms_norm(x, w, 1e-6, row_keys),
            lambda x, w: reference.rms_norm(x, w, 1e-6),
            ["x", "weight"],
        )
    if op == "qk_norm":
        return Case(
            op,
            [r(n, 4, 64, scale=2)],
            [r(64)],
            lambda x, w, row_keys: ws1_ops.qk_norm(x, w, 1e-6, row_keys),
            lambda x, w: reference.qk_norm(x, w, 1e-6),
            ["x", "weight"],
        )
    if op == "det_gemm":
        return Case(
            op,
            [r(n, 256)],
            [r(384, 256, scale=0.06)],
            lambda x, w, row_keys: ws1_ops.det_gemm(x, w, row_keys),
            reference.det_gemm,
            ["x", "weight"],
        )
    if op == "lm_head":
        return Case(
            op,
            [r(n, 128)],
            [r(1000, 128, scale=0.09)],
            lambda x, w, row_keys: ws1_ops.lm_head(x, w, row_keys),
            reference.lm_head,
            ["x", "weight"],
        )
    if op == "rope":
        pos = torch.randint(0, 40960, (n,), generator=g)
        return Case(
            op,
            [r(n, 4, 64), pos],
            [],
            lambda x, p, row_keys: ws1_ops.rope(x, p, 1e6),
            lambda x, p: reference.rope(x, p, 1e6),
            ["x", "positions"],
        )
    if op == "silu":
        return Case(op, [r(n, 512, scale=3)], [], lambda x, row_keys: ws1_ops.silu(x), reference.silu, ["x"])
    if op == "swiglu":
        return Case(
            op,
            [r(n, 512, scale=3), r(n, 512, scale=2)],
            [],
            lambda a, b, row_keys: ws1_ops.swiglu(a, b),
            reference.swiglu,
            ["gate", "up"],
        )
    if op == "logprob":
        V = 1000
        return Case(
            op,
            [r(n, V, scale=4, dtype=F32), torch.randint(0, V, (n,), generator=g)],
            [],
            lambda lg, t, row_keys: ws1_ops.logprob(lg, t),
            reference.logprob,
            ["logits", "targets"],
        )
    if op == "batch_invariant_logp":
        return Case(
            op,
            [r(n, 1000, scale=4, dtype=F32)],
            [],
            lambda lg, row_keys: ws1_ops.batch_invariant_logp(lg),
            reference.batch_invariant_logp,
            ["logits"],
        )
    raise KeyError(op)


# the node table's per-token nodes (rows independent): every required node but attention
PER_ROW_OPS = load_manifest().nodes_where(rows="token", required=True)


def forward_accuracy(c: Case, contract):
    """The case's op vs its FP32 reference, with the contract's BF16 forward_accuracy row."""
    from ws1_contract import within_tolerance

    got = c.call(*c.rows, *c.params, row_keys=None)
    th = contract.resolve("forward_accuracy", c.op, "bfloat16")
    return within_tolerance(got, c.ref(*c.rows, *c.params), th.atol, th.rtol, c.op)


def gradient_accuracy(c: Case, contract, seed: int = 3) -> list:
    """Every input and parameter gradient of the case vs torch.autograd through the FP32 reference,
    with the contract's BF16 gradient_accuracy row. Returns one Comparison per gradient."""
    from ws1_contract import within_tolerance

    th = contract.resolve("gradient_accuracy", c.op, "bfloat16")
    xs = [t.detach().requires_grad_(t.is_floating_point()) for t in c.rows + c.params]
    n = c.rows[0].shape[0]  # a parameter gradient needs the rows' logical keys (one sample, positions 0..n-1)
    out = c.call(*xs, row_keys=ws1_ops.logical_keys(torch.zeros(n, dtype=torch.int64), torch.arange(n)))
    dy = (torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)) * 0.5).to(out.dtype)
    out.backward(dy)
    refs = [t.detach().float().requires_grad_() if t.is_floating_point() else t for t in c.rows + c.params]
    c.ref(*refs).backward(dy.float())
    return [
        within_tolerance(a.grad, b.grad, th.atol, th.rtol, f"{c.op} d{name}")
        for name, a, b in zip(c.names, xs, refs)
        if a.grad is not None
    ]
