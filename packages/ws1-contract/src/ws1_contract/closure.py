"""WS1 closure: one verdict over the C11 records of several hosts.

    ws1-contract closure DIR [DIR ...] [--json]        (python -m ws1_contract closure ...)

Each DIR is an evidence root (``DIR/<profile>/c11_ci.json``) or one profile's folder
(``DIR/c11_ci.json``), e.g. the evidence a CPU host, a GPU host and an NPU host uploaded. WS1 is
closed only when every profile of the contract is green on its own hardware: for each profile, at
least one C11 record, and every record given for it

* under the contract and fixtures in force, at a known commit, from a clean tree;
* passed, exit code 0, with every step of the full flow present and green (no ``--skip-tests``);
* with provenance from the profile's own device: the device type of its family, an arch key of
  that device kind (``sm<NN>`` for CUDA, ``Ascend…`` for NPU), the profile and family named;

and all records at one commit (closure describes one state of the code). A CPU host's C11 test step runs only the
suites that bear on cpu_bf16 and a device host's only its device tests, so closure also needs CI's full run
(``nox -s tests``: every suite, the other profiles' CPU-side checks included) green at that commit, from a clean
tree, unfiltered: its record ``ci/tests.json`` in one of the DIRs (an evidence root) or given as a DIR itself. Anything
else is listed.

Exit codes: 0 closed; 1 not closed (what is missing is listed); 2 bad input (no DIR, a DIR that
does not exist or holds no C11 record, a corrupt record, a profile the contract does not know).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .contract import load_contract
from .errors import ContractError, EvidenceError
from .evidence import read_evidence
from .manifest import load_manifest

EXIT_CLOSED, EXIT_OPEN, EXIT_BAD_INPUT = 0, 1, 2
# The C11 flow's steps (ci/c11.py steps_for; ci/tests/test_c11.py keeps the two lists equal).
REQUIRED_STEPS = (
    "c1_contract",
    "c2_manifest",
    "build",
    "linkage",
    "tests",
    "c2_runtime",
    "c3_forward",
    "c4_gradient",
    "c5_inventory",
    "c6_decode_prefill",
    "c7_stateful_kv",
    "c9_model",
    "c8_matrix",
    "c10_chain_gate",
    "c10_negative_control",
)
# what an arch key of each device type looks like (ws1_accel.arch_key): the hardware, not a label
ARCH_OF = {
    "cpu": lambda a: bool(a) and not a.startswith(("sm", "Ascend")),
    "cuda": lambda a: re.fullmatch(r"sm\d+", a or "") is not None,
    "npu": lambda a: (a or "").startswith("Ascend"),
}


class BadInput(Exception):
    pass


def find_records(dirs: list[str]) -> list[tuple[Path, dict]]:
    if not dirs:
        raise BadInput("give one or more evidence folders (a host's evidence root or a profile's folder)")
    out = []
    for d in dirs:
        p = Path(d)
        if not p.is_dir():
            raise BadInput(f"{p}: no such evidence folder")
        found = [p / "c11_ci.json"] if (p / "c11_ci.json").is_file() else []
        found += sorted(p.glob("*/c11_ci.json"))
        if not found:
            raise BadInput(f"{p}: no C11 record (c11_ci.json) here or one level down")
        for f in found:
            try:
                out.append((f, read_evidence(f)))
            except EvidenceError as exc:
                raise BadInput(str(exc)) from None
    return out


def find_full_runs(dirs: list[str]) -> list[tuple[Path, dict]]:
    """The records of CI's full test run (``nox -s tests`` writes ``<evidence root>/ci/tests.json``) among ``dirs``."""
    out = []
    for d in dirs:
        for f in (Path(d) / "ci" / "tests.json", Path(d) / "tests.json"):
            if f.is_file():
                try:
                    out.append((f, json.loads(f.read_text())))
                except ValueError as exc:
                    raise BadInput(f"{f}: corrupt test-run record ({exc})") from None
    return out


def full_run_problems(rec: dict) -> list[str]:
    """Why one test-run record is not a green, complete, unfiltered CI run at a known, clean commit (empty: it is)."""
    probs = []
    if rec.get("kind") != "ws1-tests-v1" or rec.get("session") != "tests":
        return [f"not a record of nox -s tests (kind {rec.get('kind')!r}, session {rec.get('session')!r})"]
    if not rec.get("passed"):
        red = [p for p in rec.get("processes", []) if p.get("exit_code") != 0]
        probs.append(
            f"red: suites {', '.join(red[0]['suites']) if red else '?'} (exit {red[0]['exit_code'] if red else '?'})"
        )
    if not rec.get("suites") or set(rec["suites"]) != set(rec.get("of", [])):
        probs.append(f"ran suites {rec.get('suites')} of {rec.get('of')}: not the full run")
    if rec.get("marker") != "not slow" or rec.get("posargs"):
        probs.append(f"a filtered run (-m {rec.get('marker')!r}, arguments {rec.get('posargs')})")
    if rec.get("git_sha") in ("unknown", "", None):
        probs.append("commit unknown")
    if rec.get("dirty") is not False:
        probs.append(f"dirty tree (dirty={rec.get('dirty')})")
    return probs


def record_problems(rec: dict, contract, fixture_hash: str) -> list[str]:
    """Why one C11 record does not prove its profile green on its own hardware (empty: it does)."""
    profile = rec["profile"]
    spec = contract.profiles[profile]
    probs = []
    if rec["gate"] != "c11_ci":
        probs.append(f"a {rec['gate']!r} record, not c11_ci")
    if rec["contract_fingerprint"] != contract.fingerprint:
        probs.append("written under another contract")
    if rec["fixture_hash"] != fixture_hash:
        probs.append("written under another fixture set")
    if rec["git_sha"] in ("unknown", "", None):
        probs.append("commit unknown")
    if rec["dirty"] is not False:
        probs.append(f"dirty tree (dirty={rec['dirty']})")
    cells = {c["id"]: c for c in rec["cells"]}
    red = [c for c in rec["cells"] if c["status"] != "green"]
    if red:
        probs.append(f"red at {red[0]['id']}: {str(red[0]['detail'])[:160]}")
    elif not rec["passed"] or rec.get("exit_code") != 0:
        probs.append(f"not passed (exit code {rec.get('exit_code')})")
    missing = [s for s in REQUIRED_STEPS if s not in cells]
    if missing and not red:
        probs.append(f"incomplete flow: steps {missing} not run")
    prov = rec["provenance"]
    if not isinstance(prov, dict):
        probs.append("no device provenance (the flow never reached the profile's device)")
    else:
        if prov.get("profile") != profile or prov.get("family") != spec.backend_family:
            probs.append(
                f"provenance names {prov.get('profile')}/{prov.get('family')}, not {profile}/{spec.backend_family}"
            )
        if prov.get("device_type") != spec.device_type:
            probs.append(f"ran on a {prov.get('device_type')!r} device, {profile} needs {spec.device_type!r}")
        elif not ARCH_OF[spec.device_type](prov.get("arch_key")):
            probs.append(f"arch key {prov.get('arch_key')!r} is not a {spec.device_type} arch")
    return probs


def verdict(dirs: list[str]) -> dict:
    contract = load_contract()
    fixture_hash = load_manifest(contract=contract).fixture_identity_sha256
    recs = find_records(dirs)
    unknown = sorted({r["profile"] for _, r in recs} - set(contract.profiles))
    if unknown:
        raise BadInput(f"C11 records of unknown profile(s) {unknown}; the contract has {sorted(contract.profiles)}")
    profiles = {}
    for name in contract.profiles:
        mine = [(p, r) for p, r in recs if r["profile"] == name]
        entries = [
            {
                "path": str(p),
                "git_sha": r["git_sha"],
                "run_id": r.get("run_id"),
                "created_at": r["created_at"],
                "host": (r["provenance"] or {}).get("host"),
                "device_name": (r["provenance"] or {}).get("device_name"),
                "arch_key": (r["provenance"] or {}).get("arch_key"),
                "problems": record_problems(r, contract, fixture_hash),
            }
            for p, r in mine
        ]
        if not entries:
            status, why = "missing", ["no C11 record"]
        else:
            why = [f"{e['path']}: {x}" for e in entries for x in e["problems"]]
            status = "red" if why else "green"
        profiles[name] = {
            "status": status,
            "family": contract.profiles[name].backend_family,
            "problems": why,
            "records": entries,
        }
    commits = sorted({e["git_sha"] for v in profiles.values() if v["status"] == "green" for e in v["records"]})
    missing = [f"{n}: {v['problems'][0]}" for n, v in profiles.items() if v["status"] != "green"]
    if len(commits) > 1:
        missing.append(
            f"the green records come from {len(commits)} commits ({', '.join(c[:12] for c in commits)}): "
            "one state of the code only"
        )
    runs = [
        {
            "path": str(p),
            "git_sha": r.get("git_sha"),
            "created_at": r.get("created_at"),
            "suites": r.get("suites"),
            "problems": full_run_problems(r),
        }
        for p, r in find_full_runs(dirs)
    ]
    at = [r for r in runs if r["git_sha"] in commits]
    if not any(not r["problems"] for r in at):
        where = "; ".join(f"{r['path']}: {r['problems'][0]}" for r in at) or (
            f"none at {', '.join(c[:12] for c in commits) or 'the records’ commit'}"
            + (f" (found at {', '.join(sorted({str(r['git_sha'])[:12] for r in runs}))})" if runs else "")
        )
        missing.append(f"CI's full test run (nox -s tests, evidence/ci/tests.json) green at the same commit: {where}")
    return {
        "closed": not missing,
        "contract_fingerprint": contract.fingerprint,
        "commits": commits,
        "profiles": profiles,
        "full_test_runs": runs,
        "missing": missing,
    }


def render(v: dict) -> str:
    lines = [
        f"WS1 closure: {'CLOSED' if v['closed'] else 'NOT CLOSED'}  (contract {v['contract_fingerprint'][:16]}, "
        f"commit {', '.join(c[:12] for c in v['commits']) or '-'})"
    ]
    for name, p in v["profiles"].items():
        if p["status"] == "green":
            hosts = "; ".join(f"{e['host']} {e['device_name']} ({e['arch_key']})" for e in p["records"])
            lines.append(f"  {name:<18} green    on {hosts}")
        else:
            lines.append(f"  {name:<18} {p['status'].upper():<8} {p['problems'][0][:200]}")
            lines += [f"  {'':<18} {'':<8} {x[:200]}" for x in p["problems"][1:4]]
    green_runs = [r for r in v.get("full_test_runs", []) if not r["problems"] and r["git_sha"] in v["commits"]]
    if green_runs:
        lines.append(
            f"  {'CI full run':<18} green    {green_runs[0]['path']} "
            f"(nox -s tests: {', '.join(green_runs[0]['suites'])})"
        )
    if v["missing"]:
        lines.append("missing:")
        lines += [f"  - {m[:220]}" for m in v["missing"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="ws1-contract closure", description="the WS1 verdict from several hosts' C11 records"
    )
    ap.add_argument("dirs", nargs="*", help="evidence roots or profile folders holding c11_ci.json")
    ap.add_argument("--json", action="store_true", help="print the verdict as JSON")
    args = ap.parse_args(argv)
    try:
        v = verdict(args.dirs)
    except (BadInput, ContractError, FileNotFoundError) as exc:
        print(f"ws1-contract closure: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(v, indent=1) if args.json else render(v))
    return EXIT_CLOSED if v["closed"] else EXIT_OPEN
