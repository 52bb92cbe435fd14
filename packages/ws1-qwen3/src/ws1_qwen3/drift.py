"""first_drift: where two runs of the chain stop agreeing, per node and per token.

A :class:`Trace` hooks the model's tracer and keeps, for every (layer, node) the model reports, a
digest of each valid row's raw bits keyed by its logical key. Comparing two traces walks the nodes
in chain order and names the first one whose per-token outputs differ on a key both runs computed
— the tool a user needs when parity breaks ("layer 0, attention, 19 tokens").

Nodes, per layer: ``rope_k``, ``attention``, ``attn_residual``, ``swiglu``, ``mlp_residual``; plus
``embedding`` (layer −1), ``final_norm`` and ``lm_head`` (layer L). Rows are digested, not kept,
so a trace of the 8B model costs kilobytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch

NODE_ORDER = ("embedding", "rope_k", "attention", "attn_residual", "swiglu", "mlp_residual", "final_norm", "lm_head")


def _row_digests(t: torch.Tensor) -> list[bytes]:
    flat = t.detach().contiguous().cpu().reshape(t.shape[0], -1)
    raw = flat.view(torch.uint8) if flat.numel() else flat
    return [hashlib.blake2b(r.numpy().tobytes(), digest_size=12).digest() for r in raw]


class Trace:
    def __init__(self) -> None:
        self.rows: dict[tuple[int, str], dict[int, bytes]] = {}

    def __call__(self, layer: int, node: str, t: torch.Tensor, keys: torch.Tensor) -> None:
        keys = keys.detach().cpu()
        d = self.rows.setdefault((layer, node), {})
        for k, dig in zip(keys.tolist(), _row_digests(t)):
            if k >= 0:
                d[k] = dig

    def order(self) -> list[tuple[int, str]]:
        return sorted(self.rows, key=lambda ln: (ln[0], NODE_ORDER.index(ln[1]) if ln[1] in NODE_ORDER else 99))


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
        if ln not in b.rows:
            continue
        ra, rb = a.rows[ln], b.rows[ln]
        common = sorted(set(ra) & set(rb))
        diff = [k for k in common if ra[k] != rb[k]]
        out.append({"layer": ln[0], "node": ln[1], "tokens": len(common), "tokens_differ": len(diff),
                    "first_key": _key(diff[0]) if diff else None})
    return out


def first_drift(a: Trace, b: Trace) -> dict | None:
    """The first (layer, node) in chain order whose per-token outputs differ, or None."""
    for row in drift_map(a, b):
        if row["tokens_differ"]:
            return row
    return None


def _key(k: int) -> dict:
    return {"sample_rank": k >> 32, "position": k & 0xFFFFFFFF}
