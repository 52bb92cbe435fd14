"""``ws1-accel [PROFILE ...] [--json]``: print each profile's device facts; exit 2 if any is absent."""

from __future__ import annotations

import argparse
import json
import sys

from . import PROFILE_FAMILY, AcceleratorError, AcceleratorUnavailable, facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ws1-accel", description=__doc__)
    ap.add_argument("profiles", nargs="*", help=f"default: all of {', '.join(PROFILE_FAMILY)}")
    ap.add_argument("--device", help="a specific device, e.g. cuda:1 (checked against the profile's family)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    rows, code = [], 0
    for profile in args.profiles or list(PROFILE_FAMILY):
        try:
            rows.append({"profile": profile, "available": True, **facts(profile, args.device).to_dict()})
        except AcceleratorUnavailable as exc:
            rows.append({"profile": profile, "available": False, "reason": str(exc)})
            code = 2
        except AcceleratorError as exc:
            print(f"ws1-accel: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({"profiles": rows}, indent=2))
    else:
        for r in rows:
            if r["available"]:
                print(f"{r['profile']:<18} {r['device']:<8} {r['arch_key']:<10} {r['device_name']}")
            else:
                print(f"{r['profile']:<18} unavailable: {r['reason']}")
    return code


if __name__ == "__main__":
    sys.exit(main())
