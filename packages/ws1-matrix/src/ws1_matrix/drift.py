"""first_drift: where two runs of the chain stop agreeing, per node and per token.

A :class:`Trace` hooks the model's tracer and keeps, for every (layer, node) the model reports, a
digest of each valid row's raw bits keyed by its logical key. Comparing two traces walks the nodes
in chain order and names the first one whose per-token outputs differ on a key both runs computed
— the tool a user needs when parity breaks ("layer 0, attention, 19 tokens").

Every kernel call of the chain is a trace point, named by its role (each GEMM, each norm), in the
order the chain computes them (``ws1_qwen3.model.NODE_ORDER``), so the first drifting point is the kernel
that drifted, not one downstream. ``silu`` is traced at (0, ``silu``) by the C9/C10 identity check
(:func:`ws1_matrix.model_nodes.silu_identity`).

Rows are digested, not kept, so a trace of the 8B model costs kilobytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ws1_qwen3.model import HEAD_NODES, INPUT_NODES, LAYER_NODES, NODE_KIND, NODE_ORDER, SAME_POINT  # noqa: F401  (re-exported)


def _row_digests(t: torch.Tensor) -> list[bytes]:
    flat = t.detach().contiguous().cpu().reshape(t.shape[0], -1)
    raw = flat.view(torch.uint8) if flat.numel() else flat
    return [hashlib.blake2b(r.numpy().tobytes(), digest_size=12).digest() for r in raw]


class Trace:
    def __init__(self) -> None:
        self.rows: dict[tuple[int, str], dict[int, bytes]] = {}

    def __call__(self, layer: int, node: str, t: torch.Tensor, keys: torch.Tensor) -> None:
        if node not in NODE_KIND:  # an unordered node could hide the real first drift
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
        out.append(
            {
                "layer": ln[0],
                "node": ln[1],
                "kind": NODE_KIND.get(ln[1]),
                "tokens": len(common),
                "tokens_differ": len(diff),
                "first_key": _key(diff[0]) if diff else None,
            }
        )
    return out


def first_drift(a: Trace, b: Trace) -> dict | None:
    """The first (layer, node) in chain order whose per-token outputs differ, or None."""
    for row in drift_map(a, b):
        if row["tokens_differ"]:
            return row
    return None


def _key(k: int) -> dict:
    return {"sample_rank": k >> 32, "position": k & 0xFFFFFFFF}
