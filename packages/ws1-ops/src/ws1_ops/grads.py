"""Canonical parameter gradients across calls: one reduction over every row that touched a parameter.

Inside one op call the rows of a parameter gradient are already reduced in canonical order. But a
parameter used by several calls — four B=1 forwards whose losses are summed (the B1 cell), or a
model run twice — would get ``dW_0 + dW_1 + ...`` from autograd: partial sums added in an order
that follows the call structure, so B1 and BN would differ in the last bits.

``with ws1_ops.canonical_grads(): loss.backward()`` fixes that: inside the scope each op's
backward returns only its input gradients and *stashes* its parameter rows (logical keys, output
gradient, input); on exit every parameter's rows from every call are concatenated, put in
canonical order, and reduced once by the same family kernel. The result depends only on the set
of logical rows, however they were split into calls. The gradient lands in ``param.grad``
(added to an existing one), in the parameter's dtype.

A parameter read by two ops — tied embeddings: the table is ``embedding``'s weight and ``lm_head``'s,
marked by :func:`tie` — has one contribution per op, each reduced as above (FP32, its own rows in
canonical order: every token for the embedding, the head's rows for lm_head). They are combined in one
fixed way (:func:`combine`): each in FP32, added in op-name order — ``embedding + lm_head``, one FP32
add per element (commutative, so the order of two terms cannot change a bit; it is fixed for any
count) — and rounded to the parameter's dtype once. Outside the scope autograd would round each
contribution to BF16 and add them in BF16, so a tied parameter's backward outside it is refused.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from .canonical import canonical_order, expand_rows, position_of, sample_of
from .errors import OpInputError
from .registry import Kernel, note

_scopes: list[CanonicalGrads] = []
ORDERS = ("serial", "sample_tree", "chunk_tree")  # canonical_grads' reduction orders
TREE_CHUNK = 128  # positions per leaf of the chunk_tree order (context parallel's query chunks, ws1_dist.CP_CHUNK)


def leaf_of(keys: torch.Tensor, order: str) -> torch.Tensor:
    """The tree leaf of each (valid) logical key in a tree order: ``sample_tree`` the sample rank; ``chunk_tree``
    (position // TREE_CHUNK) · 2^32 + the sample rank — the chunk major, so a rank holding an aligned block of every
    sample's chunks (context parallel) holds one aligned block of leaves. [n] int64 -> [n] int64."""
    sample = sample_of(keys)
    if order == "sample_tree":
        return sample
    return ((position_of(keys) // TREE_CHUNK) << 32) | sample


_lock = threading.Lock()


@dataclass
class _Stash:
    param: torch.Tensor
    kernel: Kernel
    keys: list[torch.Tensor] = field(default_factory=list)
    tensors: list[tuple[torch.Tensor, ...]] = field(default_factory=list)
    inner: int = 1  # rows per key (qk_norm: heads per token)
    extra: tuple = ()

    def columns(self) -> list[torch.Tensor]:
        """Each stashed tensor's rows from every call, in call order (one call's rows used in place, not copied)."""
        return [_cat([t[i] for t in self.tensors]) for i in range(len(self.tensors[0]))]


class CanonicalGrads:
    def __init__(self, sink: Callable[[torch.Tensor, torch.Tensor], None] | None = None, order: str = "serial") -> None:
        if order not in ORDERS:
            raise OpInputError(f"canonical_grads: order must be one of {ORDERS}, got {order!r}")
        self._stash: dict[tuple[int, str], _Stash] = {}
        self.params_done: list[torch.Tensor] = []
        self._sink = sink
        self.order = order
        # the tree leaves (sample_tree: sample ranks; chunk_tree: leaf_of's indices) whose rows reached a parameter
        # gradient (filled by finalize)
        self.samples: set[int] = set()

    def stash(
        self,
        param: torch.Tensor,
        kernel: Kernel,
        keys: torch.Tensor | None,
        *tensors: torch.Tensor,
        inner: int = 1,
        extra: tuple = (),
    ) -> None:
        if keys is None:
            raise OpInputError(f"{kernel.op}: canonical_grads() needs row_keys on every call that uses a parameter")
        key = (id(param), kernel.op)
        s = self._stash.setdefault(key, _Stash(param, kernel, inner=inner, extra=extra))
        if s.kernel.family != kernel.family:
            raise ValueError(
                f"{kernel.op}: one parameter used by two backend families ({s.kernel.family}, {kernel.family})"
            )
        s.keys.append(keys)
        s.tensors.append(tensors)

    def finalize(self) -> None:
        if self.order != "serial":
            self._finalize_tree()
            return
        grads: dict[int, torch.Tensor] = {}
        params: dict[int, torch.Tensor] = {}
        uses: dict[int, int] = {}
        for pid, _op in self._stash:
            uses[pid] = uses.get(pid, 0) + 1
        # one canonical order per set of key tensors: every op of a forward shares the model's keys tensor, so a
        # backward sorts once per forward (a key sort on a device is a host sync), not once per parameter
        orders: dict[tuple[int, ...], torch.Tensor] = {}
        # fixed order: by op name, then first use; a parameter used by two ops sums them in that order
        # contributions of a parameter read by several ops (tied embeddings): FP32, summed in this op-name order,
        # rounded once (combine())
        parts: dict[int, list[tuple[str, torch.Tensor]]] = {}
        for (pid, _op), s in sorted(self._stash.items(), key=lambda kv: kv[0][1]):
            kid = tuple(id(k) for k in s.keys)
            if kid not in orders:
                keys = _cat(s.keys)
                orders[kid] = canonical_order(keys, keys.shape[0])
            # one call's rows are used in place: a cat of one tensor would copy it (an lm_head dy is [T, V] FP32)
            cols = s.columns()
            perm = orders[kid]
            if s.inner > 1:
                # rows of the stashed tensors are (token, inner) flattened: canonical token order, inner ascending
                perm = expand_rows(perm, s.inner)
            note(s.kernel, "backward", s.param.device.type)
            g = s.kernel.param_grad(*cols, *s.extra, perm)
            params[pid] = s.param
            uses[pid] -= 1
            if pid in parts or uses[pid]:  # one of several ops' contributions: combined when the last is in
                parts.setdefault(pid, []).append((s.kernel.op, g))
                if uses[pid] == 0:
                    grads[pid] = combine(parts.pop(pid), s.param.dtype)
            else:
                # the parameter's only contribution: cast now, so only one FP32 gradient is alive at a
                # time (an 8B-shape model's FP32 gradients would need 6.5 GB more than its BF16 ones)
                grads[pid] = g.to(s.param.dtype)
        for pid, g in grads.items():
            self._deliver(params[pid], g)

    def _deliver(self, p: torch.Tensor, g: torch.Tensor) -> None:
        """A finished gradient to the sink (as it is), or into ``p.grad`` in p's dtype (added to one already there)."""
        if self._sink is not None:
            self._sink(p, g)
        else:
            if p.numel() and p.untyped_storage().size() == 0:
                # the parameter object outlived its storage: FSDP2 frees an unsharded parameter after backward,
                # and a gradient left on it would reach no optimizer (its sharded parameter gets none)
                raise OpInputError(
                    f"canonical_grads: a {tuple(p.shape)} parameter's storage is freed (a sharded model's "
                    "unsharded parameter, resharded after backward): run the backward in "
                    "ws1_dist.canonical_grads(model)"
                )
            g = g.to(p.dtype)
            p.grad = g if p.grad is None else p.grad + g
        self.params_done.append(p)

    def _finalize_tree(self) -> None:
        """The parallel-invariant orders (``sample_tree``, ``chunk_tree``): each parameter's gradient is a fixed
        pairwise tree (:func:`tree_sum`) over the leaves (:func:`leaf_of`: the global sample ranks, or each sample's
        128-position chunks); a leaf is its rows reduced serially in canonical order by the family kernel (FP32), the
        ops that read the parameter added per leaf in op-name order (tied embeddings). FP32 to the end: rounded once
        to the parameter's dtype here, or handed to the sink unrounded (FP32), so a caller holding another part of the
        same tree (a rank's aligned block of leaves) can finish it with :func:`tree_sum` and round once."""
        by_param: dict[int, list[_Stash]] = {}
        for (pid, _op), s in sorted(self._stash.items(), key=lambda kv: kv[0][1]):
            by_param.setdefault(pid, []).append(s)
        for stashes in by_param.values():
            # per op: its columns, and each sample's rows (a run of the canonical order: keys sort by sample first)
            runs: list[tuple[_Stash, list[torch.Tensor], dict[int, torch.Tensor]]] = []
            for s in stashes:
                keys = _cat(s.keys)
                perm = canonical_order(keys, keys.shape[0])
                # a leaf's rows are one run of the canonical order (keys sort by sample, then position)
                sample = leaf_of(keys.index_select(0, perm.to(keys.device)).cpu(), self.order)
                bounds = torch.nonzero(sample[1:] != sample[:-1]).flatten().add(1).tolist()
                cut = [0, *bounds, sample.numel()]
                per_sample = {int(sample[a]): perm[a:b] for a, b in zip(cut[:-1], cut[1:]) if b > a}
                runs.append((s, s.columns(), per_sample))
            ranks = sorted({r for _s, _c, per in runs for r in per})
            self.samples.update(ranks)

            def leaf(rank: int, runs=runs) -> torch.Tensor:
                total = None
                for s, cols, per in runs:  # op-name order
                    rows = per.get(rank)
                    if rows is None:
                        continue
                    rows = expand_rows(rows, s.inner) if s.inner > 1 else rows
                    note(s.kernel, "backward", s.param.device.type)
                    g = s.kernel.param_grad(*cols, *s.extra, rows).float()
                    total = g if total is None else total + g
                return total

            self._deliver(stashes[0].param, tree_sum([(r, functools.partial(leaf, r)) for r in ranks]))


def tree_sum(items: list[tuple[int, torch.Tensor | Callable[[], torch.Tensor]]]) -> torch.Tensor:
    """The fixed pairwise tree over integer indices: ``items`` (index >= 0, a tensor or a function making it), summed
    as a complete binary tree over 0..2^k-1 whose absent leaves are the identity — node(range) = node(left half) +
    node(right half), one FP32-or-whatever add per element. The result depends only on the {index: value} map, and
    the node of any aligned power-of-two range of indices is the same value wherever it is computed: a rank that
    holds the leaves of one aligned block computes that block's node, and the tree over the blocks' nodes (their
    block numbers as indices) is the whole tree. Values made by a function are made when the tree reaches them, so
    at most one per tree level is alive."""
    if not items:
        raise OpInputError("tree_sum: no items")
    order = sorted(items, key=lambda item: item[0])
    idx = [i for i, _ in order]
    if idx[0] < 0 or len(set(idx)) != len(idx):
        raise OpInputError(f"tree_sum: indices must be distinct and >= 0, got {idx}")
    size = 1
    while size <= idx[-1]:
        size *= 2

    def value(item):
        return item[1]() if callable(item[1]) else item[1]

    def node(lo: int, size: int, xs: list) -> torch.Tensor:
        if len(xs) == 1:  # every sibling on the way up is absent: the identity
            return value(xs[0])
        half = size // 2
        split = next((k for k, x in enumerate(xs) if x[0] >= lo + half), len(xs))
        left, right = xs[:split], xs[split:]
        if not right:
            return node(lo, half, left)
        if not left:
            return node(lo + half, half, right)
        a = node(lo, half, left)
        return a + node(lo + half, half, right)  # a new tensor: a kernel's output is never written in place

    return node(0, size, order)


def combine(parts: list[tuple[str, torch.Tensor]], dtype: torch.dtype) -> torch.Tensor:
    """One parameter's gradient from the contributions of the ops that read it: ``parts`` (op, gradient [*shape])
    are each taken in FP32 (the kernels' param_grad output already is: then no copy), summed left to right in
    op-name order (a stable sort: one op's parts keep their order), and rounded to ``dtype`` once (nearest-even).
    For tied embeddings: ``fp32(dE_embedding) + fp32(dW_lm_head)`` -> BF16, the bits of ``(a + b).to(bf16)``."""
    ordered = sorted(parts, key=lambda part: part[0])
    total = ordered[0][1].float()
    for _op, g in ordered[1:]:
        total = total + g.float()  # a new tensor: a kernel's output is never written in place
    return total.to(dtype)


# parameters read by more than one op (tie()): id -> a weak reference (a tensor's == is elementwise, so no WeakSet)
_TIED: dict[int, weakref.ref] = {}


def tie(param: torch.Tensor) -> torch.Tensor:
    """Mark ``param`` as read by more than one op of a forward (tied embeddings: ``embedding`` and ``lm_head`` read
    one table). Its gradient then exists only inside :func:`canonical_grads`, where the contributions are combined
    by :func:`combine`; an op's backward outside it refuses (autograd would round each to the parameter's dtype
    and add them there). Returns ``param``; the mark lives as long as the tensor object."""
    key = id(param)
    _TIED[key] = weakref.ref(param, lambda _ref, key=key: _TIED.pop(key, None))
    return param


def is_tied(t: torch.Tensor) -> bool:
    ref = _TIED.get(id(t))
    return ref is not None and ref() is t


def refuse_tied_outside_scope(weight: torch.Tensor, op: str) -> None:
    """Raise when ``weight`` is tied (:func:`tie`) and no canonical_grads() scope is open: one line."""
    if is_tied(weight):
        raise OpInputError(
            f"{op}: the weight is tied (read by two ops); its gradient is combined only inside "
            "ws1_ops.canonical_grads() (FP32, rounded once): run the backward there"
        )


def _cat(ts: list[torch.Tensor]) -> torch.Tensor:
    return ts[0] if len(ts) == 1 else torch.cat(ts)


def current() -> CanonicalGrads | None:
    with _lock:
        return _scopes[-1] if _scopes else None


@contextlib.contextmanager
def canonical_grads(
    sink: Callable[[torch.Tensor, torch.Tensor], None] | None = None, order: str = "serial"
) -> Iterator[CanonicalGrads]:
    """Defer parameter gradients to one canonical reduction per parameter (see the module docstring).

    ``order``: ``"serial"`` (the default, the single-device order: every row of a parameter in one serial chain in
    canonical order) or ``"sample_tree"`` (the parallel-invariant order, docs/parallel.md: a fixed pairwise tree
    over the global sample ranks, each leaf a sample's rows in serial canonical order, FP32 to the end; a rank holding
    an aligned block of the samples computes a node of that tree, so data-parallel ranks can finish it and get the
    single device's bits) or ``"chunk_tree"`` (the same with a leaf per 128 positions of a sample, chunk-major: the
    context-parallel order, where one sample's tokens sit on several ranks). ``sink(param, grad)``: where each
    finished gradient goes instead of ``param.grad`` (one call per parameter; in the parameter's dtype for
    ``serial``, FP32 and unrounded for the tree orders) — how a sharded trainer takes the full local gradients to its
    own reduce-scatter (``ws1_dist.canonical_grads``)."""
    scope = CanonicalGrads(sink, order)
    with _lock:
        _scopes.append(scope)
    try:
        yield scope
    except BaseException:
        with _lock:
            _scopes.remove(scope)
        raise
    with _lock:
        _scopes.remove(scope)
    scope.finalize()
