"""One judgment of one representative case -> one evidence cell.

A cell carries: ``profile``, ``op``, ``tier``, ``judgment``, ``case_id``, the comparison roles
(validated against the contract), the thresholds from the resolver (invariance: bitwise, 0/0),
the max errors, what each comparison or transform found, and ``kernel``: what the registry
recorded while the cell executed. A cell is green only if its comparisons pass *and* the recorded
kernel is exactly the one the manifest declares for the profile, on the profile's family and device;
anything else is red ("undeclared fallback"). A cell that cannot be executed is red with the reason.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

import ws1_ops
from ws1_contract import Cell, Comparison, Contract, Manifest, judged, red_not_executed, within_tolerance
from ws1_contract.compare import NormStats, with_norm, within_norm
from ws1_contract.errors import ContractError
from ws1_contract.evidence import ALLOWED_NA_REASONS

from . import attn, cases, packcheck, rows
from .cells import Outcome
from .compare import merge, tolerance_blocks

JUDGMENTS = ("forward_accuracy", "forward_invariance", "gradient_accuracy", "gradient_invariance")
FORWARD = JUDGMENTS[:2]
GRADIENT = JUDGMENTS[2:]
PACK_NA = ALLOWED_NA_REASONS[0]  # "profile_independent"


@dataclass
class Ctx:
    """What every cell of one profile's run shares."""

    profile: str
    contract: Contract
    manifest: Manifest
    device: torch.device
    family: str
    # the kernels under test: use_profile(profile); the negative controls pass use_candidate(...)
    activate: Callable[[], contextlib.AbstractContextManager]
    seed: int = 0

    @property
    def dtype(self) -> str:
        return self.contract.profiles[self.profile].execution_dtype


def cell_id(op: str, tier: str, judgment: str) -> str:
    return f"{op}-{tier}-{judgment}"


def tiers_of(manifest: Manifest, op: str, extra: bool) -> list[str]:
    """short, primary (+ long for attention when ``extra``): the tiers an op has cases for."""
    out = list(manifest.tiers)
    if extra:
        out += [t for t, ops in manifest.extra_tiers.items() if op in ops]
    return out


def _base(ctx: Ctx, op: str, tier: str, judgment: str, case) -> dict:
    return {
        "profile": ctx.profile,
        "op": op,
        "tier": tier,
        "case_id": None if case is None else case.case_id,
        "shape": None if case is None else dict(case.shape),
    }


def _roles(ctx: Ctx, judgment: str) -> tuple[str, str]:
    kind = "accuracy" if judgment.endswith("accuracy") else "invariance"
    pair = ctx.contract.comparison_roles.pairs[kind]
    ctx.contract.validate_role_pair(kind, pair.lhs, pair.rhs)  # a reversed or forbidden pair raises
    return pair.lhs, pair.rhs


def _rows(ctx: Ctx, op: str, judgment: str):
    """(elementwise row, tensor-norm row) of the contract for ``op``.

    The elementwise atol/rtol come from the execution dtype's row. The tensor-norm limits come from
    the dtype the op's values are in (``judged_dtype``): the logprob ops are FP32 in and out, so their
    gradients are judged by the FP32 norm limits (rel L2 1e-5). Their elementwise FP32 row (atol 1e-5,
    rtol 0) is not used: it is tighter than the FP32 reference itself is accurate at the manifest's
    vocabulary (V=151936, cpu_bf16, measured against an FP64 log_softmax: torch's FP32 reference is
    1.7e-5 off in the forward and 9.4e-4 in the gradient, ours 6.8e-6 and 4.2e-4), so it would judge
    the reference, not the kernel. Their forward is judged a second time instead, against an FP64
    reference by the contract's FP64-reference row (:func:`_fp64_row`)."""
    elem = ctx.contract.resolve(judgment, op, ctx.dtype)
    norm = ctx.contract.resolve(judgment, op, ctx.contract.judged_dtype(op, ctx.dtype))
    return elem, norm


def _fp64_row(ctx: Ctx, op: str, judgment: str):
    """The contract's FP64-reference row for ``op`` (at the dtype its values are in), or None where the
    judgment has none: today forward_accuracy of the logprob class (FP32 in and out), atol 5e-5
    rtol 0 against log_softmax in FP64 on the same inputs — beside the execution dtype's row against
    the FP32 reference, which stays (both must hold)."""
    dt = ctx.contract.judged_dtype(op, ctx.dtype)
    if "float64" not in ctx.contract.references(judgment, op, dt):
        return None
    return ctx.contract.resolve(judgment, op, dt, reference="float64")


def _thresholds(ctx: Ctx, op: str, judgment: str) -> dict:
    elem, th = _rows(ctx, op, judgment)
    norm = (
        {}
        if th.max_rel_l2 is None
        else {
            "max_rel_l2": th.max_rel_l2,
            "min_cosine": th.min_cosine,
            "norm_dtype": ctx.contract.judged_dtype(op, ctx.dtype),
        }
    )
    row64 = _fp64_row(ctx, op, judgment)
    fp64 = (
        {}
        if row64 is None
        else {
            "fp64_reference": {
                "atol": row64.atol,
                "rtol": row64.rtol,
                "dtype": ctx.contract.judged_dtype(op, ctx.dtype),
            }
        }
    )
    return {
        "atol": elem.atol,
        "rtol": elem.rtol,
        **norm,
        **fp64,
        "dtype": ctx.contract.dtype_name(ctx.dtype),
        "bitwise": ctx.contract.is_bitwise(judgment),
    }


def red_cells(
    ctx_or_profile, op: str, tier: str, judgments, why: str, case=None, not_executed: bool = True
) -> list[Cell]:
    """Red cells for a case that could not be judged (``not_executed``: the host cannot run it)."""
    profile = ctx_or_profile if isinstance(ctx_or_profile, str) else ctx_or_profile.profile
    base = {"profile": profile, "op": op, "tier": tier, "case_id": None if case is None else case.case_id}
    out = []
    for j in judgments:
        if not_executed:
            out.append(red_not_executed(cell_id(op, tier, j), j, why, **base))
        else:
            out.append(Cell(id=cell_id(op, tier, j), judgment=j, status="red", detail=why, extra=base))
    return out


def pack_na(profile: str, manifest: Manifest, tier: str, judgment: str, detail: str, case=None, extra=None) -> Cell:
    reason = manifest.helper_nodes["pack"].reason
    return Cell(
        id=cell_id("pack", tier, judgment),
        judgment=judgment,
        status="N/A",
        na_reason=PACK_NA,
        detail=f"{PACK_NA}: {reason}; {detail}",
        extra={
            "profile": profile,
            "op": "pack",
            "tier": tier,
            "case_id": None if case is None else case.case_id,
            "kernel": {"declared": None, "note": "profile-independent helper: torch index copies, no ws1 kernel"},
            **(extra or {}),
        },
    )


# ---- kernel provenance --------------------------------------------------------------------------


def kernel_problems(ctx: Ctx, op: str, judgment: str, summary: dict) -> tuple[list[str], dict]:
    """Problems with what ran (empty: exactly the declared kernel, family and device), and the record."""
    try:
        declared = ctx.manifest.kernel_id(ctx.profile, op)
    except ContractError as exc:
        return [f"missing_required: {exc}"], {"declared": None}
    own = summary.get(op)
    rec = {"declared": declared, **(own or {})}
    problems = []
    if own is None:
        problems.append(f"{op} never ran a ws1 kernel")
    else:
        if own["kernel_ids"] != [declared]:
            problems.append(f"ran {own['kernel_ids']}, declared {declared}")
        if own["families"] != [ctx.family]:
            problems.append(f"undeclared fallback: family {own['families']} is not {ctx.profile}'s {ctx.family!r}")
        if own["devices"] != [ctx.device.type]:
            problems.append(f"ran on {own['devices']}, not the profile's {ctx.device.type}")
        if judgment in GRADIENT and own["backward"] < 1:
            problems.append("no backward kernel call was recorded")
    for other, s in summary.items():
        if other != op and s["families"] != [ctx.family]:
            problems.append(f"undeclared fallback: {other} ran family {s['families']}")
        # what the kernel package itself counted must confirm each recorded call (not the label alone)
        problems += [
            f"{other}: {why}" for why in s.get("package_problems", ["the record carries no kernel self-report"])
        ]
    return problems, rec


# ---- the judgments --------------------------------------------------------------------------------


def _accuracy(
    ctx: Ctx,
    op: str,
    judgment: str,
    pairs: list[tuple[str, torch.Tensor, torch.Tensor]],
    fp64: list[tuple[str, torch.Tensor, torch.Tensor | None]] = (),
) -> Outcome:
    """Each (name, candidate, FP32 reference) pair by the execution dtype's row (+ the tensor-norm rule
    where the judgment has one); each ``fp64`` pair (name, candidate, FP64 reference) by the contract's
    FP64-reference row too. Green only if every comparison passes; the cell's max errors are the FP32
    reference's (its ``atol``), the FP64 ones are in its comparisons and detail."""
    elem, norm = _rows(ctx, op, judgment)
    comps: list[tuple[str, Comparison]] = []
    for name, cand, ref in pairs:
        if isinstance(ref, rows.LazyRef):
            ref = ref.get()
        if cand is None:  # a gradient the candidate did not produce is a failure, never a skip
            comps.append((name, Comparison(False, f"{name}: the candidate produced no gradient")))
        elif ref is None:
            comps.append((name, Comparison(False, f"{name}: the FP32 reference produced no gradient")))
        elif isinstance(ref, rows.BlockwiseRef):
            # the norm rule accumulates over the blocks: one verdict for the whole tensor
            stats, parts = NormStats(), []
            for lo, c, r in ref.parts:
                parts.append((lo, within_tolerance(c, r, elem.atol, elem.rtol, name)))
                stats.add(c, r)
            tol = merge(parts, name, cand.numel(), "tolerance")
            comps.append(
                (
                    name,
                    tol
                    if norm.max_rel_l2 is None
                    else with_norm(tol, stats.judge(norm.max_rel_l2, norm.min_cosine, name)),
                )
            )
        else:
            tol = tolerance_blocks(cand, ref, elem.atol, elem.rtol, name)
            comps.append(
                (
                    name,
                    tol
                    if norm.max_rel_l2 is None
                    else with_norm(tol, within_norm(cand, ref, norm.max_rel_l2, norm.min_cosine, name)),
                )
            )
    if not comps:
        return Outcome(judgment, False, "nothing was compared")
    comps64: list[tuple[str, Comparison]] = []
    row64 = _fp64_row(ctx, op, judgment) if fp64 else None
    for name, cand, ref in fp64:
        if ref is None:  # the contract asks for an FP64 reference the case cannot give: red, never skipped
            comps64.append(
                (
                    name,
                    Comparison(
                        False,
                        f"{name}: the case has no FP64 reference (the contract's "
                        f"fp64_reference row for {op} needs one)",
                    ),
                )
            )
        else:
            comps64.append((name, tolerance_blocks(cand, ref, row64.atol, row64.rtol, name)))
    bad = [c for _, c in comps + comps64 if not c.passed]
    mx = max((c.max_abs for _, c in comps if c.max_abs is not None), default=None)
    mr = max((c.max_rel for _, c in comps if c.max_rel is not None), default=None)
    names = ", ".join(n for n, _ in comps)
    norm = (
        ""
        if norm.max_rel_l2 is None or bad
        # green: every comparison carries both values
        else (
            f", rel L2 <= {norm.max_rel_l2:g} (worst {max(c.rel_l2 for _, c in comps):.3e}), "
            f"cosine >= {norm.min_cosine:.9g} (worst {min(c.cosine for _, c in comps):.9f})"
        )
    )
    also = (
        ""
        if bad or not comps64
        # short: a summary line shows ~140 characters of a detail
        else (f"; vs FP64 atol {row64.atol:g} rtol {row64.rtol:g}: max |err| {max(c.max_abs for _, c in comps64):.3e}")
    )
    detail = (
        (f"{bad[0].detail}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""))
        if bad
        else f"{names} within atol {elem.atol:g} + rtol {elem.rtol:g}*|ref|{norm}; max |err| {mx:.3e}{also}"
    )
    record = [{"name": n, "reference": "float32", **c.to_dict()} for n, c in comps]
    record += [{"name": n, "reference": "float64", **c.to_dict()} for n, c in comps64]
    return Outcome(judgment, not bad, detail, mx, mr, {"comparisons": record})


def _invariance(verdicts: list[rows.Verdict]) -> Outcome:
    if not verdicts:
        return Outcome("invariance", False, "no transform compared anything", facts={"transforms": []})
    bad = [v for v in verdicts if not v.passed]
    names = [v.transform for v in verdicts]
    mx = max(v.max_abs for v in verdicts)
    if bad:
        first = bad[0].to_dict()["detail"]
        detail = (
            f"{len(bad)} of {len(verdicts)} transforms differ ({', '.join(v.transform for v in bad[:6])}); "
            f"first: {first}"
        )
    else:
        detail = f"bitwise across {len(verdicts)} transforms ({', '.join(names)})"
    return Outcome("invariance", not bad, detail, mx, None, {"transforms": [v.to_dict() for v in verdicts]})


# case kind -> the module that runs its four judgments; each has forward_accuracy(built, dev) ->
# (cand, ref), gradient_accuracy(built, dev, seed) -> [(name, cand, ref)], and forward_invariance /
# gradient_invariance(built, dev, seed) -> [Verdict]: token cases row by row, attention by sequence
RUNNERS = {"token": rows, "attention": attn}


def _execute(ctx: Ctx, op: str, judgment: str, built) -> Outcome:
    run = RUNNERS.get(built.kind)
    if run is None:
        raise ValueError(f"unknown case kind {built.kind!r}")
    if judgment == "forward_accuracy":
        cand, ref = run.forward_accuracy(built, ctx.device)
        fp64 = []
        if _fp64_row(ctx, op, judgment) is not None:  # the logprob class: also against FP64, same inputs
            ref64 = getattr(run, "forward_reference_fp64", lambda b: None)(built)
            fp64 = [("output vs FP64", cand, ref64)]
        return _accuracy(ctx, op, judgment, [("output", cand, ref)], fp64)
    if judgment == "gradient_accuracy":
        return _accuracy(ctx, op, judgment, run.gradient_accuracy(built, ctx.device, ctx.seed))
    return _invariance(getattr(run, judgment)(built, ctx.device, ctx.seed))


def judge_pack(ctx_profile: str, manifest: Manifest, tier: str, judgments, dev: torch.device, where: str) -> list[Cell]:
    """pack's cells: N/A (profile_independent) with the executed round trip, red if it fails."""
    found = manifest.cases(profile=ctx_profile, op="pack", tier=tier)
    if not found:
        return red_cells(
            ctx_profile, "pack", tier, judgments, f"missing representative case for pack × {tier}", not_executed=False
        )
    case = found[0]
    built = cases.build(case, manifest)
    out = []
    for j in judgments:
        try:
            comps = packcheck.check(built, j, dev)
        except Exception as exc:  # noqa: BLE001 - an executed check that breaks is red, never N/A
            comps = [Comparison(False, f"error: {type(exc).__name__}: {exc}")]
        ok = bool(comps) and all(c.passed for c in comps)
        record = {"comparisons": [c.to_dict() for c in comps], "executed_on": where}
        shape = f"B{len(built.lengths)} S{built.x.shape[1]} H{built.x.shape[2]}, lengths {built.lengths}"
        if ok:
            out.append(
                pack_na(
                    ctx_profile,
                    manifest,
                    tier,
                    j,
                    f"executed on {where}: {len(comps)} bitwise checks of {shape}",
                    case,
                    record,
                )
            )
        else:
            bad = next(c for c in comps if not c.passed)
            out.append(
                Cell(
                    id=cell_id("pack", tier, j),
                    judgment=j,
                    status="red",
                    detail=f"pack round trip failed: {bad.detail}",
                    extra={"profile": ctx_profile, "op": "pack", "tier": tier, "case_id": case.case_id, **record},
                )
            )
    return out


def judge(ctx: Ctx, op: str, tier: str, judgments=JUDGMENTS) -> list[Cell]:
    """The cells of ``op`` × ``tier`` for ``judgments``, executed on the profile's device."""
    if op == "pack":
        return judge_pack(ctx.profile, ctx.manifest, tier, judgments, ctx.device, ctx.device.type)
    found = ctx.manifest.cases(profile=ctx.profile, op=op, tier=tier)
    if not found:
        # a missing representative case is red, not skipped
        return red_cells(
            ctx,
            op,
            tier,
            judgments,
            f"missing representative case for {op} × {tier} in the manifest",
            not_executed=False,
        )
    case = found[0]
    try:
        built = cases.build(case, ctx.manifest)
    except ContractError as exc:
        return red_cells(
            ctx, op, tier, judgments, f"case {case.case_id} cannot be built: {exc}", case, not_executed=False
        )
    source = getattr(getattr(built, "rows", None), "source", None) or getattr(built, "source", "")
    return [_judge_one(ctx, op, tier, j, case, built, source) for j in judgments]


def _judge_one(ctx: Ctx, op: str, tier: str, j: str, case, built, source: str) -> Cell:
    """One cell: run the judgment under the recorder, then settle what ran, then the verdict."""
    lhs, rhs = _roles(ctx, j)
    fields = dict(lhs_role=lhs, rhs_role=rhs, thresholds=_thresholds(ctx, op, j))
    base = {**_base(ctx, op, tier, j, case), "inputs": source}
    t0 = time.perf_counter()
    try:
        with ctx.activate(), ws1_ops.record() as rec:
            res = _execute(ctx, op, j, built)
    except ws1_ops.KernelUnavailable as exc:
        return judged(cell_id(op, tier, j), j, False, f"missing_required: {exc}", extra=base, **fields)
    except Exception as exc:  # noqa: BLE001 - a judgment that cannot complete is red with the reason
        return judged(cell_id(op, tier, j), j, False, f"error: {type(exc).__name__}: {exc}", extra=base, **fields)
    finally:
        gc.collect()
    problems, kernel = kernel_problems(ctx, op, j, rec.summary())
    detail = "; ".join(problems) + (" — " if problems else "") + res.detail
    return judged(
        cell_id(op, tier, j),
        j,
        res.passed and not problems,
        detail,
        max_abs_err=res.max_abs,
        max_rel_err=res.max_rel,
        extra={
            **base,
            "kernel": kernel,
            "recorded": rec.summary(),
            "wall_s": round(time.perf_counter() - t0, 3),
            **res.facts,
        },
        **fields,
    )
