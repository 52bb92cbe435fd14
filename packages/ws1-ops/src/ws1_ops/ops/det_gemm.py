"""det_gemm: y = x @ weight.T with a fixed per-element reduction order (the q/k/v/o/gate/up/down projections).

Shapes: x [M, K] BF16, weight [N, K] -> y [M, N] BF16.
Every output element accumulates its K products serially in FP32 (one FMA per k, ascending), in
every tile and on every ISA, so a row's bits depend on nothing but that row. Backward:
dx = dy @ weight (per row), dweight = dy.T @ x with the row reduction in canonical order.
"""

from __future__ import annotations

import functools

import torch

from .. import grads
from ..canonical import canonical_order
from ..errors import check, check_float, check_rank
from ._common import backward, exec_dtype, param_grad, start

OP = "det_gemm"


class DetGemm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, row_keys, op):
        w = exec_dtype(weight)
        k = start(op, x, w)
        ctx.k, ctx.weight = k, weight
        ctx.save_for_backward(x, w, row_keys)
        return k.fwd(x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w, row_keys = ctx.saved_tensors
        dy = dy.contiguous()
        dx = backward(ctx.k, dy, x, w) if ctx.needs_input_grad[0] else None  # per row: dx = dy @ weight
        if not ctx.needs_input_grad[1]:  # a frozen weight: no row reduction at all
            return dx, None, None, None
        scope = grads.current()
        if scope is not None:  # one reduction over all calls' rows, later
            scope.stash(ctx.weight, ctx.k, row_keys, dy, x)
            return dx, None, None, None
        grads.refuse_tied_outside_scope(ctx.weight, ctx.k.op)  # lm_head on tied embeddings
        dw = param_grad(ctx.k, dy, x, canonical_order(row_keys, x.shape[0], ctx.k.op))
        return dx, dw, None, None


class DetGemmKTree(DetGemm):
    """det_gemm's forward in the K-tree order (``chunks`` aligned K chunks, each det_gemm_partial's serial FP32
    chain, summed by ``grads.tree_sum``, rounded once); its backward is det_gemm's (neither dx nor dweight sums over
    K, so the K order of the forward does not reach them)."""

    @staticmethod
    def forward(ctx, x, weight, row_keys, op, chunks):
        w = exec_dtype(weight)
        ctx.k, ctx.weight = start(op, x, w), weight
        ctx.save_for_backward(x, w, row_keys)
        return det_gemm_partial(x, w, chunks).to(torch.bfloat16)  # the one rounding

    @staticmethod
    def backward(ctx, dy):
        return (*DetGemm.backward(ctx, dy), None)


def _check(op: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    check_float(x, op, "x", ("bfloat16",))
    check_rank(x, 2, op, "x", "[M, K]")
    check_float(weight, op, "weight")
    check_rank(weight, 2, op, "weight", "[N, K]")
    check(x.shape[1] == weight.shape[1], op, f"K mismatch: x has K={x.shape[1]}, weight has K={weight.shape[1]}")


def det_gemm(
    x: torch.Tensor, weight: torch.Tensor, row_keys: torch.Tensor | None = None, k_chunks: int | None = None
) -> torch.Tensor:
    """Batch-invariant linear layer. x [M, K] BF16, weight [N, K] (BF16, or an FP32 master) -> [M, N] BF16.

    ``row_keys`` [M] orders dweight's row reduction canonically; -1 rows (padding) are dropped. ``k_chunks``: None,
    the default order (one serial chain over K); c, the parallel-invariant order of a row-parallel layer
    (docs/parallel.md): K in c aligned chunks, each chunk's serial FP32 chain (:func:`det_gemm_partial`), the chunks
    summed by ``ws1_ops.tree_sum``, rounded once — the bits a tensor-parallel split of K into c/T chunks per rank
    reproduces (``ws1_dist.TPOps``). The backward is the same in both orders."""
    _check(OP, x, weight)
    if k_chunks is None:
        return DetGemm.apply(x.contiguous(), weight, row_keys, OP)
    check(
        isinstance(k_chunks, int) and k_chunks >= 1 and x.shape[1] % k_chunks == 0,
        OP,
        f"k_chunks must be a positive int dividing K={x.shape[1]}, got {k_chunks!r}",
    )
    return DetGemmKTree.apply(x.contiguous(), weight, row_keys, OP, k_chunks)


def det_gemm_partial(x: torch.Tensor, weight: torch.Tensor, k_chunks: int = 1) -> torch.Tensor:
    """A split GEMM's FP32 partial: x @ weight.T, every output element's K products accumulated serially in FP32
    (one FMA per k, ascending) — det_gemm's chain without its final rounding, by the family's own FP32 GEMM (the
    kernel behind det_gemm's dx). x [M, Kc] BF16, weight [N, Kc] -> [M, N] FP32. ``k_chunks`` = c > 1: Kc in c
    aligned chunks, each that chain from +0, summed by ``ws1_ops.tree_sum`` — the node of an aligned block of the
    parallel-invariant order's tree (docs/parallel.md: c = 8 on one device; 8 / T on each of T tensor-parallel ranks).
    On cpu_bf16 a single chunk rounded is det_gemm's own bits (tested) on every ISA path but the opt-in AMX one,
    whose tile instruction sums pairs of products (a fixed order, another one); the GPU and NPU families' dx kernels
    are serial FP32 chains too, their equality with det_gemm unmeasured. Forward only."""
    _check(OP, x, weight)
    check(
        isinstance(k_chunks, int) and k_chunks >= 1 and x.shape[1] % k_chunks == 0,
        OP,
        f"k_chunks must be a positive int dividing K={x.shape[1]}, got {k_chunks!r}",
    )
    w = exec_dtype(weight)
    k = start(OP, x, w)

    def chunk(c: int) -> torch.Tensor:
        kc = x.shape[1] // k_chunks
        xs, ws = x[:, c * kc : (c + 1) * kc], w[:, c * kc : (c + 1) * kc]
        # the dx kernel computes dy @ w for dy [M, N'] and w [N', K']: here dy := x, w := weight.T, a view (the
        # kernel reads weight's rows, a K chunk of a wider weight included, in place: no transposed copy)
        return backward(k, xs.contiguous(), None, ws.t()).float()

    with torch.no_grad():
        if k_chunks == 1:
            return chunk(0)
        return grads.tree_sum([(c, functools.partial(chunk, c)) for c in range(k_chunks)])
