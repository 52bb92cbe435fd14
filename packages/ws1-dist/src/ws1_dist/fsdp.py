"""FSDP2 (``torch.distributed.fsdp.fully_shard``) for WS1's Qwen3 chain, with WS1's canonical parameter gradients.

    ws1_qwen3.apply_ws1(hf_model, "cpu_bf16")        # or a ws1_qwen3.Qwen3ForCausalLM
    ws1_dist.shard(hf_model)                          # fully_shard each decoder layer, then the root
    with ws1_dist.canonical_grads(hf_model, divide_factor=1.0):
        for micro_batch in step:                      # every micro-batch of one optimizer step
            loss = ...; loss.backward()
    optimizer.step()                                  # each rank: its shard's gradient, a DTensor like its parameter

**Forward.** Each rank all-gathers a unit's parameters (FSDP2's all-gather: a copy, no arithmetic) and runs WS1's
kernels on them, so a rank's log-probs of its sequences are the bits one device computes for them. FSDP2's
``MixedPrecisionPolicy`` is set with ``cast_forward_inputs=False``: WS1's residual stream is FP32 between decoder
layers, and FSDP2's default casts a unit's floating inputs to the compute dtype (the decoder layer refuses a BF16
residual, so a user's own ``fully_shard`` with that default fails loudly, not silently).

**Backward — why canonical_grads composes with FSDP2 without a double reduction.** Inside
``ws1_ops.canonical_grads()`` WS1's ops compute only their input gradients; a parameter's rows are stashed and
reduced once, in canonical row order, when the scope exits. So while the backward runs no unsharded parameter has a
``.grad`` and FSDP2's post-backward reduce-scatter has nothing to reduce. This module's scope takes each finished
gradient from ws1_ops (its ``sink``) — the full, unsharded gradient of this rank's rows, in the parameter's dtype,
the bits one device computes over those rows — and reduce-scatters it once into FSDP2's layout (dim 0 in
``ceil(rows / world)`` chunks, rank r's chunk its shard): FP32 sum across ranks, divided by ``divide_factor`` in
FP32, rounded once to the sharded parameter's dtype, set as its ``.grad`` (a DTensor with the parameter's mesh and
placement; added to a gradient already there). One reduction per step, however many micro-batches.

Across world sizes (docs/trainer.md, docs/parallel.md): in the default order each rank's BF16 gradient is a
canonical sum over its own rows, so at another world size the rows are cut differently and the result differs in
the last bits (DP 1 vs 2 vs 4 measured); at a fixed world size it is the same bits run to run. ``order="sample_tree"``
(the parallel-invariant order) makes every rank's FP32 partial a node of one fixed tree over the global sample
ranks and finishes that tree across ranks: one device's bits at any power-of-two world size.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

import ws1_ops
import ws1_qwen3
from ws1_ops.grads import CanonicalGrads

from .errors import DistError

_STATE = "_ws1_dist"  # the attribute of a sharded model that holds its _Sharded


@dataclass
class _Sharded:
    """What :func:`shard` leaves on the model: the device mesh, and (after the first backward) the map from each
    unsharded parameter object FSDP2 runs the forward on to its sharded parameter, grouped by FSDP unit."""

    mesh: object
    units: list[nn.Module]
    to_sharded: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    buckets: list[list[tuple[str, torch.Tensor]]] | None = None


def _fsdp():
    try:
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
    except ImportError as e:  # torch < 2.6
        raise DistError(f"ws1_dist: this torch ({torch.__version__}) has no FSDP2 (torch.distributed.fsdp): {e}") from e
    return FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method


def _kind(model: nn.Module) -> str:
    if isinstance(model, ws1_qwen3.Qwen3ForCausalLM):
        return "ws1"
    if ws1_qwen3.hf.is_patched(model):
        return "hf"
    raise DistError(
        f"ws1_dist: shard takes a ws1_qwen3.Qwen3ForCausalLM or a transformers Qwen3ForCausalLM after "
        f"ws1_qwen3.apply_ws1, got {type(model).__name__}"
    )


def shard(model: nn.Module, mesh=None, *, reshard_after_forward: bool = True) -> nn.Module:
    """Shard ``model`` with FSDP2 over ``mesh`` (default: one dimension over the default process group): each
    decoder layer its own unit, then the root (embedding, final norm, head). In place; returns the model.

    Refused, one line: torch.distributed not initialized; a model that is neither WS1's Qwen3 nor a patched
    transformers Qwen3; a model already sharded. Parameters are sharded as they are (BF16 for a ws1 profile):
    keep FP32 master weights in the optimizer (``ws1_qwen3.rl.AdamW`` on the local shards), not in the model."""
    FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method = _fsdp()
    kind = _kind(model)
    if not dist.is_available() or not dist.is_initialized():
        raise DistError("ws1_dist: torch.distributed is not initialized: call torch.distributed.init_process_group")
    if isinstance(model, FSDPModule) or _STATE in model.__dict__:
        raise DistError(f"ws1_dist: {type(model).__name__} is already sharded")
    if mesh is None:
        from torch.distributed.device_mesh import init_device_mesh

        device = next(model.parameters()).device
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    # no cast of a unit's inputs: the residual stream between decoder layers is FP32 (WS1's numerics)
    policy = MixedPrecisionPolicy(cast_forward_inputs=False)
    units = []
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
        units.append(layer)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    units.append(model)
    # the entries that run the chain without the root's __call__: FSDP2 all-gathers the root's parameters there too
    if kind == "ws1":
        # hidden() and logits_of() are separate entries (teacher forcing calls both): FSDP2 may reshard the root
        # between them (it does at world size 1), so each all-gathers what it reads
        register_fsdp_forward_method(model, "hidden")
        register_fsdp_forward_method(model, "logits_of")
    else:
        register_fsdp_forward_method(model, ws1_qwen3.hf.LOGPROBS_METHOD)
    model.__dict__[_STATE] = _Sharded(mesh, units)
    return model


def _state(model: nn.Module) -> _Sharded:
    st = model.__dict__.get(_STATE)
    if st is None:
        raise DistError(f"ws1_dist: {type(model).__name__} is not sharded: call ws1_dist.shard(model) first")
    return st


def _unit_modules(unit: nn.Module, units: set[int]) -> Iterator[nn.Module]:
    """``unit`` and its submodules, not descending into another FSDP unit."""
    yield unit
    for child in unit.children():
        if id(child) not in units:
            yield from _unit_modules(child, units)


def _map_parameters(st: _Sharded) -> None:
    """The unsharded parameter objects FSDP2 runs the forward on (one per sharded parameter, kept by FSDP2 across
    steps, their storage freed between uses), and the sharded parameter each stands for, per unit. Built once, on
    every rank at the same point (the first scope exit): ``unshard()`` is a collective."""
    from torch.distributed.tensor import DTensor

    unit_ids = {id(u) for u in st.units}
    st.to_sharded, st.buckets = {}, []
    seen: set[int] = set()
    for unit in st.units:
        unit.unshard()
        slots = []
        for sub in _unit_modules(unit, unit_ids):
            for leaf, p in sub.named_parameters(recurse=False):
                if not isinstance(p, DTensor):
                    slots.append((sub, leaf, p))
        unit.reshard()
        bucket = []
        for sub, leaf, unsharded in slots:
            sharded = getattr(sub, leaf)
            if not isinstance(sharded, DTensor):
                raise DistError(f"ws1_dist: {type(sub).__name__}.{leaf} is not sharded after reshard()")
            st.to_sharded.setdefault(id(unsharded), (unsharded, sharded))
            if id(sharded) not in seen and sharded.requires_grad:  # a tied table: once
                seen.add(id(sharded))
                bucket.append((f"{type(sub).__name__}.{leaf}", sharded))
        st.buckets.append(bucket)


def _reduce_scatter(st: _Sharded, local: dict[int, torch.Tensor], divide_factor: float, cross: str = "sum") -> None:
    """Each unit's full local gradients -> one FP32 reduce-scatter -> each rank's shard, / divide_factor, rounded
    once to the sharded parameter's dtype, into ``.grad``. ``local``: id(sharded parameter) -> full gradient.

    ``cross``: how the ranks' partials are summed. ``"sum"``: the process group's reduce-scatter (its own order).
    ``"tree"``: the ranks' FP32 partials are the nodes of their aligned sample blocks (``order="sample_tree"``), and
    the cross-rank sum is the rest of the same tree: an all-to-all hands each rank every rank's partial of its shard,
    and ``ws1_ops.tree_sum`` over the ranks (block r is index r) finishes it. ``"rank_fold"``: the same all-to-all,
    summed left to right in rank order — a negative control (docs/parallel.md), not a tree's order at 4+ ranks."""
    from torch.distributed.tensor import DTensor, Shard

    group = st.mesh.get_group()
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    for bucket in st.buckets:
        if not bucket:
            continue
        # rank-major buffer: row r holds every parameter's r-th dim-0 chunk (FSDP2's layout: ceil(rows / world))
        pieces, chunks = [], []
        for name, sharded in bucket:
            if sharded.placements != (Shard(0),):
                raise DistError(f"ws1_dist: {name} is placed {sharded.placements}; ws1_dist reduces Shard(0) only")
            rows = sharded.shape[0]
            chunk = math.ceil(rows / world)
            full = torch.zeros((world * chunk, *sharded.shape[1:]), dtype=torch.float32, device=sharded.device)
            g = local.get(id(sharded))
            if g is not None:
                full[:rows].copy_(g)  # exact: the gradient's dtype (BF16) into FP32
            pieces.append(full.view(world, -1))
            chunks.append(chunk)
        send = torch.cat(pieces, dim=1).contiguous()
        if cross in ("tree", "rank_fold"):
            parts = torch.empty_like(send)  # row r: rank r's partial of this rank's shard
            dist.all_to_all_single(parts.view(-1), send.view(-1), group=group)
            if cross == "tree":
                recv = ws1_ops.tree_sum([(r, parts[r]) for r in range(world)])
            else:
                recv = parts[0].clone()
                for r in range(1, world):
                    recv = recv + parts[r]
        else:
            recv = torch.empty(send.shape[1], dtype=torch.float32, device=send.device)
            _reduce_scatter_single(recv, send.view(-1), group)
        offset = 0
        for (name, sharded), chunk in zip(bucket, chunks):
            inner = math.prod(sharded.shape[1:])
            piece = recv[offset : offset + chunk * inner].view(chunk, *sharded.shape[1:])
            offset += chunk * inner
            mine = max(0, min(chunk, sharded.shape[0] - rank * chunk))
            if sharded.to_local().shape[0] != mine:
                raise DistError(
                    f"ws1_dist: {name}'s shard has {sharded.to_local().shape[0]} rows, FSDP2's layout {mine}"
                )
            if divide_factor != 1.0:
                piece = piece / divide_factor  # FP32
            grad = DTensor.from_local(
                piece[:mine].to(sharded.dtype).contiguous(),
                sharded.device_mesh,
                sharded.placements,
                shape=sharded.shape,
                stride=sharded.stride(),
                run_check=False,
            )
            sharded.grad = grad if sharded.grad is None else sharded.grad + grad


def _reduce_scatter_single(recv: torch.Tensor, send: torch.Tensor, group) -> None:
    """SUM reduce-scatter of ``send`` [world * n] into ``recv`` [n] (torch >= 2.13 names it reduce_scatter_single;
    earlier, reduce_scatter_tensor)."""
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(recv, send, op=dist.ReduceOp.SUM, group=group)


def dp_block(n_samples: int, world: int, rank: int) -> range:
    """The samples (global ranks) data-parallel rank ``rank`` of ``world`` trains on in the parallel-invariant order:
    one aligned block ``[rank * B, (rank + 1) * B)`` of ``B`` = the smallest power of two >= ceil(n / world), cut at
    ``n``. Each rank's gradient is then a node of the one fixed tree over the samples (``order="sample_tree"``)."""
    if n_samples < 1 or world < 1 or not 0 <= rank < world:
        raise DistError(
            f"ws1_dist: dp_block needs n_samples >= 1, world >= 1, 0 <= rank < world; got {n_samples}, {world}, {rank}"
        )
    block = 1
    while block * world < n_samples:
        block *= 2
    return range(min(n_samples, rank * block), min(n_samples, (rank + 1) * block))


def _check_blocks(samples: set[int], group, order: str) -> None:
    """Every rank's samples inside its aligned block for one power-of-two block size (dp_block's layout): else the
    ranks' partials are not nodes of one tree, and the result would depend on the world size. Collective."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    mine = torch.tensor(
        [min(samples) if samples else -1, max(samples) if samples else -1], dtype=torch.int64, device="cpu"
    )
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    spans = [(int(t[0]), int(t[1])) for t in every]
    block = 1
    while block < 2**62:
        if all(lo < 0 or (lo >= r * block and hi < (r + 1) * block) for r, (lo, hi) in enumerate(spans)):
            return
        block *= 2
    raise DistError(
        f"ws1_dist: order={order!r} needs each rank's tree leaves in its aligned block (ws1_dist.dp_block's samples, "
        f"ws1_dist.cp_tokens' chunks); rank {rank} of {world} has leaves {spans[rank][0]}..{spans[rank][1]}, the "
        f"ranks' spans {spans}"
    )


@contextlib.contextmanager
def canonical_grads(
    model: nn.Module, *, divide_factor: float | None = None, order: str = "serial", cross_rank: str | None = None
) -> Iterator[CanonicalGrads]:
    """``ws1_ops.canonical_grads()`` for a model :func:`shard` sharded: run every backward of one optimizer step in
    it. On exit, each parameter's gradient over this rank's rows (canonical order, once) is reduce-scattered into
    FSDP2's shards (see the module docstring). ``divide_factor``: the gradients' sum across ranks is divided by it
    (default: the world size, FSDP2's own default, for a loss that is a per-rank mean; pass 1.0 when each rank's
    loss is already normalized by the global token count). Collective: every rank enters and leaves it.

    ``order="sample_tree"``: the parallel-invariant order (docs/parallel.md). Each rank trains on its aligned block
    of samples (:func:`dp_block`; checked); its gradients are that block's nodes of one fixed tree over the global
    sample ranks (FP32), and the cross-rank sum is the rest of that tree (an all-to-all, then ``ws1_ops.tree_sum``),
    rounded once: the same bits at any power-of-two world size, and equal to one device running the same order.

    ``order="chunk_tree"``: the same with a leaf per 128 positions of each sample, chunk-major — the order of a model
    trained under context parallel (:class:`ws1_dist.ContextParallel`), whose ranks hold aligned blocks of one
    sequence's chunks (checked the same way).

    ``cross_rank``: the cross-rank sum (default: ``"tree"`` for ``sample_tree`` and ``chunk_tree``, the process
    group's ``"sum"`` for ``serial``). The negative controls of docs/parallel.md set another: ``"sum"`` or
    ``"rank_fold"`` under a tree order."""
    st = _state(model)
    world = dist.get_world_size(st.mesh.get_group())
    factor = float(world if divide_factor is None else divide_factor)
    if not factor > 0:
        raise DistError(f"ws1_dist: divide_factor must be > 0, got {divide_factor}")
    tree = order in ("sample_tree", "chunk_tree")
    cross = cross_rank or ("tree" if tree else "sum")
    if cross not in ("sum", "tree", "rank_fold") or (cross != "sum" and not tree):
        raise DistError(
            f"ws1_dist: cross_rank={cross_rank!r} with order={order!r} (sum, tree or rank_fold; the last two need "
            "order='sample_tree' or 'chunk_tree')"
        )
    got: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def sink(param: torch.Tensor, grad: torch.Tensor) -> None:
        got[id(param)] = (param, grad)

    with ws1_ops.canonical_grads(sink=sink, order=order) as scope:
        yield scope
    if tree:
        _check_blocks(scope.samples, st.mesh.get_group(), order)
    if st.to_sharded is None:
        _map_parameters(st)
    local: dict[int, torch.Tensor] = {}
    for pid, (param, grad) in got.items():
        hit = st.to_sharded.get(pid)
        if hit is None or hit[0] is not param:
            raise DistError(
                f"ws1_dist: a {tuple(param.shape)} parameter with a gradient is not one of the sharded model's "
                "(a parameter outside the model, or the model changed after its first step)"
            )
        local[id(hit[1])] = grad
    _reduce_scatter(st, local, factor, cross)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter of a sharded model, whole (``DTensor.full_tensor()``: an all-gather, a copy), by name, on
    every rank — what a trainer pushes into a rollout engine after a step. Collective."""
    _state(model)
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in model.named_parameters():
        out[name] = (p.full_tensor() if isinstance(p, DTensor) else p).detach()
    return out
