"""What every gate shares: collect cells per profile, write the evidence, print a short table,
and turn the outcome into an exit code (0 all green, 1 red or a broken contract, 2 the host lacks
the profile's device or the command line is wrong) — one line, never a traceback."""

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
        info = {"wall_time_s": round(time.perf_counter() - self.t0, 3), **self.extra, **(extra or {})}
        return write_evidence(
            self.gate, self.profile, self.cells, provenance if provenance is not None else self.provenance,
            contract_fingerprint=self.contract.fingerprint,
            fixture_hash=self.manifest.fixture_identity_sha256,
            git_sha=sha, dirty=dirty, root=root, extra=info,
        )

    @property
    def passed(self) -> bool:
        return passed(self.cells)


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
    code, records = EXIT_GREEN, []
    for profile in profiles:
        if needs_device:
            why = ws1_accel.unavailable_reason(profile)
            if why is not None:
                print(f"ws1 {gate}: {profile} needs a {ws1_accel.device_type_of(profile)} device: {why}", file=sys.stderr)
                code = EXIT_UNAVAILABLE
                continue
        run = GateRun(gate, profile, contract, manifest)
        try:
            body(run, args)
        except (ContractError, EvidenceError) as exc:
            print(f"ws1 {gate}: {profile}: {exc}", file=sys.stderr)
            return EXIT_RED
        except ws1_accel.AcceleratorUnavailable as exc:
            print(f"ws1 {gate}: {exc}", file=sys.stderr)
            code = EXIT_UNAVAILABLE
            continue
        path = run.finish(root=args.evidence_dir)
        if args.json:
            records.append(json.loads(path.read_text()))
        else:
            (printer or print_table)(run, path)
        if not run.passed and code == EXIT_GREEN:
            code = EXIT_RED
    if args.json:
        print(json.dumps({"gate": gate, "exit_code": code, "records": records}, indent=1))
    return code
