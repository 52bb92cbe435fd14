"""Row-invariance harness: run an op on the canonical batch and on transformed layouts of the same
logical rows, and compare each row's outputs — and gradients — bit for bit.

A *layout* says, for each position of the transformed batch, which canonical row sits there
(``-1``: a filler/padding row with garbage values). The canonical config is all ``n`` rows in
order. Transformed configs: the first ``m`` rows only (batch size M=m), permuted rows, rows at
random positions among filler rows, left and right padding, and 1 thread and the canonical
count + 1 (:func:`thread_counts`).

Parameter gradients are summed over rows, so they are compared whole: each run passes
``row_keys`` (the canonical row index; -1 for filler) and the op must drop filler rows and reduce
the rest in canonical order. Input gradients are per row and compared per row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ws1_contract import Comparison, bitwise

DEFAULT_MS = (1, 2, 3, 7, 16, 59, 128, 257)


@dataclass(frozen=True)
class Layout:
    name: str
    rows: torch.Tensor  # [M'] int64 canonical row index per position; -1 = filler row
    threads: int | None = None


def standard_layouts(n: int, ms: Sequence[int] = DEFAULT_MS, seed: int = 0, subsets: bool = True) -> list[Layout]:
    """The transforms of docs/design.md §3/C3 for ``n`` canonical rows.

    ``subsets``: include the batch-size layouts M=m (the first m rows); ops whose inputs are not
    independent rows (none here) would turn it off."""
    g = torch.Generator().manual_seed(seed)
    out: list[Layout] = []
    if subsets:
        out += [Layout(f"M{m}", torch.arange(m, device="cpu")) for m in ms if m < n]
        for r in sorted({0, n // 2, n - 1}):
            out.append(Layout(f"alone-row{r}", torch.tensor([r], device="cpu")))
    out.append(Layout("permuted", torch.randperm(n, generator=g, device="cpu")))
    extra = max(3, n // 4)
    slots = torch.full((n + extra,), -1, dtype=torch.int64, device="cpu")
    pos = torch.sort(torch.randperm(n + extra, generator=g, device="cpu")[:n]).values
    slots[pos] = torch.arange(n, device="cpu")
    out.append(Layout("random_positions", slots))
    pad = torch.full((5,), -1, dtype=torch.int64, device="cpu")
    out.append(Layout("padded_right", torch.cat([torch.arange(n, device="cpu"), pad])))
    out.append(Layout("padded_left", torch.cat([pad, torch.arange(n, device="cpu")])))
    out += [Layout(f"threads{t}", torch.arange(n, device="cpu"), threads=t) for t in thread_counts()]
    return out


def thread_counts() -> tuple[int, int]:
    """The thread-count transforms: 1 thread, and one more than the canonical run's count (the
    default, torch.get_num_threads()), so on any host — 1 or 2 cores included — at least one of them
    runs a count the canonical run did not."""
    return 1, torch.get_num_threads() + 1


def thread_note(threads: int | None) -> str:
    """The evidence line of a thread transform: both counts."""
    return "" if threads is None else f"threads: {threads} vs the canonical run's {torch.get_num_threads()}"


@contextlib.contextmanager
def num_threads(n: int | None):
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _place(x: torch.Tensor, rows: torch.Tensor, filler: torch.Tensor) -> torch.Tensor:
    """Transformed batch: canonical row ``rows[i]`` at position i, a filler row where rows[i] == -1."""
    safe = rows.clamp_min(0)
    picked = x.index_select(0, safe)
    fill = filler.index_select(0, torch.arange(rows.numel(), device="cpu") % filler.shape[0])
    mask = (rows >= 0).reshape(-1, *([1] * (x.dim() - 1)))
    return torch.where(mask, picked, fill)


@dataclass
class RunResult:
    out: torch.Tensor  # [n_valid, ...] in canonical row order
    row_grads: list[torch.Tensor | None] = field(default_factory=list)
    param_grads: list[torch.Tensor | None] = field(default_factory=list)


def run(
    fn: Callable,
    row_inputs: Sequence[torch.Tensor],
    params: Sequence[torch.Tensor],
    layout: Layout,
    fillers: Sequence[torch.Tensor],
    dy: torch.Tensor | None = None,
    dy_filler: torch.Tensor | None = None,
) -> RunResult:
    """Run ``fn(*rows, *params, row_keys=keys)`` on the layout; backward with ``dy`` if given."""
    rows = layout.rows
    xs = [_place(x, rows, f) for x, f in zip(row_inputs, fillers)]
    want_grad = dy is not None
    xs = [x.detach().requires_grad_(want_grad and x.is_floating_point()) for x in xs]
    ps = [p.detach().requires_grad_(want_grad and p.is_floating_point()) for p in params]
    with num_threads(layout.threads):
        out = fn(*xs, *ps, row_keys=rows.clone())
        if want_grad:
            dyt = _place(dy, rows, dy_filler if dy_filler is not None else torch.zeros_like(dy[:1]))
            out.backward(dyt)
    valid = torch.nonzero(rows >= 0).flatten()
    order = torch.argsort(rows.index_select(0, valid))
    pick = valid.index_select(0, order)
    res = RunResult(out=out.detach().index_select(0, pick))
    if want_grad:
        res.row_grads = [None if x.grad is None else x.grad.index_select(0, pick) for x in xs]
        res.param_grads = [p.grad for p in ps]
    return res


@dataclass
class LayoutVerdict:
    layout: str
    forward: Comparison
    grads: dict[str, Comparison] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.forward.passed and all(c.passed for c in self.grads.values())


def check(
    fn: Callable,
    row_inputs: Sequence[torch.Tensor],
    params: Sequence[torch.Tensor] = (),
    *,
    layouts: Sequence[Layout] | None = None,
    grad: bool = False,
    seed: int = 0,
    names: Sequence[str] | None = None,
) -> list[LayoutVerdict]:
    """Compare every layout's rows (and gradients) with the canonical config, bitwise.

    ``row_inputs``: tensors whose first axis is the row axis ([n, ...]); ``params``: shared
    tensors (weights). Returns one verdict per layout; a verdict says what differed, where."""
    n = row_inputs[0].shape[0]
    g = torch.Generator().manual_seed(seed + 1)
    fillers = [
        (torch.randn(7, *x.shape[1:], generator=g, device="cpu") * 3).to(x.dtype)
        if x.is_floating_point()
        else x[:1].expand(7, *x.shape[1:]).clone()
        for x in row_inputs
    ]
    layouts = list(layouts) if layouts is not None else standard_layouts(n, seed=seed)
    canon = Layout("canonical", torch.arange(n, device="cpu"))
    dy = dy_f = None
    if grad:
        probe = fn(*row_inputs, *params, row_keys=torch.arange(n, device="cpu")).detach()
        dy = torch.randn(probe.shape, generator=g, device="cpu").to(probe.dtype)
        dy_f = (torch.randn((7, *probe.shape[1:]), generator=g, device="cpu") * 5).to(probe.dtype)
    ref = run(fn, row_inputs, params, canon, fillers, dy, dy_f)
    names = (
        list(names)
        if names is not None
        else [f"input{i}" for i in range(len(row_inputs))] + [f"param{i}" for i in range(len(params))]
    )
    verdicts = []
    for lay in layouts:
        got = run(fn, row_inputs, params, lay, fillers, dy, dy_f)
        idx = torch.sort(lay.rows[lay.rows >= 0]).values
        v = LayoutVerdict(lay.name, bitwise(got.out, ref.out.index_select(0, idx), f"{lay.name} output"))
        if grad:
            for i, (a, b) in enumerate(zip(got.row_grads, ref.row_grads)):
                if a is not None and b is not None:
                    v.grads[names[i]] = bitwise(a, b.index_select(0, idx), f"{lay.name} d{names[i]}")
            # parameter gradients are whole-tensor sums: only comparable when every row is present
            if idx.numel() == n:
                for j, (a, b) in enumerate(zip(got.param_grads, ref.param_grads)):
                    if a is not None and b is not None:
                        v.grads[names[len(row_inputs) + j]] = bitwise(a, b, f"{lay.name} d{names[len(row_inputs) + j]}")
        verdicts.append(v)
    return verdicts


def summarize(verdicts: Sequence[LayoutVerdict]) -> str:
    bad = [v for v in verdicts if not v.passed]
    if not bad:
        return f"bitwise across {len(verdicts)} layouts"
    first = bad[0]
    detail = (
        first.forward.detail
        if not first.forward.passed
        else next(c.detail for c in first.grads.values() if not c.passed)
    )
    return f"{len(bad)} of {len(verdicts)} layouts differ ({', '.join(v.layout for v in bad[:6])}); first: {detail}"
