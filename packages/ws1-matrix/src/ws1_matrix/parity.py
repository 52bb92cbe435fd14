"""Model-level train/infer parity: the trainer's log-probs against the rollout engine's.

* :func:`rollout_logp` (from :mod:`ws1_qwen3.rollout`) — the rollout's log-probs of the completions;
* :func:`judge` — dlogp aggregates (contract thresholds) plus the raw-bit verdict, with the
  contract's role pair ``training_style_teacher_forcing`` vs ``inference_style_rollout_decode``.

Both are plain functions over log-prob tensors, so the same judgment runs on any model — ours, or
transformers' Qwen3 as the negative control.
"""

from __future__ import annotations

import torch

from ws1_contract import AggregateResult, Contract, aggregates
from ws1_qwen3.rollout import rollout_logp

__all__ = ["LHS", "RHS", "judge", "rollout_logp"]

LHS, RHS = "training_style_teacher_forcing", "inference_style_rollout_decode"


def judge(tf_logp: torch.Tensor, rollout: torch.Tensor, contract: Contract, dtype: str = "bfloat16") -> AggregateResult:
    """Aggregates of dlogp = teacher forcing − rollout over the active tokens (both [n_active])."""
    contract.validate_role_pair("train_infer_parity", LHS, RHS)
    return aggregates(
        tf_logp, rollout, thresholds=contract.aggregate_thresholds(dtype), clip_interval=contract.clip_interval
    )
