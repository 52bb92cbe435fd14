"""C6 decode vs prefill: operator level (docs/design.md §6's six cases) and model level.

    python -m ws1_matrix c6 cpu_bf16 [--models tiny,qwen3-8b-L2] [--json]     (nox -s c6_decode_prefill -- cpu_bf16)

Operator level (Hq 32, Hkv 8, D 128): for b1 lengths 8, 32, 19 and B=4 lengths [11, 16, 13, 19]
packed, padded right to 20 and padded left to 20, each query decoded from the cache (one token per
step, the batch shrinking as sequences end) and each 7-position chunk of a chunked prefill must
equal the full prefill, bitwise.

Model level, per model (synthetic weights): the trainer's teacher-forcing log-probs of the
completion tokens against the rollout's (prompt prefill, then forced decode), with the three
aggregates and our bitwise bar — all four samples together, each alone, and with a chunked prefill.
"""

from __future__ import annotations

import ws1_accel
import ws1_ops
from ws1_contract import gate_main
from ws1_qwen3.teacher import fixture_samples, teacher_forcing

from . import parity
from .cells import comparison_cell, parity_cell
from .kv_ops import c6_operator_cases
from .modelkit import attach_provenance, build_model, log

DEFAULT_MODELS = ("tiny", "qwen3-8b-L2")


def model_parity_cells(model, samples, contract, prefix: str):
    """Teacher forcing (BN, right-padded) vs three rollouts; yields cells."""
    tf = teacher_forcing(model, samples, layout="padded_right", padded_length=model_padded_length(samples))
    act = tf.logp[tf.active]
    for name, kw in (("decode", {}), ("decode-b1", {"together": False}), ("chunked7-decode", {"chunk": 7})):
        ro = parity.rollout_logp(model, samples, **kw)
        agg = parity.judge(act, ro, contract)
        yield parity_cell(
            f"{prefix}/{name}-vs-teacher-forcing",
            agg,
            parity.LHS,
            parity.RHS,
            model=model.config.name,
            synthetic=model.synthetic,
            rollout=name,
        )


def model_padded_length(samples) -> int:
    return max(20, max(s.length for s in samples))


def c6(run, args) -> None:
    profile = run.profile
    models = [m for m in (args.models or ",".join(DEFAULT_MODELS)).split(",") if m]
    with ws1_ops.record() as rec:
        with ws1_ops.use_profile(profile):
            for o in c6_operator_cases(device=ws1_accel.resolve_device(profile)):
                run.add(
                    comparison_cell(
                        f"op/{o.name}",
                        "decode_prefill",
                        o.comparison,
                        lhs="transformed_config",
                        rhs="canonical_config",
                        **o.facts,
                    )
                )
        log("operator cases done")
        samples = fixture_samples(run.manifest)
        for name in models:
            model = build_model(name, profile, weights=args.weights if name == models[0] else None)
            for cell in model_parity_cells(model, samples, run.contract, f"model-{model.config.name}"):
                run.add(cell)
            log(f"model {name} done")
            del model
    attach_provenance(run, rec)
    run.extra = {"models": models, "aggregate_thresholds": run.contract.aggregate_thresholds("bfloat16")}


def add_args(ap) -> None:
    ap.add_argument(
        "--models",
        default=None,
        help=f"comma-separated presets for the model-level cells (default {','.join(DEFAULT_MODELS)})",
    )
    ap.add_argument(
        "--weights",
        default=None,
        help="an HF-format checkpoint directory for the first model instead of synthetic weights",
    )


def main(argv: list[str]) -> int:
    return gate_main(
        "c6_decode_prefill",
        c6,
        argv,
        needs_device=True,
        add_args=add_args,
        description="C6: decode vs prefill, operator and model level",
    )
