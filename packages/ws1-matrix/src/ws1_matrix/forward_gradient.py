"""C3 (forward) and C4 (gradient): every representative case of a profile, executed on its device.

    python -m ws1_matrix c3 cpu_bf16 [--op det_gemm] [--json]     (nox -s c3_forward -- cpu_bf16)
    python -m ws1_matrix c4 cpu_bf16 [--op det_gemm] [--json]     (nox -s c4_gradient -- cpu_bf16)

Per op and tier (short, primary; long for attention decode) C3 judges forward_accuracy (vs the FP32
reference) and forward_invariance (bitwise over the transforms of :mod:`ws1_matrix.rows` and
:mod:`ws1_matrix.attn`); C4 judges gradient_accuracy and gradient_invariance over every input and
parameter gradient. A profile whose device is absent exits 2 (gate_main); a profile whose kernel
package is missing gets red cells with that reason — never another family's kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import sys

import ws1_accel
import ws1_ops
from ws1_contract import Cell, collect_provenance, gate_main, load_contract, load_manifest, validate_provenance
from ws1_contract.errors import ContractError
from ws1_contract.progress import Progress

from . import cases
from .judge import FORWARD, GRADIENT, Ctx, judge, red_cells, tiers_of


def make_ctx(run, activate=None) -> Ctx:
    profile = run.profile
    dev = ws1_accel.resolve_device(profile)  # absent: AcceleratorUnavailable (gate_main: exit 2)
    ws1_accel.disable_tf32(dev)
    ws1_accel.disable_tf32("cpu")  # the FP32 reference runs on the CPU
    return Ctx(
        profile,
        run.contract,
        run.manifest,
        dev,
        run.contract.family(profile),
        activate or functools.partial(ws1_ops.use_profile, profile),
    )


def finish_provenance(run, ctx: Ctx, families: set[str], redden: bool = True) -> None:
    """The run's provenance (what the registry recorded) and its validation.

    A wrong *family* is already red where it happened: every cell checks the families recorded while
    it ran (judge.kernel_problems), so the report fails and the other cells keep their verdicts.
    Any other problem (TF32 on, a wrong dtype, another contract) undermines every comparison, so
    with ``redden`` it turns every green cell red (fail closed). C5 passes False: its cells carry
    their own per-item checks."""
    actual = ",".join(sorted(families)) if families else "none"
    # on CPU the architecture is the ISA path the kernels reported taking (their self-report), not the CPU's flags
    arch = (
        ws1_ops.registry.arch_key_of([c.extra.get("recorded") or {} for c in run.cells])
        if ctx.device.type == "cpu"
        else None
    )
    prov = collect_provenance(
        ctx.profile,
        actual,
        run.contract,
        run.manifest.fixture_identity_sha256,
        device=ctx.device,
        reference_tf32=ws1_accel.tf32_enabled("cpu"),
        arch_key=arch,
    )
    problems = validate_provenance(prov, run.contract, run.manifest.fixture_identity_sha256)
    run.provenance = prov.to_dict()
    run.extra["provenance_problems"] = problems
    general = [p for p in problems if not p.startswith("actual backend")]
    if general and redden:
        why = "; ".join(general)
        run.cells[:] = [
            c
            if c.status != "green"
            else Cell(
                id=c.id,
                judgment=c.judgment,
                status="red",
                detail=f"provenance: {why} — {c.detail}",
                lhs_role=c.lhs_role,
                rhs_role=c.rhs_role,
                thresholds=c.thresholds,
                max_abs_err=c.max_abs_err,
                max_rel_err=c.max_rel_err,
                extra=c.extra,
            )
            for c in run.cells
        ]


def recorded_families(cells: list[Cell]) -> set[str]:
    fams: set[str] = set()
    for c in cells:
        for s in (c.extra.get("recorded") or {}).values():
            fams.update(s["families"])
    return fams


@contextlib.contextmanager
def frozen_heap():
    """Every object alive now (torch's and the contract's, ~170k) out of the collector's reach while
    the cells run. Each cell ends with a full gc.collect() (judge._judge_one: its tensors freed before
    the next cell allocates); with the imports frozen that walks only what the cells made, not 0.1-0.3 s
    of long-lived objects per cell on a 2-core host. Nothing a cell makes is frozen; unfreeze returns
    the rest to the collector."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def judge_profile(run, ops: list[str], judgments, tiers_for, activate=None) -> None:
    """Add the cells of ``ops`` × tiers × ``judgments`` for ``run.profile`` (device present)."""
    ctx = make_ctx(run, activate)
    why = None if activate is not None else ws1_ops.family_available(ctx.family)
    plan = [(op, tier) for op in ops for tier in tiers_for(op)]
    with (
        frozen_heap(),
        Progress(len(plan) * len(judgments), f"{run.gate} {run.profile}") as bar,
    ):  # stderr; C4 runs minutes
        for op, tier in plan:
            bar.doing(f"{op} {tier}")
            if why is not None and op != "pack":
                for c in red_cells(ctx, op, tier, judgments, f"{ctx.family} kernel package missing: {why}"):
                    run.add(c)
            else:
                for c in judge(ctx, op, tier, judgments):
                    run.add(c)
            bar.update(len(judgments))
    cases.forget()
    finish_provenance(run, ctx, recorded_families(run.cells))


def selected_ops(run, args) -> list[str]:
    return list(args.op) if getattr(args, "op", None) else list(run.manifest.ops)


def c3_forward(run, args, activate=None) -> None:
    judge_profile(run, selected_ops(run, args), FORWARD, lambda op: tiers_of(run.manifest, op, extra=True), activate)


def c4_gradient(run, args, activate=None) -> None:
    judge_profile(run, selected_ops(run, args), GRADIENT, lambda op: tiers_of(run.manifest, op, extra=True), activate)


# ---- command line: python -m ws1_matrix c3|c4 [PROFILE ...] [--op OP] ---------------------------

EXIT_BAD_ARGS = 2
GATES = {
    "c3": ("c3_forward", c3_forward, "C3: forward accuracy and invariance"),
    "c4": ("c4_gradient", c4_gradient, "C4: gradient accuracy and invariance"),
}


def _split_ops(values) -> list[str]:
    return [o for v in (values or []) for o in v.split(",") if o]


def _add_op(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--op", action="append", metavar="OP", help="judge only this op (repeatable, or comma-separated)")


def _unknown_ops(gate: str, argv: list[str]) -> int | None:
    """Fail closed on an unknown --op before anything runs: exit 2 with one line."""
    pre = argparse.ArgumentParser(add_help=False)
    _add_op(pre)
    known, _ = pre.parse_known_args(argv)
    ops = _split_ops(known.op)
    if not ops:
        return None
    try:
        valid = load_manifest(contract=load_contract()).ops
    except (ContractError, FileNotFoundError):
        return None  # gate_main reports the broken contract itself
    unknown = [o for o in ops if o not in valid]
    if unknown:
        print(f"ws1 {gate}: unknown op(s) {unknown}; expected one of {valid}", file=sys.stderr)
        return EXIT_BAD_ARGS
    return None


def main(argv: list[str], which: str) -> int:
    gate, body, description = GATES[which]
    bad = _unknown_ops(gate, argv)
    if bad is not None:
        return bad

    def run_body(run, args):
        args.op = _split_ops(args.op)
        body(run, args)

    return gate_main(gate, run_body, argv, needs_device=True, add_args=_add_op, description=description)
