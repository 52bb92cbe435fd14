"""What the checks on gloo process groups share (``fsdp``, ``tp``): the command line's common half, a free port for a
spawned group, the cell table, and where the record goes.

The checks run ``cpu_bf16`` on gloo. Another profile: exit 2 where its device is absent (one line); where it is
present, the check is not executed there (NCCL on a GPU host is not written yet) — a red record with that reason,
exit 1, never a pass.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path

EXIT_GREEN, EXIT_RED, EXIT_UNAVAILABLE = 0, 1, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parser(prog: str, doc: str, worlds: str, what: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"python -m ws1_matrix {prog}", description=doc.split("\n")[0])
    ap.add_argument("profile", nargs="?", default="cpu_bf16")
    ap.add_argument("--world", default=worlds, help=f"{what}, comma-separated (default {worlds})")
    ap.add_argument("--json", action="store_true", help="print the record as JSON")
    ap.add_argument("--evidence-dir", default=None)
    return ap


def worlds_or_exit(prog: str, args, valid: Callable[[int], bool], rule: str, name: str) -> list[int] | int:
    """The requested world sizes; or EXIT_UNAVAILABLE after one line on stderr (a bad --world, the profile unknown
    or its device absent); or EXIT_RED after writing ``name``'s record red, not executed (another profile whose device
    is here)."""
    import ws1_accel

    try:
        worlds = [int(w) for w in args.world.split(",")]
    except ValueError:
        print(f"{prog}: --world must be comma-separated integers, got {args.world!r}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not worlds or not all(valid(w) for w in worlds):
        print(f"{prog}: {rule}, got {args.world!r}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        ws1_accel.resolve_device(args.profile)
    except ws1_accel.AcceleratorError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if args.profile != "cpu_bf16":
        why = f"not executed: this check runs gloo on cpu_bf16; {args.profile} needs NCCL on its host (not written yet)"
        cell = {"world": 0, "model": "-", "cell": "not_executed", "green": False, "detail": why}
        record = {"profile": args.profile, "worlds": worlds, "cells": [cell], "green": False}
        return finish(args, record, name, table(f"{prog} on {args.profile}: RED", record, 8, 14))
    return worlds


def table(title: str, record: dict, model_width: int, cell_width: int) -> str:
    lines = [title, "", f"{'W':>2}  {'model':<{model_width}} {'cell':<{cell_width}} {'verdict':<9} detail"]
    for c in record["cells"]:
        verdict = "shown" if c["green"] is None else ("green" if c["green"] else "RED")
        if c.get("red_required") and c["green"]:
            verdict = "red ✓"
        lines.append(
            f"{c['world']:>2}  {c['model']:<{model_width}} {c['cell']:<{cell_width}} {verdict:<9} {c['detail']}"
        )
    lines += ["", "PASS" if record["green"] else "FAIL"]
    return "\n".join(lines)


def finish(args, record: dict, name: str, text: str) -> int:
    """Write ``<evidence>/<profile>/<name>.json``, print the table (or the JSON); the exit code of the verdict."""
    from ws1_contract.evidence import evidence_root

    root = Path(args.evidence_dir) if args.evidence_dir else evidence_root() / args.profile
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.json").write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2) if args.json else text)
    return EXIT_GREEN if record["green"] else EXIT_RED
