"""first_drift: where two runs of the chain stop agreeing, per node and per token.

A :class:`Trace` hooks the model's tracer and keeps, for every (layer, node) the model reports, a
digest of each valid row's raw bits keyed by its logical key. Comparing two traces walks the nodes
in chain order and names the first one whose per-token outputs differ on a key both runs computed
— the tool a user needs when parity breaks ("layer 0, attention, 19 tokens").

Every kernel call of the chain is a node, named by its role (each GEMM, each norm), in the order
the chain computes them, so the first drifting node is the kernel that drifted, not one downstream:

* layer −1: ``embedding``;
* each decoder layer: ``input_layernorm``, ``q_proj``, ``q_norm``, ``k_proj``, ``k_norm``, ``v_proj``,
  ``rope_q``, ``rope_k``, ``attention``, ``o_proj``, ``attn_residual``, ``post_attention_layernorm``,
  ``gate_proj``, ``up_proj``, ``swiglu``, ``down_proj``, ``mlp_residual`` (the residuals are FP32 adds,
  not kernels: traced so a drift is seen where it enters the residual stream);
* layer L (the head): ``final_norm``, ``lm_head``, then the selected log-prob of the predicted token —
  ``logprob`` in teacher forcing, ``batch_invariant_logp`` in the rollout (decode path). The two are
  the same point of the chain (the log-prob a token gets), so a rollout trace compared with a
  teacher-forcing trace compares them with each other.

``silu`` is one of the eleven node kinds but never runs in the chain: the dense Qwen3 MLP uses the
fused ``swiglu``. It runs in the C9/C10 check ``silu(g) == swiglu(g, 1)`` on layer 0's gate
activations, which traces it there as node (0, ``silu``) (see ``ws1_qwen3.c9.silu_identity``).

Rows are digested, not kept, so a trace of the 8B model costs kilobytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# (node, kind): the kind is the ws1 op (one of ws1_ops.REQUIRED_NODES) or "residual_add"
INPUT_NODES = (("embedding", "embedding"),)
LAYER_NODES = (("input_layernorm", "rms_norm"), ("q_proj", "det_gemm"), ("q_norm", "qk_norm"), ("k_proj", "det_gemm"),
               ("k_norm", "qk_norm"), ("v_proj", "det_gemm"), ("rope_q", "rope"), ("rope_k", "rope"),
               ("attention", "attention"), ("o_proj", "det_gemm"), ("attn_residual", "residual_add"),
               ("post_attention_layernorm", "rms_norm"), ("gate_proj", "det_gemm"), ("up_proj", "det_gemm"),
               ("swiglu", "swiglu"), ("silu", "silu"), ("down_proj", "det_gemm"), ("mlp_residual", "residual_add"))
HEAD_NODES = (("final_norm", "rms_norm"), ("lm_head", "lm_head"), ("logprob", "logprob"),
              ("batch_invariant_logp", "batch_invariant_logp"))
NODE_KIND = dict(INPUT_NODES + LAYER_NODES + HEAD_NODES)
NODE_ORDER = tuple(NODE_KIND)
# nodes that are one point of the chain under two names (teacher forcing vs rollout)
SAME_POINT = {"batch_invariant_logp": "logprob", "logprob": "batch_invariant_logp"}


def _row_digests(t: torch.Tensor) -> list[bytes]:
    flat = t.detach().contiguous().cpu().reshape(t.shape[0], -1)
    raw = flat.view(torch.uint8) if flat.numel() else flat
    return [hashlib.blake2b(r.numpy().tobytes(), digest_size=12).digest() for r in raw]


class Trace:
    def __init__(self) -> None:
        self.rows: dict[tuple[int, str], dict[int, bytes]] = {}

    def __call__(self, layer: int, node: str, t: torch.Tensor, keys: torch.Tensor) -> None:
        if node not in NODE_KIND:   # an unordered node could hide the real first drift
            raise ValueError(f"trace: unknown node {node!r}; expected one of {NODE_ORDER}")
        keys = keys.detach().cpu()
        d = self.rows.setdefault((layer, node), {})
        for k, dig in zip(keys.tolist(), _row_digests(t)):
            if k >= 0:
                d[k] = dig

    def order(self) -> list[tuple[int, str]]:
        return sorted(self.rows, key=lambda ln: (ln[0], NODE_ORDER.index(ln[1])))


@contextmanager
def tracing(model) -> Iterator[Trace]:
    tr = Trace()
    old, model.tracer = model.tracer, tr
    try:
        yield tr
    finally:
        model.tracer = old


def drift_map(a: Trace, b: Trace) -> list[dict]:
    """Per (layer, node) both traces hold: tokens compared and tokens whose bits differ."""
    out = []
    for ln in a.order():
        other = ln if ln in b.rows else (ln[0], SAME_POINT.get(ln[1]))
        if other not in b.rows:
            continue
        ra, rb = a.rows[ln], b.rows[other]
        common = sorted(set(ra) & set(rb))
        diff = [k for k in common if ra[k] != rb[k]]
        out.append({"layer": ln[0], "node": ln[1], "kind": NODE_KIND.get(ln[1]), "tokens": len(common),
                    "tokens_differ": len(diff), "first_key": _key(diff[0]) if diff else None})
    return out


def first_drift(a: Trace, b: Trace) -> dict | None:
    """The first (layer, node) in chain order whose per-token outputs differ, or None."""
    for row in drift_map(a, b):
        if row["tokens_differ"]:
            return row
    return None


def _key(k: int) -> dict:
    return {"sample_rank": k >> 32, "position": k & 0xFFFFFFFF}
