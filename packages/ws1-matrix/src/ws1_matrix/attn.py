"""Attention: invariance is judged per sequence, because the rows of one sequence are not independent.

Canonical config: every sequence of the case packed in sample order into one varlen call, full
prefill (``BN/full``; the op takes varlen segments, so a padded batch is segments too). Transforms:

================  ============================================================================
``B1``            each sequence in its own call (batch 1 vs N)
``fillers``       the batch with a filler sequence before and after it (row positions, batch size)
``permuted``      sequences in order [2, 0, 3, 1] (reversed when B != 4)
``padded_right``  a right-padded [B, P, ...] batch (garbage ×3 in the pad rows), all B·P rows in one
                  call: each sequence and each run of pad rows its own segment
                  (``ws1_ops.padded_segments``), so the pad rows are queries of the kernel and
                  get a garbage dO (×5) in backward, while cu_seqlens keeps them out of every
                  real row's keys (and real keys out of theirs: a pad query's dO would reach them)
``padded_left``   the same with left padding: each sequence now starts mid-row, after its pad run
``padded_inline`` each sequence carries P-L garbage rows after its end *inside* the call: causal
                  queries never touch later keys, so the real rows cannot change; in backward the
                  padding rows get dO = 0 (a masked loss)
``chunked7``      chunked prefill as a KV-cache engine runs it: one call per 7-position chunk
                  step (every sequence's chunk), queries at absolute positions, keys 0..chunk end
``chunked7_op``   the op's own ``chunk=7`` mode: the same chunked forward inside one call, with
                  the canonical whole-sequence backward (what a chunked training step runs)
``threadsN``     1 thread, and the canonical run's count + 1 (``ws1_ops.invariance.thread_counts``)
================  ============================================================================

Decode (the ``long`` case, one query at position t = Skv-1): the canonical config is the full
prefill of the sequence, the transforms are ``decode`` (the query alone against keys 0..t, the
KV-cache step) and ``decode_batched`` (the same step batched with two other requests' steps, as
continuous batching does), plus the thread counts. Its gradient canonical is the prefill's
backward with dO on row t only: dq[t], dk, dv of the decode step must equal it bitwise.

Gradients compared per sequence: dq, dk, dv, over every transform except ``chunked7``: with one
call per chunk, a key's dk/dv would be a sum over calls made by autograd (each partial already
rounded to BF16) — an inference-only path whose gradient no kernel could make layout-independent.
The trainer's chunked step is ``chunked7_op``, and it is judged on all three gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import ws1_ops
from ws1_ops import reference
from ws1_ops.invariance import num_threads, thread_counts, thread_note

from .cases import CHUNK, AttnCase
from .compare import bitwise_blocks
from .rows import Verdict

BF16 = torch.bfloat16


@dataclass
class Item:
    """One sequence's part of a call: queries, keys 0..end, and the queries' absolute positions."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_pos: torch.Tensor


def call(items: list[Item], dev: torch.device, chunk: int | None = None) -> list[torch.Tensor]:
    """One varlen ws1_ops.attention call over ``items``; the output split back per item.
    ``chunk``: the op's own chunked-prefill mode (forward in chunks, canonical backward)."""
    lq = torch.tensor([it.q.shape[0] for it in items], device="cpu")
    lk = torch.tensor([it.k.shape[0] for it in items], device="cpu")
    out = ws1_ops.attention(
        torch.cat([it.q for it in items]),
        torch.cat([it.k for it in items]),
        torch.cat([it.v for it in items]),
        ws1_ops.cu_seqlens_from_lengths(lq).to(dev),
        ws1_ops.cu_seqlens_from_lengths(lk).to(dev),
        torch.cat([it.q_pos for it in items]).to(dev),
        chunk=chunk,
    )
    return list(torch.split(out, lq.tolist()))


def _filler_seqs(ac: AttnCase, lengths: list[int], seed: int) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(seed + 11)
    Hq, Hkv, D = ac.heads
    return [
        tuple((torch.randn(L, h, D, generator=g, device="cpu") * 2).to(BF16) for h in (Hq, Hkv, Hkv)) for L in lengths
    ]


@dataclass
class SeqRun:
    out: list[torch.Tensor]  # per canonical sequence: its query rows' outputs (CPU)
    grads: list[dict[str, torch.Tensor]] | None  # per sequence: dq, dk, dv (CPU); None forward-only


class _Leaves:
    """Per-sequence leaf tensors on the device (fresh per run, so gradients start empty)."""

    def __init__(self, seqs, dev, grad: bool):
        self.q, self.k, self.v = ([s[i].detach().to(dev).requires_grad_(grad) for s in seqs] for i in range(3))


def _backward(outs: list[torch.Tensor], douts: list[torch.Tensor]) -> None:
    torch.autograd.backward(outs, douts)


@dataclass
class _Prefill:
    """What every prefill transform starts from: the case, the device, fresh leaves, positions, dO."""

    ac: AttnCase
    dev: torch.device
    grad: bool
    leaves: _Leaves
    pos: list[torch.Tensor]
    douts: list[torch.Tensor | None]
    seed: int

    def items(self) -> list[Item]:
        L = self.leaves
        return [Item(L.q[b], L.k[b], L.v[b], self.pos[b]) for b in range(len(self.ac.seqs))]

    def leaf_grads(self, outs: list[torch.Tensor]):
        """Backward through ``outs`` and the leaves' gradients (dq, dk, dv per sequence)."""
        if not self.grad:
            return None, None, None
        _backward(outs, self.douts)
        return ([t.grad for t in x] for x in (self.leaves.q, self.leaves.k, self.leaves.v))


# Each prefill transform: (_Prefill) -> (outputs per canonical sequence, dq, dk, dv per sequence or None).


def _together(p: _Prefill, chunk: int | None = None):
    """All sequences in one varlen call (canonical, threadsN; ``chunk``: the op's chunked prefill)."""
    outs = call(p.items(), p.dev, chunk=chunk)
    return (outs, *p.leaf_grads(outs))


def _singles(p: _Prefill):
    """B1: one call per sequence."""
    outs = [call([it], p.dev)[0] for it in p.items()]
    return (outs, *p.leaf_grads(outs))


def _permuted(p: _Prefill):
    B = len(p.ac.seqs)
    order = [2, 0, 3, 1] if B == 4 else list(reversed(range(B)))
    items = p.items()
    got = call([items[b] for b in order], p.dev)
    outs = [got[order.index(b)] for b in range(B)]
    return (outs, *p.leaf_grads(outs))


def _fillers(p: _Prefill):
    """The sequences between two filler sequences (lengths 5 and 13) in one call."""
    fill = _filler_seqs(p.ac, [5, 13], p.seed)
    F = [Item(*(t.to(p.dev) for t in f), torch.arange(f[0].shape[0], device=p.dev)) for f in fill]
    outs = call([F[0], *p.items(), F[1]], p.dev)[1:-1]
    return (outs, *p.leaf_grads(outs))


def _padded(left: bool):
    def run(p: _Prefill):
        """A [B, P] padded batch (garbage in the padding), all B*P rows into the kernel: every
        sequence and every pad run its own segment, so pad rows are queries (garbage out, garbage
        dO back) that no real row attends to."""
        ac, dev, grad = p.ac, p.dev, p.grad
        B, P = len(ac.seqs), ac.padded_length
        valid = torch.zeros(B, P, dtype=torch.bool, device="cpu")
        for b, Lb in enumerate(ac.lengths):
            if left:
                valid[b, P - Lb :] = True
            else:
                valid[b, :Lb] = True
        g = torch.Generator().manual_seed(p.seed + 5)
        Hq, Hkv, D = ac.heads

        def padded(i, h):
            t = (torch.randn(B, P, h, D, generator=g, device="cpu") * 3).to(BF16)  # garbage in the padding
            for b in range(B):
                t[b][valid[b]] = ac.seqs[b][i]
            return t.to(dev).requires_grad_(grad)

        pq, pk, pv = padded(0, Hq), padded(1, Hkv), padded(2, Hkv)
        vd = valid.to(dev)
        cu, seg_pos = ws1_ops.padded_segments(valid)
        out_pad = ws1_ops.attention(
            pq.flatten(0, 1), pk.flatten(0, 1), pv.flatten(0, 1), cu.to(dev), cu.to(dev), seg_pos.to(dev)
        ).view(B, P, Hq, D)
        outs = [out_pad[b][vd[b]] for b in range(B)]
        if not grad:
            return outs, None, None, None
        dpad = (torch.randn(B, P, Hq, D, generator=g, device="cpu") * 5).to(BF16).to(dev)  # garbage dO in padding
        for b in range(B):
            dpad[b][vd[b]] = p.douts[b]
        out_pad.backward(dpad)
        return (outs, *([t.grad[b][vd[b]] for b in range(B)] for t in (pq, pk, pv)))

    return run


def _padded_inline(p: _Prefill):
    """Each sequence extended with garbage rows to the padded length, one varlen call; dO = 0 there."""
    ac, dev, grad = p.ac, p.dev, p.grad
    P = ac.padded_length
    g = torch.Generator().manual_seed(p.seed + 7)
    Hq, Hkv, D = ac.heads
    ext = []
    for b, Lb in enumerate(ac.lengths):
        parts = []
        for i, h in ((0, Hq), (1, Hkv), (2, Hkv)):
            pad = (torch.randn(P - Lb, h, D, generator=g, device="cpu") * 3).to(BF16)
            parts.append(torch.cat([ac.seqs[b][i], pad]).to(dev).requires_grad_(grad))
        ext.append(parts)
    got = call([Item(q, k, v, torch.arange(P, device=dev)) for q, k, v in ext], dev)
    outs = [o[:Lb] for o, Lb in zip(got, ac.lengths)]
    if not grad:
        return outs, None, None, None
    # padding rows get dO = 0: the loss ignores them
    _backward(
        got,
        [
            torch.cat([p.douts[b], torch.zeros(P - Lb, *p.douts[b].shape[1:], dtype=BF16, device=dev)])
            for b, Lb in enumerate(ac.lengths)
        ],
    )
    return (outs, *([e[i].grad[:Lb] for e, Lb in zip(ext, ac.lengths)] for i in range(3)))


def _chunk_calls(p: _Prefill):
    """Chunked prefill as separate calls, one per 7-query chunk (every sequence's chunk c together):
    separate query leaves per chunk (dq rows are then copied, never summed); k/v sliced. dk/dv are
    not comparable (see the module docstring)."""
    ac, dev, grad, L = p.ac, p.dev, p.grad, p.leaves
    B, lengths = len(ac.seqs), ac.lengths
    qs = [
        [s[0][c0 : c0 + CHUNK].detach().to(dev).requires_grad_(grad) for c0 in range(0, Lb, CHUNK)]
        for s, Lb in zip(ac.seqs, lengths)
    ]
    per_seq: list[list[torch.Tensor]] = [[] for _ in range(B)]
    outs_all, douts_all = [], []
    for c in range(max(len(x) for x in qs)):
        members = [b for b in range(B) if c < len(qs[b])]
        items = []
        for b in members:
            c0 = c * CHUNK
            c1 = min(lengths[b], c0 + CHUNK)
            items.append(Item(qs[b][c], L.k[b][:c1], L.v[b][:c1], torch.arange(c0, c1, device=dev)))
        got = call(items, dev)
        for b, o in zip(members, got):
            per_seq[b].append(o)
            if grad:
                outs_all.append(o)
                douts_all.append(p.douts[b][c * CHUNK : c * CHUNK + o.shape[0]])
    outs = [torch.cat(x) for x in per_seq]
    if not grad:
        return outs, None, None, None
    _backward(outs_all, douts_all)
    return outs, [torch.cat([x.grad for x in qb]) for qb in qs], None, None


PREFILL = {
    "canonical": _together,
    "B1": _singles,
    "permuted": _permuted,
    "fillers": _fillers,
    "padded_right": _padded(left=False),
    "padded_left": _padded(left=True),
    "padded_inline": _padded_inline,
    f"chunked{CHUNK}": _chunk_calls,
    f"chunked{CHUNK}_op": lambda p: _together(p, chunk=CHUNK),
}


def _prefill_run(
    ac: AttnCase, transform: str, dev: torch.device, douts: list[torch.Tensor] | None, seed: int
) -> SeqRun:
    """Run one prefill transform (``canonical`` included; ``threadsN``: the canonical call on N
    threads). ``douts`` [L_b, Hq, D] per sequence, or None for forward only."""
    threads = _threads(transform)
    run = _together if threads is not None else PREFILL.get(transform)
    if run is None:
        raise ValueError(f"unknown attention transform {transform!r}")
    grad = douts is not None
    B = len(ac.seqs)
    with num_threads(threads), torch.enable_grad() if grad else torch.no_grad():
        p = _Prefill(
            ac,
            dev,
            grad,
            _Leaves(ac.seqs, dev, grad),
            [torch.arange(L, device=dev) for L in ac.lengths],
            [None if not grad else d.to(dev) for d in (douts or [None] * B)],
            seed,
        )
        outs, dq, dk, dv = run(p)
    res = SeqRun([o.detach().cpu() for o in outs], None)
    if grad:
        res.grads = [
            {name: g[b].detach().cpu() for name, g in (("dq", dq), ("dk", dk), ("dv", dv)) if g is not None}
            for b in range(B)
        ]
    return res


def prefill_transforms(ac: AttnCase, device_type: str, grad: bool = False) -> list[str]:
    out = []
    if len(ac.seqs) > 1:
        out += ["B1", "permuted"]
    out += ["fillers", "padded_right", "padded_left", "padded_inline", f"chunked{CHUNK}_op"]
    if not grad:
        out.append(f"chunked{CHUNK}")  # separate calls per chunk: forward only (module docstring)
    if device_type == "cpu":
        out += _thread_transforms()
    return out


def _thread_transforms() -> list[str]:
    return [f"threads{t}" for t in thread_counts()]


def _threads(transform: str) -> int | None:
    """The thread count a ``threadsN`` transform runs (None: the canonical run's default)."""
    return int(transform[len("threads") :]) if transform.startswith("threads") else None


def _douts(ac: AttnCase, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 3)
    return [torch.randn(q.shape, generator=g, device="cpu").to(BF16) for q, _, _ in ac.seqs]


def _cmp_out(name: str, got: SeqRun, ref: SeqRun) -> list:
    return [bitwise_blocks(torch.cat(got.out), torch.cat(ref.out), f"{name} output")]


def _cmp_grads(name: str, got: SeqRun, ref: SeqRun) -> list:
    comps = []
    for key in ("dq", "dk", "dv"):
        if all(key in g for g in got.grads):
            comps.append(
                bitwise_blocks(
                    torch.cat([g[key] for g in got.grads]), torch.cat([r[key] for r in ref.grads]), f"{name} {key}"
                )
            )
    return comps


# ---- decode -------------------------------------------------------------------------------------


def _decode_run(ac: AttnCase, transform: str, dev: torch.device, dout: torch.Tensor | None, seed: int) -> SeqRun:
    """The long case. ``canonical``: full prefill, row t (backward: dO on row t only).
    ``decode``/``decode_batched``/``threads*``: the query at t alone against keys 0..t."""
    grad = dout is not None
    t = ac.decode_pos
    q, k, v = ac.seqs[0]
    threads = _threads(transform)
    with num_threads(threads), torch.enable_grad() if grad else torch.no_grad():
        K = k[: t + 1].detach().to(dev).requires_grad_(grad)
        V = v[: t + 1].detach().to(dev).requires_grad_(grad)
        if transform == "canonical":
            Q = q[: t + 1].detach().to(dev).requires_grad_(grad)
            full = call([Item(Q, K, V, torch.arange(t + 1, device=dev))], dev)[0]
            out = full[t : t + 1]
            if grad:
                d = torch.zeros(full.shape, dtype=BF16, device=dev)
                d[t] = dout[0].to(dev)
                full.backward(d)
            dq = None if not grad else Q.grad[t : t + 1]
        else:
            Q = q[t : t + 1].detach().to(dev).requires_grad_(grad)
            me = Item(Q, K, V, torch.tensor([t], device=dev))
            if transform == "decode_batched":
                # two other requests' decode steps in the same call, at other lengths
                f1, f2 = _filler_seqs(ac, [10, t + 9], seed)
                others = [
                    Item(f[0][-1:].to(dev), f[1].to(dev), f[2].to(dev), torch.tensor([f[0].shape[0] - 1], device=dev))
                    for f in (f1, f2)
                ]
                out = call([others[0], me, others[1]], dev)[1]
            else:
                out = call([me], dev)[0]
            if grad:
                out.backward(dout.to(dev))
            dq = None if not grad else Q.grad
    res = SeqRun([out.detach().cpu()], None)
    if grad:
        res.grads = [{"dq": dq.detach().cpu(), "dk": K.grad.detach().cpu(), "dv": V.grad.detach().cpu()}]
    return res


def decode_transforms(device_type: str) -> list[str]:
    return ["decode", "decode_batched"] + (_thread_transforms() if device_type == "cpu" else [])


# ---- the judgments --------------------------------------------------------------------------------


def forward_invariance(ac: AttnCase, dev: torch.device, seed: int = 0) -> list[Verdict]:
    if ac.mode == "decode":
        ref = _decode_run(ac, "canonical", dev, None, seed)
        return [
            Verdict(tr, _cmp_out(tr, _decode_run(ac, tr, dev, None, seed), ref), thread_note(_threads(tr)))
            for tr in decode_transforms(dev.type)
        ]
    ref = _prefill_run(ac, "canonical", dev, None, seed)
    return [
        Verdict(tr, _cmp_out(tr, _prefill_run(ac, tr, dev, None, seed), ref), thread_note(_threads(tr)))
        for tr in prefill_transforms(ac, dev.type)
    ]


def gradient_invariance(ac: AttnCase, dev: torch.device, seed: int = 0) -> list[Verdict]:
    if ac.mode == "decode":
        dout = torch.randn(
            (1, *ac.seqs[0][0].shape[1:]), generator=torch.Generator().manual_seed(seed + 3), device="cpu"
        ).to(BF16)
        ref = _decode_run(ac, "canonical", dev, dout, seed)
        return [
            Verdict(
                tr,
                _cmp_grads(tr, _decode_run(ac, tr, dev, dout, seed), ref),
                "; ".join(
                    filter(
                        None,
                        [
                            "canonical: the prefill's backward with dO on the decoded row only",
                            thread_note(_threads(tr)),
                        ],
                    )
                ),
            )
            for tr in decode_transforms(dev.type)
        ]
    douts = _douts(ac, seed)
    ref = _prefill_run(ac, "canonical", dev, douts, seed)
    out = []
    for tr in prefill_transforms(ac, dev.type, grad=True):
        out.append(Verdict(tr, _cmp_grads(tr, _prefill_run(ac, tr, dev, douts, seed), ref), thread_note(_threads(tr))))
    return out


def _reference_inputs(ac: AttnCase, grad: bool):
    """The candidate's BF16 inputs upcast to FP32, packed like the candidate's call."""
    if ac.mode == "decode":
        t = ac.decode_pos
        q, k, v = ac.seqs[0]
        return (
            q[t : t + 1].float().requires_grad_(grad),
            k[: t + 1].float().requires_grad_(grad),
            v[: t + 1].float().requires_grad_(grad),
            torch.tensor([0, 1], device="cpu"),
            torch.tensor([0, t + 1], device="cpu"),
            torch.tensor([t], device="cpu"),
        )
    cu = ws1_ops.cu_seqlens_from_lengths(torch.tensor(ac.lengths, device="cpu"))
    q, k, v = (torch.cat([s[i] for s in ac.seqs]).float().requires_grad_(grad) for i in range(3))
    return q, k, v, cu, cu, torch.cat([torch.arange(L, device="cpu") for L in ac.lengths])


def _candidate(ac: AttnCase, dev: torch.device, grad: bool):
    if ac.mode == "decode":
        t = ac.decode_pos
        q, k, v = ac.seqs[0]
        Q = q[t : t + 1].detach().to(dev).requires_grad_(grad)
        K = k[: t + 1].detach().to(dev).requires_grad_(grad)
        V = v[: t + 1].detach().to(dev).requires_grad_(grad)
        out = call([Item(Q, K, V, torch.tensor([t], device=dev))], dev)[0]
        return out, (Q, K, V)
    L = _Leaves(ac.seqs, dev, grad)
    outs = call([Item(L.q[b], L.k[b], L.v[b], torch.arange(n, device=dev)) for b, n in enumerate(ac.lengths)], dev)
    return torch.cat(outs), (L.q, L.k, L.v)


def forward_accuracy(ac: AttnCase, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        cand, _ = _candidate(ac, dev, False)
        ref = reference.attention(*_reference_inputs(ac, False))
    return cand.cpu(), ref


def gradient_accuracy(ac: AttnCase, dev: torch.device, seed: int = 0) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    out, (Q, K, V) = _candidate(ac, dev, True)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 3), device="cpu").to(BF16)
    out.backward(dout.to(dev))

    def cat(x):  # None when any leaf got no gradient: judged red, never skipped
        ts = x if isinstance(x, list) else [x]
        return None if any(t.grad is None for t in ts) else torch.cat([t.grad for t in ts]).detach().cpu()

    cand = {"dq": cat(Q), "dk": cat(K), "dv": cat(V)}
    rq, rk, rv, cu_q, cu_k, q_pos = _reference_inputs(ac, True)
    reference.attention(rq, rk, rv, cu_q, cu_k, q_pos).backward(dout.float())
    return [("dq", cand["dq"], rq.grad), ("dk", cand["dk"], rk.grad), ("dv", cand["dv"], rv.grad)]
