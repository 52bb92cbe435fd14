"""C9 the model is device-agnostic: it runs each profile on that profile's own device only, and every
required node kind is observed running its declared kernel (from the registry's runtime record).

    python -m ws1_matrix c9 cpu_bf16 [--model tiny] [--json]        (nox -s c9_model -- cpu_bf16)

One training step (teacher forcing + canonical backward) and one generate step run under a
recorder. Then, per required node: the recorded kernel ids must be exactly the manifest's
declaration, the family the profile's, the device the profile's device; nodes with parameters need
a backward record; nothing undeclared may have run. The parameters must sit on the profile's device.

``silu``: the dense Qwen3 MLP computes silu(gate)·up with the fused ``swiglu`` node (one BF16
rounding), so the chain itself never calls ``silu``; the gate observes it where it is defined to
agree with the chain — ``silu(g) == swiglu(g, 1)`` bitwise on the model's own layer-0 gate
activations, on the profile's device.
"""

from __future__ import annotations

import torch

import ws1_accel
import ws1_ops
from ws1_contract import Cell, bitwise, gate_main, judged
from ws1_qwen3.generate import Request, generate
from ws1_qwen3.teacher import fixture_samples, teacher_forcing

from .drift import Trace, drift_map, first_drift
from .modelkit import attach_provenance, build_model, log
from .runtime import node_problems

PARAM_NODES = ("embedding", "rms_norm", "det_gemm", "qk_norm", "lm_head")


def silu_identity(model, drifts: list | None = None) -> tuple[bool, str]:
    """silu(g) vs swiglu(g, ones) on the model's layer-0 gate activations (the chain's own inputs).

    silu never runs in the chain (the MLP's fused swiglu does its work), so this is where it runs:
    each side is traced as node (0, "silu"); with ``drifts``, a difference is appended there as a
    first-drift row (cell ``observed/silu``) naming the rows whose bits differ."""
    captured = {}

    def tracer(layer, node, t, keys):
        if layer == 0 and node == "attn_residual":
            captured["h"], captured["keys"] = t, keys

    model.tracer = tracer
    try:
        teacher_forcing(model, fixture_samples()[:1], layout="packed")
    finally:
        model.tracer = None
    L = model.model.layers[0]
    with model.activate():
        x = ws1_ops.rms_norm(captured["h"], L.post_attention_layernorm.weight, model.config.rms_norm_eps)
        g = ws1_ops.det_gemm(x, L.mlp.gate_proj.weight)
        got, want = ws1_ops.silu(g), ws1_ops.swiglu(g, torch.ones_like(g))
        cmp = bitwise(got, want, "silu(g) vs swiglu(g, 1)")
    if drifts is not None:
        a, b = Trace(), Trace()
        a(0, "silu", got, captured["keys"])
        b(0, "silu", want, captured["keys"])
        fd = first_drift(a, b)
        if fd:
            drifts.append({"cell": "observed/silu", **fd, "map": drift_map(a, b)})
    return cmp.passed, cmp.detail


def observe(model) -> tuple[ws1_ops.Recorder, tuple[bool, str]]:
    with ws1_ops.record() as rec:
        tf = teacher_forcing(model, fixture_samples(), layout="padded_right", padded_length=20, grad=True)
        with ws1_ops.canonical_grads():
            tf.loss.backward()
        generate(model, [Request(prompt=(100, 101, 102, 103), max_new_tokens=3, seed=5)])
        silu = silu_identity(model)
    return rec, silu


def node_cells(
    summary: dict, declared: dict[str, str], family: str, dev_type: str, silu: tuple[bool, str]
) -> list[Cell]:
    """Judge a recorder summary: each required node ran exactly its declared kernel, of the profile's
    family, on the profile's device (with a backward record where it has parameters); nothing else ran."""
    cells = []
    for node, kid in declared.items():
        s = summary.get(node)
        problems = node_problems(
            s, kid, family, dev_type, need_backward=node in PARAM_NODES
        )  # backward: nodes with parameters
        detail = (
            "; ".join(problems)
            if problems
            else f"{kid} on {dev_type}: forward {s['forward']}, backward {s['backward']} calls"
        )
        if node == "silu":
            ok, why = silu
            if not ok:
                problems.append(why)
            detail += f"; observed via the silu(g) == swiglu(g, 1) check on layer-0 gate activations: {why}"
        cells.append(
            judged(
                f"node/{node}",
                "model_observed",
                not problems,
                detail,
                extra={"node": node, "declared": kid, "recorded": s},
            )
        )
    undeclared = sorted(op for op in summary if op not in declared)
    cells.append(
        judged(
            "nothing-undeclared",
            "model_observed",
            not undeclared,
            detail=f"ops recorded outside the required nodes: {undeclared}"
            if undeclared
            else f"all {len(summary)} recorded ops are required nodes with declared kernels",
        )
    )
    return cells


def c9(run, args) -> None:
    profile, m = run.profile, run.manifest
    family = run.contract.family(profile)
    dev = ws1_accel.resolve_device(profile)
    model = build_model(args.model, profile, weights=args.weights)
    where = {p.device.type for p in model.parameters()}
    run.add(
        judged(
            "parameters-on-device",
            "model_device",
            where == {dev.type},
            detail=(
                f"{sum(1 for _ in model.parameters())} parameter tensors on {sorted(where)}; profile device {dev.type}"
            ),
        )
    )
    rec, silu = observe(model)
    log("training step + generate observed")
    declared = {node: m.kernel_id(profile, node) for node in m.required_nodes}
    for cell in node_cells(rec.summary(), declared, family, dev.type, silu):
        run.add(cell)
    attach_provenance(run, rec)
    run.extra = {"model": model.config.name, "synthetic": model.synthetic, "observed": rec.summary()}


def add_args(ap) -> None:
    ap.add_argument("--model", default="tiny", help="preset to run (default tiny)")
    ap.add_argument("--weights", default=None, help="an HF-format checkpoint directory instead of synthetic weights")


def main(argv: list[str]) -> int:
    return gate_main(
        "c9_model",
        c9,
        argv,
        needs_device=True,
        add_args=add_args,
        description="C9: the model runs on its profile's device; node kinds observed",
    )
