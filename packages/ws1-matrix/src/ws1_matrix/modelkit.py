"""What the model gates (C6, C7, C9, C10) share: building the gate's models, progress lines, and the
run's provenance from what the kernel registry recorded (cells: :mod:`ws1_matrix.cells`)."""

from __future__ import annotations

import sys
import time

import ws1_accel
import ws1_ops
from ws1_contract import GateRun, collect_provenance, judged, progress, validate_provenance
from ws1_qwen3.config import preset
from ws1_qwen3.model import Qwen3ForCausalLM
from ws1_qwen3.weights import synthetic


def log(msg: str) -> None:
    """Progress on stderr (stdout stays the table or the JSON)."""
    progress.log(f"  · {msg}")  # above an open progress bar, if any


def build_model(name: str, profile: str, *, seed: int = 20260812, weights: str | None = None) -> Qwen3ForCausalLM:
    """The gate's model: a checkpoint directory, else synthetic weights of preset ``name``."""
    t = time.perf_counter()
    if weights:
        from ws1_qwen3.weights import from_pretrained

        m = from_pretrained(weights, profile)
    else:
        m = synthetic(preset(name), profile, seed=seed, progress=sys.stderr.isatty())
    log(
        f"model {m.config.name} ({'synthetic' if m.synthetic else m.source}) "
        f"for {profile} in {time.perf_counter() - t:.1f}s"
    )
    return m


def attach_provenance(run: GateRun, rec: ws1_ops.Recorder) -> None:
    """Provenance from what ran (the recorder's families), validated; a problem adds a red cell."""
    fams = sorted({f for s in rec.summary().values() for f in s["families"]})
    actual = fams[0] if len(fams) == 1 else f"mixed{fams}"
    dev = ws1_accel.resolve_device(run.profile)
    # on CPU the architecture is the ISA path the kernels reported taking, not the CPU's flags
    prov = collect_provenance(
        run.profile,
        actual,
        run.contract,
        run.manifest.fixture_identity_sha256,
        device=dev,
        arch_key=rec.arch_key() if dev.type == "cpu" else None,
    )
    run.provenance = prov.to_dict()
    problems = validate_provenance(prov, run.contract, run.manifest.fixture_identity_sha256)
    if not fams:
        problems.append("no kernel was recorded")
    # a negative control's variant kernels are named, so its evidence never passes for the kernels'
    variants = sorted({v for s in rec.summary().values() for v in s.get("variant", [])})
    ran = f"ran {actual} kernels on {prov.device_name} ({prov.arch_key})" + (
        f"; negative control {variants}" if variants else ""
    )
    run.add(
        judged(
            "provenance",
            "provenance",
            not problems,
            "; ".join(problems) if problems else ran,
            extra={"families_recorded": fams, "variants": variants},
        )
    )
