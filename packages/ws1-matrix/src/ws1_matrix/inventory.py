"""C5: the elementwise inventory (docs/design.md §8) — a verdict per item and profile, with its argument.

    python -m ws1_matrix c5 [PROFILE ...] [--json]        (nox -s c5_inventory -- cpu_bf16)

Items: rope, silu, swiglu (ws1 kernels) and residual add, scale, bias, mask fill, dtype cast (plain
torch elementwise ops on the profile's device). Verdicts:

* ``pass``        executed on the profile's own device and every check passed;
* ``tracked_red`` not yet executed on its hardware (the device is absent here, or the profile's
                  kernel package is missing) — red, with the reason;
* ``blocker``     executed and a check failed — red.

Why an elementwise op can be layout-invariant at all: each output element is a function of the
inputs at that element alone (no reduction), so nothing can depend on the batch — *provided* every
element takes the same arithmetic path. That is where real kernels break it: vectorized bodies and
scalar tails, or SIMD and libm transcendentals, can round differently. So each item is checked
two ways on the device: (1) bitwise layout invariance over the per-token transforms (batch size,
row position, permutation, padding, threads), which would expose a body/tail split, and (2) for
the IEEE basic operations, equality with the correctly rounded result computed independently:
an FP64 evaluation rounded to the output type (double rounding through FP64 -> FP32 -> BF16 is
innocuous: 53 >= 2*24 + 2 and 24 >= 2*8 + 2), or integer bit manipulation for the cast and the
fill. rope, silu and swiglu are transcendental, so they are ws1 kernels and get the C3/C4 judgments.

Unlike C3/C4 an absent device does not exit 2: reporting ``tracked_red`` for it is the point.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

import ws1_accel
import ws1_ops
from ws1_contract import Cell, Comparison, bitwise, gate_main, judged
from ws1_contract.manifest import Case

from . import cases, rows
from . import forward_gradient as c34
from .cases import BF16, F32, TokenCase
from .judge import JUDGMENTS, judge

TORCH_ITEMS = ("residual_add", "scale", "bias", "mask_fill", "dtype_cast")


def kernel_items(manifest) -> list[str]:
    """The inventory's ws1-kernel items: the node table's ``inventory: true`` nodes (rope, swiglu, silu)."""
    return manifest.nodes_where(inventory=True)


def items(manifest) -> list[str]:
    return [*kernel_items(manifest), *TORCH_ITEMS]


ARGUMENTS = {
    "rope": "ws1 kernel: cos/sin computed in the kernel from (position, i) alone, one rotation formula per element; "
    "judged by C3/C4 (accuracy vs FP32, bitwise invariance of outputs and gradients) on short and primary",
    "silu": "ws1 kernel: x*sigmoid(x) in FP32 rounded once, one templated path (swiglu's with up = 1.0), so "
    "silu(x) == swiglu(x, ones) bitwise; judged by C3/C4 on short and primary",
    "swiglu": "ws1 kernel: silu(gate)*up in FP32 rounded once per element; judged by C3/C4 on short and primary",
    "residual_add": "h + o.float(): FP32 residual stream plus a BF16 op output upcast (exact); IEEE addition is "
    "correctly rounded, so each element equals round32(h + o) whatever the layout",
    "scale": "x * s: FP32 (the loss' 1/27) and BF16 with an FP32 scalar; IEEE multiplication is correctly rounded "
    "(attention's 1/sqrt(D) is applied inside the attention kernel, judged there)",
    "bias": "x + b[None, :] in BF16 — not in the Qwen3 chain (attention_bias false, no MLP bias); checked because a "
    "bias add is one broadcast IEEE addition per element",
    "mask_fill": "x.masked_fill(mask, v): a select, no arithmetic; the pad fill of unpack and of padded batches (the "
    "causal mask is inside the attention kernel: keys past a query are never touched)",
    "dtype_cast": "FP32 -> BF16 round-to-nearest-even (K/V before the cache, every op's output) and BF16 -> FP32 "
    "(exact): compared with the rounding done on the integer bits, ties and subnormals included",
}


def _round_bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """FP32 -> BF16 round-to-nearest-even on the integer bits (finite inputs): the reference cast."""
    bits = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    lsb = (bits >> 16) & 1
    return (((bits + 0x7FFF + lsb) >> 16) & 0xFFFF).to(torch.int32).to(torch.int16).view(BF16)


def _elementwise_case(manifest, profile: str, name: str, inputs: list[torch.Tensor], call: Callable) -> TokenCase:
    """A per-token 'case' for a torch elementwise op: rows = the primary fixture's 59 tokens."""
    T = inputs[0].shape[0]
    case = Case(case_id=f"{name}-primary-T{T}-{profile}", profile=profile, op=name, tier="primary", shape={"T": T})
    return TokenCase(
        case,
        cases.fixture_rows(manifest, "primary", T),
        inputs,
        [],
        [f"in{i}" for i in range(len(inputs))],
        lambda *a, row_keys: call(*a),
        None,
        [0] * len(inputs),
    )


def _torch_item(item: str, manifest, profile: str, dev: torch.device) -> list[tuple[str, Comparison]]:
    """(check name, comparison) pairs for a plain-torch item, executed on ``dev``."""
    g = torch.Generator().manual_seed(manifest.workload_seed + items(manifest).index(item))
    T = manifest.total_tokens  # the primary fixture's 59 tokens
    H, F = int(manifest.model.config["hidden_size"]), int(manifest.model.config["intermediate_size"])
    out: list[tuple[str, Comparison]] = []

    def on(t):
        return t.to(dev)

    if item == "residual_add":
        h, o = torch.randn(T, H, generator=g, device="cpu") * 4, torch.randn(T, H, generator=g, device="cpu").to(BF16)

        def fn(a, b):
            return a + b.float()

        ref = (h.double() + o.double()).float()
        out.append(("exact: round32(h + o)", bitwise(fn(on(h), on(o)).cpu(), ref, "residual add")))
        inputs = [h, o]
    elif item == "scale":
        x32, xb = (
            torch.randn(T, H, generator=g, device="cpu") * 3,
            torch.randn(T, H, generator=g, device="cpu").to(BF16),
        )
        s = float(
            torch.tensor(1 / manifest.active_tokens, dtype=F32, device="cpu")
        )  # the loss' 1/active-token count, as an FP32 value
        out.append(
            ("exact FP32: round32(x * s)", bitwise((on(x32) * s).cpu(), (x32.double() * s).float(), "FP32 scale"))
        )
        out.append(
            (
                "exact BF16: round16(x * s)",
                bitwise((on(xb) * s).cpu(), (xb.double() * s).float().to(BF16), "BF16 scale"),
            )
        )
        fn, inputs = (lambda a: a * s), [x32]
    elif item == "bias":
        x, b = torch.randn(T, F, generator=g, device="cpu").to(BF16), torch.randn(F, generator=g, device="cpu").to(BF16)
        ref = (x.double() + b.double()[None, :]).float().to(BF16)
        out.append(("exact: round16(x + b)", bitwise((on(x) + on(b)[None, :]).cpu(), ref, "bias add")))
        bd = on(b)
        fn, inputs = (lambda a: a + bd[None, :]), [x]
    elif item == "mask_fill":
        x = torch.randn(T, H, generator=g, device="cpu").to(BF16)
        mask = torch.rand(T, H, generator=g, device="cpu") < 0.3
        for v in (0.0, -7.0):
            want = torch.where(
                mask, torch.tensor(v, dtype=BF16, device="cpu").view(torch.int16), x.view(torch.int16)
            ).view(BF16)
            out.append((f"select: fill {v}", bitwise(on(x).masked_fill(on(mask), v).cpu(), want, f"masked_fill {v}")))
        # the layout check needs a mask that travels with its row: derive it from the row's values
        fn, inputs = (lambda a: a.masked_fill(a > 1.0, 0.0)), [x]
    elif item == "dtype_cast":
        x = torch.randn(T, H, generator=g, device="cpu") * 3
        # exact ties (lower 16 bits 0x8000, both parities), subnormals, values near 1 that carry
        special = (
            torch.tensor(
                [
                    0x00008000,
                    0x00018000,
                    0x3F808000,
                    0x3F818000,
                    0x3F80FFFF,
                    0x007FFFFF,
                    0x00000001,
                    0x80008000,
                    0xBF818000 - (1 << 32),
                    0x7F7F7FFF,
                ],
                dtype=torch.int64,
                device="cpu",
            )
            .to(torch.int32)
            .view(F32)
        )
        x[0, : special.numel()] = special
        out.append(
            ("FP32 -> BF16 == RNE on the bits", bitwise(on(x).to(BF16).cpu(), _round_bf16_bits(x), "cast to bf16"))
        )
        xb = x.to(BF16)
        want = (xb.view(torch.int16).to(torch.int32) << 16).view(F32)
        out.append(("BF16 -> FP32 exact", bitwise(on(xb).float().cpu(), want, "cast to fp32")))
        fn, inputs = (lambda a: a.to(BF16)), [x]
    else:
        raise KeyError(item)
    # layout invariance of the same op on the device (a vector body / scalar tail split would show here)
    tc = _elementwise_case(manifest, profile, item, inputs, fn)
    for v in rows.forward_invariance(tc, dev):
        out.append((f"layout {v.transform}", v.comparisons[0]))
    return out


def _kernel_item(item: str, ctx, families: set[str]) -> tuple[list[tuple[str, Comparison]], list[dict]]:
    checks: list[tuple[str, Comparison]] = []
    cells = []
    for tier in ctx.manifest.tiers:
        judged = judge(ctx, item, tier, JUDGMENTS)
        families |= c34.recorded_families(judged)
        for c in judged:
            cells.append({"id": c.id, "status": c.status, "detail": c.detail, "kernel": c.extra.get("kernel")})
            checks.append((c.id, Comparison(c.status == "green", c.detail)))
    if item == "silu":
        g = torch.Generator().manual_seed(ctx.manifest.workload_seed)
        x = (torch.randn(ctx.manifest.total_tokens, 1024, generator=g, device="cpu") * 4).to(BF16).to(ctx.device)
        with ctx.activate():
            checks.append(
                (
                    "silu(x) == swiglu(x, ones)",
                    bitwise(ws1_ops.silu(x), ws1_ops.swiglu(x, torch.ones_like(x)), "silu vs swiglu(x, 1)"),
                )
            )
    cases.forget()
    return checks, cells


def _cell(profile: str, item: str, verdict: str, detail: str, checks=None, extra=None) -> Cell:
    return judged(
        f"inventory-{item}",
        "elementwise_inventory",
        verdict == "pass",
        detail=f"{verdict}: {detail}",
        extra={
            "profile": profile,
            "item": item,
            "verdict": verdict,
            "argument": ARGUMENTS[item],
            "checks": [{"check": n, "passed": c.passed, "detail": c.detail} for n, c in (checks or [])],
            **(extra or {}),
        },
    )


def c5_inventory(run, args) -> None:
    profile = run.profile
    why = ws1_accel.unavailable_reason(profile)
    if why is not None:
        for item in items(run.manifest):
            run.add(
                _cell(
                    profile,
                    item,
                    "tracked_red",
                    f"not yet executed on its hardware: {profile} needs a "
                    f"{ws1_accel.device_type_of(profile)} device: {why}",
                )
            )
        return
    ctx = c34.make_ctx(run)
    missing = ws1_ops.family_available(ctx.family)
    families: set[str] = set()
    for item in items(run.manifest):
        try:
            if item in kernel_items(run.manifest):
                if missing is not None:
                    run.add(
                        _cell(
                            profile,
                            item,
                            "tracked_red",
                            f"not yet executed on its hardware: {ctx.family} kernel package missing: {missing}",
                        )
                    )
                    continue
                checks, cells = _kernel_item(item, ctx, families)
                extra = {"cells": cells}
            else:
                checks, extra = _torch_item(item, run.manifest, profile, ctx.device), {}
        except Exception as exc:  # noqa: BLE001 - an item whose checks cannot run is a blocker, with the reason
            run.add(
                _cell(
                    profile,
                    item,
                    "blocker",
                    f"executed on {ctx.device}, failed to complete: {type(exc).__name__}: {exc}",
                )
            )
            continue
        bad = [(n, c) for n, c in checks if not c.passed]
        if bad:
            run.add(
                _cell(
                    profile,
                    item,
                    "blocker",
                    f"{len(bad)} of {len(checks)} checks failed on {ctx.device}; first: {bad[0][0]}: "
                    f"{bad[0][1].detail}",
                    checks,
                    extra,
                )
            )
        else:
            run.add(
                _cell(
                    profile,
                    item,
                    "pass",
                    f"{len(checks)} checks on {ctx.device} passed — {ARGUMENTS[item]}",
                    checks,
                    extra,
                )
            )
    # each kernel item's cells already checked the family that ran; the torch items record no kernel
    c34.finish_provenance(run, ctx, families, redden=False)


def main(argv: list[str]) -> int:
    return gate_main(
        "c5_inventory",
        c5_inventory,
        argv,
        needs_device=False,
        description="C5: elementwise inventory, a verdict per item and profile",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
