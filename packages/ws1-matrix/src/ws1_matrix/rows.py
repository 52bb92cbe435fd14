"""Per-token ops: run the canonical batch and each transformed layout on the profile's device, and
compare every logical row's output (C3) and gradients (C4) bit for bit.

The layouts are ws1_ops.invariance's (:func:`~ws1_ops.invariance.standard_layouts`: batch size
M=1..16 and single rows alone, a permutation, rows at random positions among filler rows, left and
right padding, 1 thread and the canonical count + 1), plus two *multi-call* transforms built from the fixture:

* ``B1`` — one call per sample (the trainer's four B=1 runs, aggregated);
* ``chunked7`` — one call per 7-position chunk of every sample (chunked prefill).

A multi-call transform runs its backward inside ``ws1_ops.canonical_grads()``, so a parameter's
gradient is one canonical reduction over the rows of all calls; the canonical run is a single call
without that scope, so B1 vs BN also checks that the two paths give the same bits.

Filler rows (``-1`` in a layout) are garbage — random values ×3, the pad id for token ids — and
carry garbage output gradients (×5): a kernel that let padding leak into a parameter gradient, or
into a neighbour row, turns red. Parameter gradients are sums over rows, so they are compared only
when the transform has every row; per-row input gradients are compared row by row.

Unlike ws1_ops.invariance.run this places rows on the CPU and then moves the batch to the device,
so the same harness runs on cuda and npu (the inputs are identical on every device).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

import ws1_ops
from ws1_contract import Comparison
from ws1_ops.invariance import Layout, num_threads, standard_layouts, thread_note

from .cases import TokenCase
from .compare import bitwise_blocks, blocks, digest

FILLER_ROWS = 7


@dataclass(frozen=True)
class Transform:
    """One transformed configuration: one or more op calls, each a layout of canonical rows."""

    name: str
    calls: tuple[Layout, ...]
    threads: int | None = None

    @property
    def multi_call(self) -> bool:
        return len(self.calls) > 1


def token_transforms(tc: TokenCase, device_type: str, seed: int = 0) -> list[Transform]:
    out = []
    for lay in standard_layouts(tc.n, seed=seed):
        if lay.threads is not None and device_type != "cpu":
            continue  # the thread count is a CPU knob; GPU/NPU kernels get no such transform
        out.append(Transform(lay.name, (lay,), lay.threads))
    for name, parts in tc.rows.split_calls().items():
        out.append(Transform(name, tuple(Layout(f"{name}[{i}]", p) for i, p in enumerate(parts))))
    return out


def canonical(tc: TokenCase) -> Transform:
    return Transform("canonical", (Layout("canonical", torch.arange(tc.n, device="cpu")),))


def fillers(tc: TokenCase, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1)
    out = []
    for x, fill in zip(tc.inputs, tc.int_fill):
        if x.is_floating_point():
            out.append((torch.randn(FILLER_ROWS, *x.shape[1:], generator=g, device="cpu") * 3).to(x.dtype))
        else:
            out.append(torch.full((FILLER_ROWS, *x.shape[1:]), int(fill), dtype=x.dtype, device="cpu"))
    return out


def place(x: torch.Tensor, rows: torch.Tensor, filler: torch.Tensor) -> torch.Tensor:
    """The transformed batch: canonical row ``rows[i]`` at position i, filler row ``i % len(filler)``
    where rows[i] == -1 (``filler`` has ``x``'s dtype). One copy of the batch, the filler rows then
    written over their slots (a [T, 151936] logits batch is 16 MB: a masked select of two full
    copies cost three passes)."""
    out = x.index_select(0, rows.clamp_min(0))
    pad = torch.nonzero(rows < 0).flatten()
    if pad.numel():
        out[pad] = filler.index_select(0, pad % filler.shape[0])
    return out


@dataclass
class TokenRun:
    idx: torch.Tensor  # canonical rows present, ascending
    out: torch.Tensor  # [len(idx), ...] outputs of those rows (CPU)
    row_grads: dict[str, torch.Tensor] = field(default_factory=dict)
    param_grads: dict[str, torch.Tensor] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # differentiable tensors that got no gradient


@dataclass
class Upstream:
    """Output gradients: ``dy`` [n, ...] per canonical row, ``fill`` for filler rows."""

    dy: torch.Tensor
    fill: torch.Tensor


def upstream_for(out: torch.Tensor, n: int, seed: int = 0) -> Upstream:
    g = torch.Generator().manual_seed(seed + 2)
    shape = tuple(out.shape[1:])
    dy = torch.randn((n, *shape), generator=g, device="cpu").to(out.dtype)
    return Upstream(dy, (torch.randn((FILLER_ROWS, *shape), generator=g, device="cpu") * 5).to(out.dtype))


def covers_all(tc: TokenCase, tr: Transform) -> bool:
    return torch.unique(torch.cat([lay.rows[lay.rows >= 0] for lay in tr.calls])).numel() == tc.n


def run(
    tc: TokenCase,
    tr: Transform,
    dev: torch.device,
    fill: list[torch.Tensor],
    params: list[torch.Tensor],
    up: Upstream | None,
) -> TokenRun:
    """Execute one transform. ``params`` are device tensors (BF16 for forward runs, FP32 masters
    holding the same values for gradient runs — or BF16 constants for a gradient run of a transform
    without every row, whose parameter gradient is not compared); each run starts with empty
    gradients (fresh input leaves; a parameter leaf passed in is reused, its gradient cleared: :func:`_leaf`).
    ``up`` None: forward only, under no_grad (the rollout's inference path)."""
    grad = up is not None
    ps = [_leaf(p, grad) for p in params]
    outs, leaves = [], []
    with num_threads(tr.threads), ws1_ops.cast_once(), contextlib.nullcontext() if grad else torch.no_grad():
        for lay in tr.calls:
            xs = [
                place(x, lay.rows, f).to(dev).requires_grad_(grad and x.is_floating_point())
                for x, f in zip(tc.inputs, fill)
            ]
            outs.append(tc.call(*xs, *ps, row_keys=tc.rows.keys(lay.rows).to(dev)))
            leaves.append(xs)
        backward_ran = grad and any(o.requires_grad for o in outs)  # embedding on a subset: nothing differentiable
        if backward_ran:
            dys = [place(up.dy, lay.rows, up.fill).to(dev) for lay in tr.calls]
            scope = ws1_ops.canonical_grads() if tr.multi_call else contextlib.nullcontext()
            with scope:
                torch.autograd.backward(outs, dys)
    # gather the valid rows of every call, in canonical order
    canon, picks = [], []
    for lay in tr.calls:
        valid = torch.nonzero(lay.rows >= 0).flatten()
        canon.append(lay.rows.index_select(0, valid))
        picks.append(valid)
    canon_all = torch.cat(canon)
    order = torch.argsort(canon_all)
    idx = canon_all.index_select(0, order)
    if idx.unique().numel() != idx.numel():
        raise ValueError(f"transform {tr.name}: a canonical row appears twice")

    # where each valid row sits in the calls' outputs laid end to end, in canonical order: gather()
    # is one copy of the rows it keeps (a call's output has a row per slot of its layout)
    starts = torch.tensor([0] + [lay.rows.numel() for lay in tr.calls[:-1]], device="cpu").cumsum(0)
    src = torch.cat([v + s for v, s in zip(picks, starts)]).index_select(0, order)

    def gather(parts: list[torch.Tensor]) -> torch.Tensor:
        flat = parts[0].detach() if len(parts) == 1 else torch.cat([p.detach() for p in parts])
        return flat.cpu().index_select(0, src)

    res = TokenRun(idx, gather(outs))
    if backward_ran:
        # a differentiable input or parameter that received no gradient is a failure, never a skip
        for i, (x, name) in enumerate(zip(tc.inputs, tc.names)):
            if x.is_floating_point():
                if any(xs[i].grad is None for xs in leaves):
                    res.missing.append(name)
                else:
                    res.row_grads[name] = gather([xs[i].grad for xs in leaves])
        if idx.numel() == tc.n:
            for p, name in zip(ps, tc.names[len(tc.inputs) :]):
                if p.requires_grad and p.grad is None:
                    res.missing.append(name)
                elif p.requires_grad:
                    res.param_grads[name] = p.grad.detach().cpu()
    return res


def _leaf(p: torch.Tensor, grad: bool) -> torch.Tensor:
    """The parameter leaf of one run: ``p`` itself when it already is a leaf that takes a gradient
    (gradient_invariance's masters, one object across runs so that cast_once can hit), its gradient
    cleared so the run starts empty — a run never adds into a gradient an earlier run returned;
    else a fresh leaf of ``p``."""
    if grad and p.is_leaf and p.requires_grad:
        p.grad = None
        return p
    return p.detach().requires_grad_(grad and p.dtype == torch.float32)


def _rows_of(t: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    """Rows ``idx`` (ascending canonical rows, as TokenRun.idx) of the canonical ``t``: ``t`` itself
    when they are all ``n`` rows (no copy to compare)."""
    return t if idx.numel() == n else t.index_select(0, idx)


@dataclass
class Verdict:
    """One transform judged against the canonical config: every comparison bitwise."""

    transform: str
    comparisons: list[Comparison]
    note: str = ""

    @property
    def passed(self) -> bool:
        return bool(self.comparisons) and all(c.passed for c in self.comparisons)

    @property
    def max_abs(self) -> float:
        return max((c.max_abs for c in self.comparisons if c.max_abs is not None), default=0.0)

    def to_dict(self) -> dict:
        bad = [c for c in self.comparisons if not c.passed]
        return {
            "transform": self.transform,
            "passed": self.passed,
            "compared": len(self.comparisons),
            "max_abs": self.max_abs,
            "detail": bad[0].detail if bad else f"bitwise ({len(self.comparisons)} tensor(s))",
            **({"note": self.note} if self.note else {}),
        }


# Above DIGEST_ABOVE elements a canonical parameter gradient is kept as sha256 digests per row block
# instead of whole. The vocabulary-sized ones (dE, lm_head's dW: 622M elements, 2.5 GB FP32) stay
# below it: kept whole, each transform's gradient is compared by torch.equal at memory speed, where
# sha256 (~1 GB/s on one core) took 25 s of C4's lm_head cells on a 2-core host. Peak memory of such
# a cell: FP32 master + its BF16 copy + the canonical and one transform's gradient, ~9 GB.
DIGEST_ABOVE = 1 << 30  # elements (4 GB FP32)
# Above BLOCKWISE_REF_ABOVE elements gradient_accuracy's FP32 reference of a weight is formed block
# by block over the weight's rows (no second vocabulary-sized FP32 gradient alive at once).
BLOCKWISE_REF_ABOVE = 1 << 26  # elements (256 MB FP32)


def _bf16(tc: TokenCase, dev: torch.device) -> list[torch.Tensor]:
    """The execution-dtype weights (exact: the masters hold BF16 values): the case's own BF16 copies
    where it kept them (TokenCase.exec_params, the same bits), else a cast of the masters."""
    if tc.exec_params is not None:
        return [b.to(dev) for b in tc.exec_params]
    return [p.to(dev).to(torch.bfloat16) for p in tc.params]


def forward_invariance(tc: TokenCase, dev: torch.device, seed: int = 0) -> list[Verdict]:
    fill = fillers(tc, seed)
    params = _bf16(tc, dev)
    ref = run(tc, canonical(tc), dev, fill, params, None)
    out = []
    for tr in token_transforms(tc, dev.type, seed):
        got = run(tc, tr, dev, fill, params, None)
        out.append(
            Verdict(
                tr.name,
                [bitwise_blocks(got.out, _rows_of(ref.out, got.idx, tc.n), f"{tr.name} output")],
                thread_note(tr.threads),
            )
        )
    return out


def _digest_mismatch(
    tc, dev, fill, params, up, name: str, label: str, got_blocks: dict[int, torch.Tensor], n_bad: int, n_blocks: int
) -> Comparison:
    """Explain a digest mismatch: rerun the canonical config and compare the kept differing block."""
    ref = run(tc, canonical(tc), dev, fill, params, up).param_grads[name]
    lo, blk = next(iter(got_blocks.items()))
    c = bitwise_blocks(blk, ref[lo : lo + blk.shape[0]], label)
    return Comparison(
        False,
        f"{label}: {n_bad} of {n_blocks} row blocks differ in their bits (sha256 of each block vs the "
        f"canonical's); first differing block starts at row {lo}: {c.detail}",
        n_total=ref.numel(),
        n_diff=c.n_diff,
        max_abs=c.max_abs,
        first_diff=c.first_diff,
    )


def gradient_invariance(tc: TokenCase, dev: torch.device, seed: int = 0) -> list[Verdict]:
    """Input gradients row by row, parameter gradients whole, from the FP32 masters (the trainer's
    layout: the kernels' FP32 accumulation judged without a BF16 rounding that could hide a
    low-bit change). A canonical parameter gradient above DIGEST_ABOVE elements is kept as sha256
    digests per row block, not as a second tensor of that size; a differing block is then explained
    against a rerun of the canonical config.

    Transforms without every row (M=m, a row alone) compare only per-row input gradients, so they run
    first, on BF16 weight constants (the same values: dx does not change), and no master gradient
    is formed for them."""
    fill = fillers(tc, seed)
    # One leaf per master for every run (run() clears its gradient first: :func:`_leaf`), all in one
    # cast_once scope: a master's BF16 execution copy is cast once per cell, not once per whole-row
    # run (nine of them; a [151936, 4096] master: 2.5 GB read, 1.2 GB written per cast). The copy is
    # keyed by the leaf's identity and version, and nothing writes the masters: the bits of a fresh cast.
    masters = [p.to(dev).detach().requires_grad_(p.dtype == torch.float32) for p in tc.params]
    with ws1_ops.cast_once():
        with torch.no_grad():
            probe = tc.call(
                *[x.to(dev) for x in tc.inputs],
                *_bf16(tc, dev),
                row_keys=tc.rows.keys(torch.arange(tc.n, device="cpu")).to(dev),
            )
        up = upstream_for(probe.cpu(), tc.n, seed)
        del probe
        ref = run(tc, canonical(tc), dev, fill, masters, up)
        digests = {}
        for name in [n for n, g in ref.param_grads.items() if g.numel() > DIGEST_ABOVE]:
            g = ref.param_grads.pop(name)
            digests[name] = (tuple(g.shape), g.dtype, digest(g))
            del g
        transforms = token_transforms(tc, dev.type, seed)
        partial = [tr for tr in transforms if not covers_all(tc, tr)]
        whole = [tr for tr in transforms if covers_all(tc, tr)]
        verdicts: dict[str, Verdict] = {}
        consts = _bf16(tc, dev) if partial else []
        for tr in partial:
            verdicts[tr.name] = _grad_verdict(tc, tr, dev, fill, consts, up, ref, digests, masters)
        # the case's BF16 copies go too (every gate judges this last; a later judgment would cast
        # again): the whole-row runs' peak stays the masters, one cast and two vocabulary-sized gradients
        del consts
        tc.exec_params = None
        for tr in whole:
            verdicts[tr.name] = _grad_verdict(tc, tr, dev, fill, masters, up, ref, digests, masters)
    return [verdicts[tr.name] for tr in transforms if verdicts[tr.name].comparisons]


def _grad_verdict(tc, tr, dev, fill, params, up, ref, digests, masters) -> Verdict:
    got = run(tc, tr, dev, fill, params, up)
    comps = [
        bitwise_blocks(g, _rows_of(ref.row_grads[name], got.idx, tc.n), f"{tr.name} d{name}")
        for name, g in got.row_grads.items()
    ]
    comps += [Comparison(False, f"{tr.name} d{name}: no gradient reached {name}") for name in got.missing + ref.missing]
    pending = []
    for name in list(got.param_grads):
        g = got.param_grads.pop(name)
        label = f"{tr.name} d{name}"
        if name not in digests:
            comps.append(bitwise_blocks(g, ref.param_grads[name], label))
            continue
        shape, dtype, want = digests[name]
        if (tuple(g.shape), g.dtype) != (shape, dtype):
            comps.append(Comparison(False, f"{label}: {tuple(g.shape)} {g.dtype} vs canonical {shape} {dtype}"))
            continue
        have = digest(g)
        bad = [i for i, (a, b) in enumerate(zip(have, want)) if a != b]
        if not bad:
            comps.append(
                Comparison(
                    True,
                    f"{label}: bitwise equal ({g.numel()} elements; sha256 per row block vs the canonical's)",
                    n_total=g.numel(),
                    max_abs=0.0,
                )
            )
        else:
            lo, hi = blocks(g)[bad[0]]
            pending.append((name, label, {lo: g[lo:hi].clone()}, len(bad), len(have)))
        del g  # the 2.5 GB gradient must be gone before the next run allocates its own
    del got
    for name, label, kept, n_bad, n_blocks in pending:
        comps.append(_digest_mismatch(tc, dev, fill, masters, up, name, label, kept, n_bad, n_blocks))
    return Verdict(tr.name, comps, thread_note(tr.threads))


def forward_accuracy(tc: TokenCase, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(candidate, FP32 reference) outputs. The candidate runs with the BF16 weights; the reference on
    the CPU with the same values in FP32 (the masters) and the candidate's own inputs upcast."""
    keys = tc.rows.keys(torch.arange(tc.n, device="cpu")).to(dev)
    with torch.no_grad():
        cand = tc.call(*[x.to(dev) for x in tc.inputs], *_bf16(tc, dev), row_keys=keys).cpu()
        ref = tc.ref(*tc.inputs, *tc.params)
    return cand, ref


def forward_reference_fp64(tc: TokenCase) -> torch.Tensor | None:
    """The FP64 reference output on the candidate's own inputs (CPU), for the ops the contract judges
    against one beside the FP32 reference (``tc.ref64``; None: the case has none)."""
    return None if tc.ref64 is None else tc.ref64(*tc.inputs, *tc.params)


def gradient_accuracy(tc: TokenCase, dev: torch.device, seed: int = 0) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, candidate grad, reference grad) for every float input and every parameter.

    Candidate: the ws1 op's backward with the FP32 masters as parameters (the forward executes
    exactly their BF16 values). Reference: torch.autograd through the FP32 reference op on the same
    values, with the same output gradient upcast. For a vocabulary-sized weight (``ref_block``) the
    reference runs block by block over the weight's rows — each block's gradient is that block's
    autograd through the same reference op, and the input gradient accumulates over blocks in FP32 —
    so no second [151936, 4096] FP32 gradient is ever alive."""
    keys = tc.rows.keys(torch.arange(tc.n, device="cpu")).to(dev)
    # .detach() first: the built case's tensors are shared (cached) and must never become leaves
    xs = [x.detach().to(dev).requires_grad_(x.is_floating_point()) for x in tc.inputs]
    ps = [p.detach().to(dev).requires_grad_() for p in tc.params]
    out = tc.call(*xs, *ps, row_keys=keys)
    up = upstream_for(out.detach().cpu(), tc.n, seed)
    out.backward(up.dy.to(dev))
    del out
    names = tc.names
    cand = {n: t.grad.detach().cpu() for n, t in zip(names, xs + ps) if t.grad is not None}
    # every differentiable input and every parameter is judged: one the candidate left without a
    # gradient is paired with None (a red comparison), never dropped
    wanted = [n for n, t in zip(names, xs + ps) if t.requires_grad]
    del xs, ps
    rx = [x.detach().float().requires_grad_() if x.is_floating_point() else x for x in tc.inputs]
    big = tc.ref_block is not None and any(p.numel() > BLOCKWISE_REF_ABOVE for p in tc.params)
    if not big:
        rp = [p.detach().requires_grad_() for p in tc.params]
        tc.ref(*rx, *rp).backward(up.dy.float())
        refs = {n: t.grad for n, t in zip(names, rx + rp) if isinstance(t, torch.Tensor) and t.grad is not None}
        return [(n, cand.get(n), refs.get(n)) for n in wanted]
    (W,) = tc.params
    wname = names[len(tc.inputs)]
    cw = cand.get(wname)
    if cw is None:
        return [(n, cand.get(n), None) for n in wanted]

    def weight_blocks():
        for lo, hi in blocks(W):
            wb = W[lo:hi].detach().requires_grad_()
            tc.ref_block(rx, wb, lo, hi, up.dy)
            yield lo, cw[lo:hi], (wb.grad if wb.grad is not None else torch.zeros_like(wb))  # a block no row used: 0

    # the weight first: its blocks also accumulate the inputs' reference gradients, read after it
    out_pairs = [(wname, cw, BlockwiseRef(weight_blocks()))]
    out_pairs += [(n, cand.get(n), LazyRef(lambda t=t: t.grad)) for n, t in zip(names, rx) if n in wanted]
    return out_pairs


@dataclass
class BlockwiseRef:
    """A reference gradient produced block by block: (row offset, candidate block, reference block),
    each reference block computed when the comparison reaches it and dropped after."""

    parts: Iterator


@dataclass
class LazyRef:
    """A reference gradient that exists only after an earlier pair was compared."""

    get: Callable[[], torch.Tensor | None]
