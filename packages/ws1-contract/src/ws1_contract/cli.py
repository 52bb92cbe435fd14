"""``ws1-contract``: the C1/C2 gates and small tools for the contract and manifest.

ws1-contract c1 [PROFILE ...] [--json]     contract gate
ws1-contract c2 [PROFILE ...] [--json]     manifest gate (static)
ws1-contract show [--json]                 where the files are read from, versions, fingerprints
ws1-contract rehash                        recompute fixture_identity_sha256 after an intended edit
ws1-contract report EVIDENCE_DIR [--run-id ID]   write report.md and report.html from a profile's evidence
                                           (one run's records: ID, default the run of its c11_ci.json)
ws1-contract closure DIR ... [--json]      the WS1 verdict from several hosts' C11 records
"""

from __future__ import annotations

import json
import sys

from .contract import load_contract
from .errors import ContractError, EvidenceError
from .gate import gate_main
from .gates import c1_contract, c2_manifest
from .manifest import load_manifest, rehash


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "c1":
        return gate_main("c1_contract", c1_contract, rest, description="C1: the numerical contract")
    if cmd == "c2":
        return gate_main("c2_manifest", c2_manifest, rest, description="C2: the workload manifest (static)")
    try:
        if cmd == "show":
            c = load_contract()
            m = load_manifest(contract=c)
            info = {
                "contract": c.source,
                "contract_version": c.version,
                "contract_fingerprint": c.fingerprint,
                "manifest": m.source,
                "manifest_version": m.version,
                "workload_id": m.workload_id,
                "fixture_identity_sha256": m.fixture_identity_sha256,
                "profiles": sorted(c.profiles),
            }
            if "--json" in rest:
                print(json.dumps(info, indent=1))
            else:
                for k, v in info.items():
                    print(f"{k:<24} {v}")
            return 0
        if cmd == "closure":
            from .closure import main as closure_main

            return closure_main(rest)
        if cmd == "report":
            run_id = None
            if "--run-id" in rest:
                i = rest.index("--run-id")
                run_id = rest[i + 1] if i + 1 < len(rest) else ""
                rest = rest[:i] + rest[i + 2 :]
            if len(rest) != 1 or run_id == "":
                print(
                    "ws1-contract report: give one evidence folder, e.g. evidence/cpu_bf16 [--run-id ID]",
                    file=sys.stderr,
                )
                return 2
            from .report import write_report

            md, hp = write_report(rest[0], run_id=run_id)
            print(f"wrote {md} and {hp}")
            return 0
        if cmd == "rehash":
            old, new = rehash()
            print(
                f"fixture_identity_sha256: {old} -> {new}"
                if old != new
                else f"fixture_identity_sha256 unchanged: {new}"
            )
            return 0
    except (ContractError, EvidenceError, FileNotFoundError) as exc:
        print(f"ws1-contract {cmd}: {exc}", file=sys.stderr)
        return 1
    print(f"ws1-contract: unknown command {cmd!r} (c1, c2, show, rehash, report, closure)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
