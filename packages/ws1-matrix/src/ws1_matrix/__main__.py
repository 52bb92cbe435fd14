"""``python -m ws1_matrix c3|c4|c5|c8 [PROFILE ...] [options]`` — the gates of this package.

    c3 [PROFILE ...] [--op OP]      C3 forward accuracy + invariance (nox -s c3_forward)
    c4 [PROFILE ...] [--op OP]      C4 gradient accuracy + invariance (nox -s c4_gradient)
    c5 [PROFILE ...]                C5 elementwise inventory (nox -s c5_inventory)
    c8 [PROFILE ...] [--execute]    C8 the four-judgment matrix (nox -s c8_matrix)
    report EVIDENCE.json            re-render a C8 record's Markdown table and SVG figure

Common: ``--json`` (records instead of tables), ``--evidence-dir DIR``. Exit codes: 0 every cell
green (N/A aside; all-N/A is not green), 1 a red cell or a broken contract/evidence file (red wins
over an absent device), 2 a requested profile's device is absent (C3/C4) or the command line names
an unknown op or profile — always one line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from ws1_contract import gate_main
from ws1_contract.errors import ContractError, EvidenceError

EXIT_BAD_ARGS = 2


def _split_ops(values) -> list[str]:
    return [o for v in (values or []) for o in v.split(",") if o]


def _add_op(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--op", action="append", metavar="OP", help="judge only this op (repeatable, or comma-separated)")


def _check_ops(gate: str, argv: list[str]) -> int | None:
    """Fail closed on an unknown --op before anything runs: exit 2 with one line."""
    pre = argparse.ArgumentParser(add_help=False)
    _add_op(pre)
    known, _ = pre.parse_known_args(argv)
    ops = _split_ops(known.op)
    if not ops:
        return None
    try:
        from ws1_contract import load_contract, load_manifest

        valid = load_manifest(contract=load_contract()).ops
    except (ContractError, FileNotFoundError):
        return None  # gate_main reports the broken contract itself
    unknown = [o for o in ops if o not in valid]
    if unknown:
        print(f"ws1 {gate}: unknown op(s) {unknown}; expected one of {valid}", file=sys.stderr)
        return EXIT_BAD_ARGS
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else EXIT_BAD_ARGS
    cmd, rest = argv[0], argv[1:]
    if cmd in ("c3", "c4"):
        from . import c34

        gate = {"c3": "c3_forward", "c4": "c4_gradient"}[cmd]
        bad = _check_ops(gate, rest)
        if bad is not None:
            return bad
        body = c34.c3_forward if cmd == "c3" else c34.c4_gradient

        def run_body(run, args):
            args.op = _split_ops(args.op)
            body(run, args)

        return gate_main(gate, run_body, rest, needs_device=True, add_args=_add_op,
                         description="C3: forward accuracy and invariance" if cmd == "c3" else "C4: gradient accuracy and invariance")
    if cmd == "c5":
        from . import c5

        return c5.main(rest)
    if cmd == "c8":
        from . import c8

        return c8.main(rest)
    if cmd == "report":
        from . import report

        try:
            return report.main(rest)
        except EvidenceError as exc:
            print(f"ws1 report: {exc}", file=sys.stderr)
            return 1
    print(f"ws1-matrix: unknown command {cmd!r} (c3, c4, c5, c8, report)", file=sys.stderr)
    return EXIT_BAD_ARGS


if __name__ == "__main__":
    sys.exit(main())
