"""Tensor parallel for WS1's Qwen3 in the parallel-invariant order: the same log-probs at TP 1, 2, 4 and 8.

    model = ws1_dist.tp_model(checkpoint_dir, "cpu_bf16", world=T, rank=r)     # inside a process group of T ranks
    tf = ws1_qwen3.teacher_forcing(model, samples)                            # forward: every rank gets the logits

Megatron's split of a decoder layer: q/k/v and gate/up column-parallel (each rank its heads / its slice of the
intermediate features: every output element is the one-device dot product, unchanged), attention per local head
(rows of one head never meet another head's), o_proj and down_proj row-parallel (each rank a slice of K), the head
vocabulary-parallel. Only the row-parallel GEMMs cut a reduction, and there the order is fixed:

* **K in 8 chunks aligned to k = 0** (:data:`CHUNKS`, the largest TP degree supported), each chunk the family's
  serial FP32 chain from +0 (``ws1_ops.det_gemm_partial``), the chunks summed by the fixed pairwise tree
  (``ws1_ops.tree_sum``). Rank r of T holds chunks [r·8/T, (r+1)·8/T): its sum is that aligned block's node of the
  tree; the ranks' FP32 nodes are all-gathered (a copy) and the same tree finishes them — never the process group's
  sum — and the result is rounded to BF16 once. TP 1 runs the same 8-chunk tree on one device: the reference.
* **The head**: each rank computes the FP32 logits of its vocabulary slice (each logit the one-device dot product)
  and the slices are all-gathered, so every rank runs WS1's ``logprob`` on whole rows: the one-device bits. The
  per-chunk (max, sum) tree that would avoid gathering [n, V] FP32 logits is not built.

Rules: T divides 8, the query heads, the KV heads and the vocabulary (151,936 = 2^7 · 1,187: T up to 8), and 8
divides heads × head_dim and the intermediate size (every dense Qwen3 size). Forward only: the TP backward (the
column-parallel layers' dx over the same tree) is not built. ``cross``: the cross-rank sum — ``"tree"``; the
negative controls of docs/parallel.md: ``"serial_split"`` (each rank one serial chain over its K, the partials
summed by the process group: the default order under the split), ``"sum"`` (the chunk tree per rank, the process
group's sum across ranks), ``"rank_fold"`` (the chunk tree per rank, summed left to right in rank order).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import ws1_ops
import ws1_qwen3

from .errors import DistError

CHUNKS = 8  # K chunks of a row-parallel GEMM, aligned to k = 0: the largest TP degree supported
CROSS = ("tree", "serial_split", "sum", "rank_fold")


class TPOps:
    """ws1_ops for one tensor-parallel rank: the row-parallel GEMMs (the det_gemm calls the model makes with
    ``k_chunks``: o_proj, down_proj) and the head finished across ranks; every other op is ws1_ops' own."""

    def __init__(self, world: int, rank: int, group, cross: str = "tree"):
        self.world, self.rank, self.group, self.cross = world, rank, group, cross

    def __getattr__(self, name):
        return getattr(ws1_ops, name)

    def _gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t.contiguous(), group=self.group)
        return parts

    def det_gemm(
        self, x: torch.Tensor, weight: torch.Tensor, row_keys: torch.Tensor | None = None, k_chunks: int | None = None
    ) -> torch.Tensor:
        if k_chunks is None:  # column-parallel: every output element is the one-device dot product
            return ws1_ops.det_gemm(x, weight, row_keys)
        if k_chunks != CHUNKS:
            raise DistError(f"ws1_dist: a row-parallel GEMM runs {CHUNKS} K chunks, the model asks for {k_chunks}")
        return self.row_parallel_sum(x, weight).to(torch.bfloat16)  # rounded once

    def row_parallel_sum(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """x [M, K/T] @ weight [N, K/T].T summed over every rank's K slice, in FP32 (before the one rounding):
        [M, N] FP32, the same on every rank. Collective."""
        # this rank's node: its 8/T chunks' tree; serial_split: one serial chain over its K (the default order)
        mine = ws1_ops.det_gemm_partial(x, weight, 1 if self.cross == "serial_split" else CHUNKS // self.world)
        if self.world > 1:
            if self.cross in ("serial_split", "sum"):
                dist.all_reduce(mine, op=dist.ReduceOp.SUM, group=self.group)
            else:
                parts = self._gather(mine)
                if self.cross == "tree":
                    mine = ws1_ops.tree_sum(list(enumerate(parts)))
                else:  # rank_fold
                    mine = parts[0]
                    for p in parts[1:]:
                        mine = mine + p
        return mine

    def lm_head(self, hidden: torch.Tensor, weight: torch.Tensor, row_keys: torch.Tensor | None = None):
        rows = weight.shape[0] // self.world
        local = ws1_ops.lm_head(hidden, weight[self.rank * rows : (self.rank + 1) * rows], row_keys)
        return local if self.world == 1 else torch.cat(self._gather(local), dim=1)


def check_split(config, world: int) -> None:
    """The tensor-parallel split rules (module docstring): :class:`DistError`, one line naming each broken one."""
    problems = []
    if CHUNKS % world:
        problems.append(f"world {world} does not divide {CHUNKS}")
    for what, n in (
        ("num_attention_heads", config.num_attention_heads),
        ("num_key_value_heads", config.num_key_value_heads),
        ("vocab_size", config.vocab_size),
    ):
        if n % world:
            problems.append(f"{what}={n} is not divisible by {world}")
    for what, n in (
        ("num_attention_heads*head_dim", config.num_attention_heads * config.head_dim),
        ("intermediate_size", config.intermediate_size),
    ):
        if n % CHUNKS:
            problems.append(f"{what}={n} is not divisible by {CHUNKS} (the K chunks)")
    if problems:
        raise DistError(f"ws1_dist: tensor parallel of {config.name}: " + "; ".join(problems))


def local_config(config, world: int):
    """The config of one rank's shard (its heads and intermediate features); the split rules checked (one line)."""
    check_split(config, world)
    return config.replace(
        num_attention_heads=config.num_attention_heads // world,
        num_key_value_heads=config.num_key_value_heads // world,
        intermediate_size=config.intermediate_size // world,
    )


def shard_weight(name: str, tensor: torch.Tensor, config, world: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s part of the full checkpoint tensor ``name`` (HF names; ``config`` the full model's): the rows
    (output features) of q/k/v/gate/up, the columns (K) of o_proj/down_proj, everything else whole (a view)."""
    kind = name.split(".")[-2] if name.count(".") else name
    q = config.num_attention_heads // world * config.head_dim
    kv = config.num_key_value_heads // world * config.head_dim
    inter = config.intermediate_size // world
    rows = {"q_proj": q, "k_proj": kv, "v_proj": kv, "gate_proj": inter, "up_proj": inter}
    cols = {"o_proj": q, "down_proj": inter}
    if kind in rows:
        return tensor[rank * rows[kind] : (rank + 1) * rows[kind]]
    if kind in cols:
        return tensor[:, rank * cols[kind] : (rank + 1) * cols[kind]]
    return tensor


def tp_model(
    checkpoint: str, profile: str, world: int, rank: int, group=None, cross: str = "tree"
) -> ws1_qwen3.Qwen3ForCausalLM:
    """Rank ``rank``'s shard of the checkpoint as a WS1 model running :class:`TPOps` (see the module docstring).
    World 1 needs no process group: the one-device reference of the same order."""
    if cross not in CROSS:
        raise DistError(f"ws1_dist: cross must be one of {CROSS}, got {cross!r}")
    full = ws1_qwen3.from_pretrained(checkpoint, profile)
    c = full.config
    local = local_config(c, world)
    if world > 1 and not dist.is_initialized():
        raise DistError("ws1_dist: torch.distributed is not initialized: call torch.distributed.init_process_group")
    model = ws1_qwen3.Qwen3ForCausalLM(local, profile)
    whole = dict(full.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(shard_weight(name, whole[name], c, world, rank))
    model.op_set = TPOps(world, rank, group, cross)
    model.k_chunks = CHUNKS  # o_proj and down_proj reach TPOps' row-parallel sum
    model.source = f"{full.source} (tensor parallel rank {rank} of {world})"
    return model
