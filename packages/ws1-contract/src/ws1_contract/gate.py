"""What every gate shares: collect cells per profile, write the evidence, print a short table,
and turn the outcome into an exit code (0 all green, 1 red or a broken contract, 2 the host lacks
a requested profile's device or the command line is wrong; red wins over an absent device) — one
line, never a traceback. Every gate runs its body with TF32 off (:func:`disable_tf32`), recorded
in the evidence and its provenance."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import ws1_accel

from .contract import Contract, load_contract
from .errors import ContractError, EvidenceError
from .evidence import Cell, counts, passed, write_evidence
from .manifest import Manifest, load_manifest
from .provenance import git_state

EXIT_GREEN, EXIT_RED, EXIT_UNAVAILABLE = 0, 1, 2


def exit_code(outcomes: Sequence[int]) -> int:
    """One exit code from per-profile outcomes: red wins over absent (a red executed cell must never
    hide behind another profile's missing device), absent over green; nothing judged is not green."""
    if not outcomes or EXIT_RED in outcomes:
        return EXIT_RED
    return EXIT_UNAVAILABLE if EXIT_UNAVAILABLE in outcomes else EXIT_GREEN


class GateRun:
    """Cells of one gate for one profile."""

    def __init__(self, gate: str, profile: str, contract: Contract, manifest: Manifest):
        self.gate, self.profile, self.contract, self.manifest = gate, profile, contract, manifest
        self.cells: list[Cell] = []
        self.t0 = time.perf_counter()
        # a body may set these; finish() writes them when gate_main calls it without arguments
        self.provenance: dict | None = None
        self.extra: dict = {}

    def add(self, cell: Cell) -> Cell:
        self.cells.append(cell)
        return cell

    def finish(self, provenance: dict | None = None, extra: dict | None = None, root: str | Path | None = None) -> Path:
        sha, dirty = git_state()
        # the TF32 switches as the gate ends (a body that turned them back on shows here)
        tf32 = {**self.extra.get("tf32", {}), "at_finish": ws1_accel.tf32_flags()}
        info = {"wall_time_s": round(time.perf_counter() - self.t0, 3), **self.extra, "tf32": tf32, **(extra or {})}
        prov = provenance if provenance is not None else self.provenance
        if isinstance(prov, dict):
            prov = {**prov, "tf32": tf32}
        return write_evidence(
            self.gate,
            self.profile,
            self.cells,
            prov,
            contract_fingerprint=self.contract.fingerprint,
            fixture_hash=self.manifest.fixture_identity_sha256,
            git_sha=sha,
            dirty=dirty,
            root=root,
            extra=info,
        )

    @property
    def passed(self) -> bool:
        return passed(self.cells)


def disable_tf32(profile: str) -> dict:
    """TF32 off (CUDA matmul and cuDNN; float32 matmul precision "highest") before any cell runs, on
    the profile's device when present and on the CPU, where the FP32 references run. Every gate goes
    through here: an FP32 reference or accumulation silently in TF32 would judge nothing."""
    devices = ["cpu"]
    if ws1_accel.unavailable_reason(profile) is None:
        devices.append(str(ws1_accel.resolve_device(profile)))
    left_on = [d for d in devices if ws1_accel.disable_tf32(d)]
    return {"disabled_on": devices, "left_on": left_on, "at_start": ws1_accel.tf32_flags()}


def print_table(run: GateRun, path: Path, out=sys.stdout, show_green: bool = True) -> None:
    c = counts(run.cells)
    verdict = "PASS" if run.passed else "FAIL"
    print(f"\n{run.gate} · {run.profile}: {verdict}  (green {c['green']}, red {c['red']}, N/A {c['N/A']})", file=out)
    width = max((len(x.id) for x in run.cells), default=10)
    for cell in run.cells:
        if cell.status == "green" and not show_green:
            continue
        detail = cell.detail if len(cell.detail) <= 110 else cell.detail[:107] + "..."
        print(f"  {cell.status:<5} {cell.id:<{width}}  {detail}", file=out)
    print(f"  evidence: {path}", file=out)


def gate_main(
    gate: str,
    body: Callable[[GateRun, argparse.Namespace], None],
    argv: Sequence[str] | None = None,
    *,
    needs_device: bool = False,
    add_args: Callable[[argparse.ArgumentParser], None] | None = None,
    description: str = "",
    printer: Callable[[GateRun, Path], None] | None = None,
) -> int:
    """Parse ``[PROFILE ...] [--json]``, run ``body`` per profile, write evidence, return the exit code.

    ``needs_device``: the gate executes kernels, so an absent device exits 2 (before any cell runs).
    ``printer``: replaces the per-cell table (a gate with many cells prints a summary instead)."""
    ap = argparse.ArgumentParser(prog=f"ws1 {gate}", description=description)
    ap.add_argument("profiles", nargs="*", help="profiles to judge (default: all in the contract)")
    ap.add_argument("--json", action="store_true", help="print the evidence records as JSON instead of tables")
    ap.add_argument("--evidence-dir", default=None, help="evidence root (default: $WS1_EVIDENCE_DIR or ./evidence)")
    if add_args:
        add_args(ap)
    args = ap.parse_args(argv)
    try:
        contract = load_contract()
        manifest = load_manifest(contract=contract)
    except (ContractError, EvidenceError, FileNotFoundError) as exc:
        print(f"ws1 {gate}: {exc}", file=sys.stderr)
        return EXIT_RED
    profiles = args.profiles or list(contract.profiles)
    unknown = [p for p in profiles if p not in contract.profiles]
    if unknown:
        print(f"ws1 {gate}: unknown profile(s) {unknown}; expected one of {sorted(contract.profiles)}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    outcomes, records = [], []
    for profile in profiles:
        if needs_device:
            why = ws1_accel.unavailable_reason(profile)
            if why is not None:
                print(
                    f"ws1 {gate}: {profile} needs a {ws1_accel.device_type_of(profile)} device: {why}", file=sys.stderr
                )
                outcomes.append(EXIT_UNAVAILABLE)
                continue
        run = GateRun(gate, profile, contract, manifest)
        try:
            run.extra["tf32"] = disable_tf32(profile)
            if run.extra["tf32"]["left_on"]:  # fail closed: nothing this gate computes could be trusted
                run.add(
                    Cell(
                        id="tf32",
                        judgment="provenance",
                        status="red",
                        detail=f"TF32 still enabled on {run.extra['tf32']['left_on']} after disabling it",
                    )
                )
            body(run, args)
        except (ContractError, EvidenceError) as exc:
            print(f"ws1 {gate}: {profile}: {exc}", file=sys.stderr)
            return EXIT_RED
        except ws1_accel.AcceleratorUnavailable as exc:
            print(f"ws1 {gate}: {exc}", file=sys.stderr)
            outcomes.append(EXIT_UNAVAILABLE)
            continue
        path = run.finish(root=args.evidence_dir)
        if args.json:
            records.append(json.loads(path.read_text()))
        else:
            (printer or print_table)(run, path)
        outcomes.append(EXIT_GREEN if run.passed else EXIT_RED)
    code = exit_code(outcomes)
    if args.json:
        print(json.dumps({"gate": gate, "exit_code": code, "records": records}, indent=1))
    return code
