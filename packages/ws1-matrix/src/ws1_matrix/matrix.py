"""C8: the four-judgment matrix — profile × every node of the manifest's node table (12 today: 11 chain
nodes + pack) × {short, primary} × {forward, gradient} × {accuracy, invariance} (96 cells per profile today).

    python -m ws1_matrix c8 cpu_bf16 --execute     (nox -s c8_matrix -- cpu_bf16 --execute)
    python -m ws1_matrix c8 cpu_bf16               assemble from evidence/<profile>/c3_forward.json, c4_gradient.json

``--execute`` runs every cell through the C3/C4 judgments (:func:`ws1_matrix.judge.judge`) on the
profile's own device. Without it the matrix is assembled from the C3 and C4 evidence files of the
profile (e.g. written on the profile's own host): a missing file or cell is red ("not executed"),
a record from another contract, fixture set or commit is red ("stale"), so is one written at an
unknown commit or from a dirty tree (what code wrote it cannot be known — unless it is a record of
this run: this process's, or the C11 flow's own C3/C4 steps via ``WS1_RUN_ID``), and so is one whose
provenance :func:`validate_provenance` rejects (re-run here on every source record); a corrupt file
— not JSON, counts that disagree with its cells, an N/A without an allowed reason — is an error
(exit 1).

Unlike C3/C4, a profile whose device is absent does not end the run with exit 2: the matrix is over
*all* profiles, and docs/design.md §1 wants such a cell red with "not executed on this host: <reason>"
(so a CPU host reports cpu_bf16 executed and every other profile red). A profile whose device
exists but whose kernel package is missing is red with that reason — never served by another
family. ``pack`` is N/A (profile_independent, the manifest's reason) for every profile, and its
round trip is executed each time (on the profile's device, or on this host's CPU when the
profile's device is absent: the helper is one implementation for every profile).

Beside each ``c8_matrix.json`` the gate writes ``c8_matrix.md`` (a table per tier) and
``c8_matrix.svg`` (a heat map); with several profiles also ``<root>/c8_matrix.{md,svg}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import attrs
import torch

import ws1_accel
import ws1_ops
from ws1_contract import Cell, gate_main
from ws1_contract.errors import EvidenceError
from ws1_contract.evidence import ALLOWED_NA_REASONS, evidence_root, read_evidence, run_id
from ws1_contract.progress import Progress
from ws1_contract.provenance import Provenance, git_state, validate_provenance

from . import cases, report
from . import forward_gradient as c34
from .judge import FORWARD, GRADIENT, JUDGMENTS, cell_id, judge, judge_pack, red_cells

GATE = "c8_matrix"
SOURCES = {"c3_forward": FORWARD, "c4_gradient": GRADIENT}
_CELL_FIELDS = (
    "id",
    "judgment",
    "status",
    "detail",
    "lhs_role",
    "rhs_role",
    "thresholds",
    "max_abs_err",
    "max_rel_err",
    "na_reason",
)


def _declared(run, op: str) -> str | None:
    decl = run.manifest.profiles[run.profile].nodes.get(op)
    return None if decl is None else decl.kernel_id


def _with_matrix_fields(run, cell: Cell) -> Cell:
    """Every matrix cell names its profile, op, tier, judgment, case and kernel (declared and ran)."""
    extra = dict(cell.extra)
    if "kernel" not in extra:
        extra["kernel"] = {"declared": _declared(run, extra["op"]), "kernel_ids": [], "note": "nothing ran"}
    extra.setdefault("case_id", None)
    return Cell(
        id=cell.id,
        judgment=cell.judgment,
        status=cell.status,
        detail=cell.detail,
        lhs_role=cell.lhs_role,
        rhs_role=cell.rhs_role,
        thresholds=cell.thresholds,
        max_abs_err=cell.max_abs_err,
        max_rel_err=cell.max_rel_err,
        na_reason=cell.na_reason,
        extra=extra,
    )


def _case(run, op: str, tier: str):
    found = run.manifest.cases(profile=run.profile, op=op, tier=tier)
    return found[0] if found else None


def _not_executed(run, why: str) -> list[Cell]:
    host = torch.device("cpu")
    out = []
    for op in run.manifest.ops:
        for tier in run.manifest.tiers:
            if op == "pack":
                out += judge_pack(
                    run.profile, run.manifest, tier, JUDGMENTS, host, "this host's cpu (pack is profile-independent)"
                )
            else:
                out += red_cells(run.profile, op, tier, JUDGMENTS, why, case=_case(run, op, tier))
    return out


def _execute(run) -> None:
    profile = run.profile
    why = ws1_accel.unavailable_reason(profile)
    if why is not None:
        run.extra["executed"] = False
        for c in _not_executed(run, f"{profile} needs a {ws1_accel.device_type_of(profile)} device: {why}"):
            run.add(c)
        return
    ctx = c34.make_ctx(run)
    missing = ws1_ops.family_available(ctx.family)
    run.extra["executed"] = missing is None
    if missing is not None:
        for c in _not_executed(run, f"{ctx.family} kernel package missing: {missing}"):
            run.add(c)
        c34.finish_provenance(run, ctx, set())
        return
    plan = [(op, tier) for op in run.manifest.ops for tier in run.manifest.tiers]
    with Progress(len(plan) * len(JUDGMENTS), f"{GATE} {run.profile}") as bar:  # stderr; minutes on CPU
        for op, tier in plan:
            bar.doing(f"{op} {tier}")
            # executed through C3 (forward) and C4 (gradient): the same judgments, the same cells
            for c in judge(ctx, op, tier, FORWARD) + judge(ctx, op, tier, GRADIENT):
                run.add(c)
            bar.update(len(JUDGMENTS))
    cases.forget()
    c34.finish_provenance(run, ctx, c34.recorded_families(run.cells))


def _cell_from_dict(d: dict, path: Path) -> Cell:
    fields = {k: d.get(k) for k in _CELL_FIELDS}
    extra = {k: v for k, v in d.items() if k not in _CELL_FIELDS}
    if d["status"] == "N/A" and (d.get("na_reason") not in ALLOWED_NA_REASONS or d.get("op") != "pack"):
        raise EvidenceError(
            f"{path}: cell {d.get('id')!r} is N/A without an allowed reason (hidden N/A rejected; "
            f"N/A is only {ALLOWED_NA_REASONS} for pack)"
        )
    return Cell(**fields, extra=extra)  # Cell itself rejects a hidden N/A too


def _source_problem(run, gate: str, path: Path, data: dict, sha: str) -> str | None:
    """Why a C3/C4 record cannot feed this matrix (None: it can)."""
    if (
        data["contract_fingerprint"] != run.contract.fingerprint
        or data["fixture_hash"] != run.manifest.fixture_identity_sha256
    ):
        return f"stale {gate} evidence ({path}): written under another contract or fixture set"
    # a record of this very run (this process, or the C11 flow's WS1_RUN_ID) was written by the code
    # as it is now; any other must name a clean, known commit equal to the checkout's
    if data.get("run_id") != run_id():
        if "unknown" in (sha, data["git_sha"]):
            return (
                f"stale {gate} evidence ({path}): commit unknown (record {data['git_sha'][:12]}, checkout {sha[:12]})"
            )
        if data["dirty"] is not False:
            return (
                f"stale {gate} evidence ({path}): written from a dirty tree (dirty={data['dirty']}): "
                "the code that wrote it is unknown"
            )
        if data["git_sha"] != sha:
            return f"stale {gate} evidence ({path}): written at git {data['git_sha'][:12]}, checkout is {sha[:12]}"
    prov = data["provenance"]
    names = [f.name for f in attrs.fields(Provenance)]
    missing = [n for n in names if not isinstance(prov, dict) or n not in prov]
    if missing:
        return f"{gate} evidence ({path}): provenance incomplete (missing {missing[:4]})"
    problems = validate_provenance(
        Provenance(**{n: prov[n] for n in names}), run.contract, run.manifest.fixture_identity_sha256
    )
    if problems:
        return f"{gate} evidence ({path}): provenance rejected: {'; '.join(problems)}"
    return None


def _assemble(run, root: Path) -> None:
    """The matrix from this profile's C3 and C4 evidence files (see the module docstring)."""
    sha, _dirty = git_state()
    run.extra["executed"] = False
    run.extra["sources"] = {}
    have: dict[str, Cell] = {}
    stale: dict[str, str] = {}
    for gate, judgments in SOURCES.items():
        path = root / run.profile / f"{gate}.json"
        if not path.is_file():
            stale[gate] = (
                f"not executed: no {gate} evidence at {path} (run `nox -s {gate} -- {run.profile}` or c8 --execute)"
            )
            continue
        data = read_evidence(path)  # corrupt: EvidenceError -> gate_main prints one line, exit 1
        if data["gate"] != gate or data["profile"] != run.profile:
            raise EvidenceError(
                f"{path}: a {data['gate']!r} record of {data['profile']!r}, expected {gate!r} of {run.profile!r}"
            )
        run.extra["sources"][gate] = {
            "path": str(path),
            "git_sha": data["git_sha"],
            "dirty": data["dirty"],
            "created_at": data["created_at"],
            "run_id": data.get("run_id"),
            "provenance": data["provenance"],
        }
        problem = _source_problem(run, gate, path, data, sha)
        if problem is not None:
            stale[gate] = problem
            continue
        for d in data["cells"]:
            if d.get("judgment") in judgments and d.get("tier") in run.manifest.tiers:
                have[d["id"]] = _cell_from_dict(d, path)
    if run.extra["sources"]:
        first = next(iter(run.extra["sources"].values()))
        run.provenance = first["provenance"]
    for op in run.manifest.ops:
        for tier in run.manifest.tiers:
            for j in JUDGMENTS:
                gate = "c3_forward" if j in FORWARD else "c4_gradient"
                cid = cell_id(op, tier, j)
                if cid in have:
                    run.add(have[cid])
                else:
                    why = stale.get(gate, f"not executed: {gate} evidence has no {cid} cell (run without --op?)")
                    run.add(red_cells(run.profile, op, tier, [j], why, _case(run, op, tier), not_executed=False)[0])


def c8_matrix(run, args) -> None:
    if args.execute:
        _execute(run)
    else:
        _assemble(run, Path(args.evidence_dir) if args.evidence_dir else evidence_root())
    run.cells[:] = [_with_matrix_fields(run, c) for c in run.cells]
    run.extra["mode"] = "execute" if args.execute else "assembled from c3_forward/c4_gradient evidence"


def _add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--execute",
        action="store_true",
        help="execute every cell through C3/C4 (default: assemble the matrix from their evidence files)",
    )


def main(argv: list[str]) -> int:
    start = time.time()
    code = gate_main(
        GATE,
        c8_matrix,
        argv,
        needs_device=False,
        add_args=_add_args,
        printer=report.print_summary,
        description="C8: profile × the node table's nodes × {short, primary} × 4 judgments",
    )
    # the readable forms, rendered from the JSON just written (read back: they cannot disagree with it)
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("profiles", nargs="*")
    ap.add_argument("--evidence-dir", default=None)
    ap.add_argument("--json", action="store_true")
    known, _ = ap.parse_known_args(argv)
    root = Path(known.evidence_dir) if known.evidence_dir else evidence_root()
    try:
        from ws1_contract import load_contract

        profiles = known.profiles or list(load_contract().profiles)
    except Exception:  # noqa: BLE001 - gate_main has already reported a broken contract
        return code
    try:
        # only the records this process wrote (its run id): an old profile's record is never re-rendered as new
        written = [
            p
            for p in (root / prof / f"{GATE}.json" for prof in profiles)
            if p.is_file() and p.stat().st_mtime >= start - 1 and read_evidence(p).get("run_id") == run_id()
        ]
        outs = [report.write_reports(p) for p in written]
        if len(written) > 1:
            outs.append(report.write_combined(written, root))
    except EvidenceError as exc:
        print(f"ws1 {GATE}: {exc}", file=sys.stderr)
        return 1
    for md, sv in outs:
        print(f"  report: {md}  figure: {sv}", file=sys.stderr if known.json else sys.stdout)
    return code
