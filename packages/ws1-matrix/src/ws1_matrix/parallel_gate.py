"""The parallel gate: the three gloo checks of the parallel-invariant order, one verdict.

    python -m ws1_matrix parallel [PROFILE] [--json]                                  (nox -s parallel_gate)

Runs, each at its default degrees, writing its own record beside this one:

* ``fsdp`` (:mod:`ws1_matrix.fsdp_check`) — data parallel under FSDP2, DP 1/2/4: gradients in ``sample_tree`` order
  equal one device's, the default order under the split and our rank fold red;
* ``tp`` (:mod:`ws1_matrix.tp_check`) — tensor parallel, TP 1/2/4/8: the same log-probs, the controls red;
* ``cp`` (:mod:`ws1_matrix.cp_check`) — context parallel, CP 1/2/4 on 2,048 tokens: the same attention output,
  dq, dk, dv and log-probs, the ring merge, the default order under the split and the rank fold red.

``parallel_gate.json`` lists each check's verdict and exit code. Exit 0 every check green; 1 a check red (red wins);
2 the profile's device absent or a bad argument (one line).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from . import cp_check, fsdp_check, gloo_checks, tp_check

CHECKS = (("fsdp", fsdp_check), ("tp", tp_check), ("cp", cp_check))


def main(argv: list[str] | None = None) -> int:
    from ws1_contract.evidence import evidence_root

    ap = argparse.ArgumentParser(prog="python -m ws1_matrix parallel", description=__doc__.split("\n")[0])
    ap.add_argument("profile", nargs="?", default="cpu_bf16")
    ap.add_argument("--json", action="store_true", help="print the gate's record as JSON (the checks' tables: stderr)")
    ap.add_argument("--evidence-dir", default=None)
    args = ap.parse_args(argv)
    root = Path(args.evidence_dir) if args.evidence_dir else evidence_root() / args.profile
    common = [args.profile, "--evidence-dir", str(root)]
    rows = []
    for name, mod in CHECKS:
        print(f"parallel: {name} ...", file=sys.stderr)
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            rc = mod.main(common)
        rows.append(
            {
                "check": name,
                "exit": rc,
                "green": rc == gloo_checks.EXIT_GREEN,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        if rc == gloo_checks.EXIT_UNAVAILABLE:
            break  # the profile's device is absent (the check said so in one line): the others would say the same
    codes = [r["exit"] for r in rows]
    if gloo_checks.EXIT_RED in codes:
        verdict = gloo_checks.EXIT_RED
    elif gloo_checks.EXIT_UNAVAILABLE in codes:
        verdict = gloo_checks.EXIT_UNAVAILABLE
    else:
        verdict = gloo_checks.EXIT_GREEN
    record = {"profile": args.profile, "checks": rows, "green": verdict == gloo_checks.EXIT_GREEN}
    if verdict != gloo_checks.EXIT_UNAVAILABLE:
        root.mkdir(parents=True, exist_ok=True)
        (root / "parallel_gate.json").write_text(json.dumps(record, indent=2))
    lines = [f"Parallel gate on {args.profile}:"]
    lines += [
        f"  {r['check']:<5} {'green' if r['green'] else 'RED' if r['exit'] == 1 else 'exit 2'}  {r['seconds']} s"
        for r in rows
    ]
    lines.append("PASS" if record["green"] else "FAIL")
    print(json.dumps(record, indent=2) if args.json else "\n".join(lines))
    return verdict
