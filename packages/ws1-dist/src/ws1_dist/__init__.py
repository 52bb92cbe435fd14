"""ws1_dist: WS1 on torch.distributed — FSDP2 for WS1's Qwen3 and for transformers' Qwen3 on WS1's kernels.

    import ws1_dist
    ws1_dist.shard(model)                                   # fully_shard per decoder layer + the root
    with ws1_dist.canonical_grads(model, divide_factor=1.0):
        loss.backward()                                     # one canonical reduction per parameter, then one
                                                            # reduce-scatter
    weights = ws1_dist.full_state_dict(model)               # whole tensors, for the rollout engine
    model = ws1_dist.tp_model(checkpoint, profile, world, rank)  # tensor parallel (ws1_dist.tp)
    out = ws1_dist.ContextParallel(seq_len).attention(q, k, v)  # context parallel (ws1_dist.cp)

:class:`FSDPTrainer` is a GRPO trainer on it (transformers' Qwen3, ranks in spawned processes) for
``ws1_qwen3.rl.run_on_engines``. Everything of WS1 that talks to torch.distributed lives here (process groups,
FSDP2 wiring); the kernels and ws1_ops know nothing of ranks. :mod:`ws1_dist.fsdp` explains how WS1's canonical
gradients meet FSDP2's reduce-scatter, and docs/trainer.md what differs across world sizes.
"""

from __future__ import annotations

from .cp import CP_CHUNK, ContextParallel, cp_logprobs, cp_tokens
from .errors import DistError
from .fsdp import canonical_grads, dp_block, full_state_dict, shard
from .tp import CHUNKS, TPOps, check_split, local_config, shard_weight, tp_model
from .trainer import FSDPTrainer

__all__ = [
    "CHUNKS",
    "CP_CHUNK",
    "ContextParallel",
    "DistError",
    "FSDPTrainer",
    "TPOps",
    "canonical_grads",
    "check_split",
    "cp_logprobs",
    "cp_tokens",
    "dp_block",
    "full_state_dict",
    "local_config",
    "shard",
    "shard_weight",
    "tp_model",
]
