"""Comparators: raw-bit equality, contract tolerance, and the chain log-prob aggregates.

Every comparator returns a :class:`Comparison` (never raises on a difference) whose ``detail``
says what differed, where, and by how much — what a user needs when parity breaks.
"""

from __future__ import annotations

import math

import attrs
import torch

_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@attrs.frozen
class Comparison:
    passed: bool
    detail: str
    n_total: int = 0
    n_diff: int = 0
    max_abs: float | None = None
    max_rel: float | None = None
    first_diff: dict | None = None

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def _nonfinite(t: torch.Tensor) -> int:
    if not t.is_floating_point():
        return 0
    return int((~torch.isfinite(t)).sum())


def _first_bad(t: torch.Tensor) -> tuple:
    idx = torch.nonzero(~torch.isfinite(t))[0].tolist()
    return tuple(idx)


def _structural(lhs: torch.Tensor, rhs: torch.Tensor, name: str, sides=("lhs", "rhs"), same_dtype: bool = True) -> Comparison | None:
    """A failed Comparison if the two sides cannot be compared at all, else None."""
    if not isinstance(lhs, torch.Tensor) or not isinstance(rhs, torch.Tensor):
        return Comparison(False, f"{name}: both sides must be tensors, got {type(lhs).__name__} and {type(rhs).__name__}")
    if lhs.shape != rhs.shape:
        return Comparison(False, f"{name}: shape mismatch {tuple(lhs.shape)} vs {tuple(rhs.shape)}")
    if same_dtype and lhs.dtype != rhs.dtype:
        return Comparison(False, f"{name}: dtype mismatch {lhs.dtype} vs {rhs.dtype}")
    for side, t in zip(sides, (lhs, rhs)):
        n = _nonfinite(t)
        if n:
            return Comparison(False, f"{name}: {n} non-finite value(s) in {side}, first at index {_first_bad(t)} — a hard failure",
                              n_total=t.numel())
    if lhs.numel() == 0:
        return Comparison(False, f"{name}: empty tensors: nothing was compared")
    return None


def bitwise(lhs: torch.Tensor, rhs: torch.Tensor, name: str = "tensor") -> Comparison:
    """Raw bit patterns equal: +0 and -0 differ; NaN/Inf anywhere, shape or dtype mismatch fail."""
    bad = _structural(lhs, rhs, name)
    if bad is not None:
        return bad
    a, b = lhs.detach().cpu().contiguous(), rhs.detach().cpu().contiguous()
    if a.is_floating_point():
        view = _INT_VIEW[a.element_size()]
        ai, bi = a.view(view), b.view(view)
    else:
        ai, bi = a, b
    diff = ai != bi
    n = int(diff.sum())
    if n == 0:
        return Comparison(True, f"{name}: bitwise equal ({a.numel()} elements)", n_total=a.numel(), max_abs=0.0)
    idx = tuple(torch.nonzero(diff)[0].tolist())
    af, bf = a.double(), b.double()
    max_abs = float((af - bf).abs().max())
    first = {"index": list(idx), "lhs": float(a[idx]), "rhs": float(b[idx])}
    return Comparison(
        False,
        f"{name}: {n} of {a.numel()} elements differ in their bits; max |delta| {max_abs:.3e}; "
        f"first at {list(idx)}: lhs {float(a[idx])!r} vs rhs {float(b[idx])!r}",
        n_total=a.numel(), n_diff=n, max_abs=max_abs, first_diff=first,
    )


def within_tolerance(cand: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, name: str = "tensor") -> Comparison:
    """``|cand - ref| <= atol + rtol * |ref|`` elementwise, in FP32 (ref is the FP32 reference)."""
    bad = _structural(cand, ref, name, sides=("the candidate", "the reference"), same_dtype=False)
    if bad is not None:
        return bad
    c, r = cand.detach().cpu().float(), ref.detach().cpu().float()
    err = (c - r).abs()
    bound = atol + rtol * r.abs()
    over = err > bound
    n = int(over.sum())
    max_abs = float(err.max())
    max_rel = float((err / r.abs().clamp_min(torch.finfo(torch.float32).tiny)).max())
    if n == 0:
        return Comparison(True, f"{name}: within atol {atol:g} rtol {rtol:g}; max |err| {max_abs:.3e}",
                          n_total=c.numel(), max_abs=max_abs, max_rel=max_rel)
    idx = tuple(torch.nonzero(over)[0].tolist())
    return Comparison(
        False,
        f"{name}: {n} of {c.numel()} elements exceed atol {atol:g} + rtol {rtol:g}*|ref|; max |err| {max_abs:.3e}; "
        f"first at {list(idx)}: candidate {float(c[idx])!r} vs reference {float(r[idx])!r}",
        n_total=c.numel(), n_diff=n, max_abs=max_abs, max_rel=max_rel,
        first_diff={"index": list(idx), "lhs": float(c[idx]), "rhs": float(r[idx])},
    )


@attrs.frozen
class AggregateResult:
    max_abs_dlogp: float
    approx_kl0: float
    clipfrac0: float
    bitwise_equal: bool
    tokens_different: int
    n_active: int
    passed: bool
    detail: str
    thresholds: dict | None = None

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def aggregates(
    lhs_logp: torch.Tensor,
    rhs_logp: torch.Tensor,
    active: torch.Tensor | None = None,
    thresholds: dict[str, float] | None = None,
    clip_interval: tuple[float, float] = (0.8, 1.2),
) -> AggregateResult:
    """The three chain aggregates over active tokens, with ``dlogp = lhs - rhs`` (both FP32).

    ``thresholds`` (from :meth:`Contract.aggregate_thresholds`) decides ``passed``; without it
    only finiteness and a non-empty active set are judged. An empty active set or any
    non-finite value fails.
    """
    if lhs_logp.shape != rhs_logp.shape:
        return AggregateResult(math.inf, math.inf, 1.0, False, -1, 0, False,
                               f"shape mismatch {tuple(lhs_logp.shape)} vs {tuple(rhs_logp.shape)}", thresholds)
    if active is None:
        active = torch.ones(lhs_logp.shape, dtype=torch.bool)
    active = active.to(torch.bool).cpu()
    lhs = lhs_logp.detach().cpu()[active]
    rhs = rhs_logp.detach().cpu()[active]
    n = int(lhs.numel())
    if n == 0:
        return AggregateResult(math.nan, math.nan, math.nan, False, 0, 0, False, "empty active set", thresholds)
    finite = bool(torch.isfinite(lhs).all() and torch.isfinite(rhs).all())
    bit_diff = lhs.view(torch.int32) != rhs.view(torch.int32) if lhs.dtype == torch.float32 else lhs != rhs
    d = lhs.double() - rhs.double()
    max_abs = float(d.abs().max())
    kl = float((torch.exp(d) - 1 - d).mean())
    lo, hi = clip_interval
    ratio = torch.exp(d)
    clip = float(((ratio < lo) | (ratio > hi)).double().mean())
    tokens_diff = int(bit_diff.sum())
    values = {"max_abs_dlogp": max_abs, "approx_kl0": kl, "clipfrac0": clip}
    failures = []
    if not finite:
        failures.append("non-finite log-probs")
    for m, v in values.items():
        if not math.isfinite(v):
            failures.append(f"{m} is not finite")
        elif thresholds is not None and v > thresholds[m]:
            failures.append(f"{m} {v:.3e} > {thresholds[m]:g}")
    passed = not failures
    detail = (
        f"{n} active tokens, {tokens_diff} differ in their bits; max|dlogp| {max_abs:.3e}, "
        f"approx_kl0 {kl:.3e}, clipfrac0 {clip:.3f}" + (f"; FAIL: {', '.join(failures)}" if failures else "")
    )
    return AggregateResult(max_abs, kl, clip, tokens_diff == 0 and finite, tokens_diff, n, passed, detail, thresholds)
