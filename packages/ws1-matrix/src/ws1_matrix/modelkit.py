"""What the model gates (C6, C7, C9, C10) share: turning comparisons into cells, building the
gate's models, and the run's provenance from what the kernel registry recorded."""

from __future__ import annotations

import sys
import time

import torch

import ws1_accel
import ws1_ops
from ws1_contract import AggregateResult, Cell, Comparison, GateRun, collect_provenance, progress, validate_provenance
from ws1_qwen3.config import preset
from ws1_qwen3.model import Qwen3ForCausalLM
from ws1_qwen3.weights import synthetic


def status(ok: bool) -> str:
    return "green" if ok else "red"


def comparison_cell(id: str, judgment: str, cmp: Comparison, *, lhs: str | None = None, rhs: str | None = None,
                    **extra) -> Cell:
    """A raw-bit comparison as a cell (thresholds 0/0: invariance is bitwise)."""
    return Cell(id=id, judgment=judgment, status=status(cmp.passed), detail=cmp.detail, lhs_role=lhs, rhs_role=rhs,
                thresholds={"atol": 0.0, "rtol": 0.0, "bitwise": True} if lhs else None, max_abs_err=cmp.max_abs,
                extra={**extra, **({"n_diff": cmp.n_diff, "first_diff": cmp.first_diff} if not cmp.passed else {})})


def parity_cell(id: str, agg: AggregateResult, lhs: str, rhs: str, *, require_bitwise: bool = True, **extra) -> Cell:
    """dlogp aggregates as a cell: the contract's thresholds must hold, and (our bar) bitwise equality."""
    ok = agg.passed and (agg.bitwise_equal or not require_bitwise)
    detail = agg.detail + ("" if agg.bitwise_equal or not require_bitwise else "; FAIL: not bitwise (our bar is max|dlogp| == 0)")
    return Cell(id=id, judgment="train_infer_parity", status=status(ok), detail=detail, lhs_role=lhs, rhs_role=rhs,
                thresholds=agg.thresholds, max_abs_err=agg.max_abs_dlogp,
                extra={**extra, "aggregates": {"max_abs_dlogp": agg.max_abs_dlogp, "approx_kl0": agg.approx_kl0,
                                               "clipfrac0": agg.clipfrac0},
                       "bitwise_equal": agg.bitwise_equal, "tokens_different": agg.tokens_different, "n_active": agg.n_active})


def error_cell(id: str, judgment: str, exc: BaseException, **extra) -> Cell:
    return Cell(id=id, judgment=judgment, status="red", detail=f"raised {type(exc).__name__}: {exc}", extra=extra)


def log(msg: str) -> None:
    """Progress on stderr (stdout stays the table or the JSON)."""
    progress.log(f"  · {msg}")      # above an open progress bar, if any


def build_model(name: str, profile: str, *, seed: int = 20260812, weights: str | None = None) -> Qwen3ForCausalLM:
    """The gate's model: a checkpoint directory, else synthetic weights of preset ``name``."""
    t = time.perf_counter()
    if weights:
        from ws1_qwen3.weights import from_pretrained

        m = from_pretrained(weights, profile)
    else:
        m = synthetic(preset(name), profile, seed=seed, progress=sys.stderr.isatty())
    log(f"model {m.config.name} ({'synthetic' if m.synthetic else m.source}) for {profile} in {time.perf_counter() - t:.1f}s")
    return m


def attach_provenance(run: GateRun, rec: ws1_ops.Recorder) -> None:
    """Provenance from what ran (the recorder's families), validated; a problem adds a red cell."""
    fams = sorted({f for s in rec.summary().values() for f in s["families"]})
    actual = fams[0] if len(fams) == 1 else f"mixed{fams}"
    dev = ws1_accel.resolve_device(run.profile)
    # on CPU the architecture is the ISA path the kernels reported taking, not the CPU's flags
    prov = collect_provenance(run.profile, actual, run.contract, run.manifest.fixture_identity_sha256, device=dev,
                              arch_key=rec.arch_key() if dev.type == "cpu" else None)
    run.provenance = prov.to_dict()
    problems = validate_provenance(prov, run.contract, run.manifest.fixture_identity_sha256)
    if not fams:
        problems.append("no kernel was recorded")
    # a negative control's variant kernels are named, so its evidence never passes for the kernels'
    variants = sorted({v for s in rec.summary().values() for v in s.get("variant", [])})
    ran = f"ran {actual} kernels on {prov.device_name} ({prov.arch_key})" + (f"; negative control {variants}" if variants else "")
    run.add(Cell(id="provenance", judgment="provenance", status=status(not problems),
                 detail="; ".join(problems) if problems else ran, extra={"families_recorded": fams, "variants": variants}))


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    from ws1_contract import bitwise

    return bitwise(a, b).passed
