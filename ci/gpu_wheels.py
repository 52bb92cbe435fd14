"""The wheels a GPU host needs and lacks, as one folder to carry (ci/gpu_wheels.sh is the command).

    python ci/gpu_wheels.py [DEST] [--host ci/gpu_host_h200.txt] [--python 3.12] [--dry-run] [--json]

1. The projects a GPU run needs beyond the host's image are requirements/gpu-host.txt's names, pinned to
   requirements/cpu.txt's versions where it pins them (nox, cattrs; nvidia-cutlass for the sm_90a GEMMs' build).
2. pip resolves them WITH their dependencies for the host's Python and platform (py3.12, manylinux x86-64,
   wheels only) into a scratch folder.
3. A resolved project is kept only when the host lacks it: absent from the host's inventory
   (ci/gpu_host_h200.txt), or present at a version that fails a requirement on it, or present at an unknown
   version while some requirement sets a lower bound (it cannot be shown to satisfy it). Everything else is
   dropped: the host's own copy serves.
4. DEST (default .whl, git-ignored) then holds exactly the kept wheels; a README-free folder that the device
   run names in ``carry`` and installs with ``pip install --no-index --no-deps --target /tmp/site`` + PYTHONPATH.

Exit 0 done; 1 pip could not resolve (network, a missing wheel); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")


def read_inventory(path: Path) -> dict[str, Version | None]:
    """name -> version (None: present, version unknown)."""
    inv: dict[str, Version | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, ver = line.partition("==")
        inv[canonicalize_name(name)] = Version(ver) if ver else None
    return inv


def top_level(names_file: Path, pins_file: Path) -> list[str]:
    pins = {}
    for line in pins_file.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s#]+)", line.strip())
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(2)
    out = []
    for line in names_file.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            v = pins.get(canonicalize_name(name))
            out.append(f"{name}=={v}" if v else name)
    return out


def wheel_meta(whl: Path) -> tuple[str, Version, list[Requirement]]:
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    name = re.search(r"^Name: (.+)$", text, re.M).group(1).strip()
    ver = Version(re.search(r"^Version: (.+)$", text, re.M).group(1).strip())
    reqs = [Requirement(m.group(1).strip()) for m in re.finditer(r"^Requires-Dist: (.+)$", text, re.M)]
    return canonicalize_name(name), ver, reqs


def select(
    resolved: dict[str, tuple[Version, list[Requirement]]],
    inventory: dict[str, Version | None],
    wanted: list[str],
    python: str,
) -> dict[str, str]:
    """project -> why it is carried (absent from the dict: the host's own copy serves)."""
    env = {
        "python_version": python,
        "python_full_version": python + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "extra": "",
    }
    specs: dict[str, list] = {}
    for top in wanted:
        r = Requirement(top)
        specs.setdefault(canonicalize_name(r.name), []).append(r.specifier)
    for _name, (_ver, reqs) in resolved.items():
        for r in reqs:
            if r.marker is None or r.marker.evaluate(env):
                specs.setdefault(canonicalize_name(r.name), []).append(r.specifier)
    keep = {}
    for name in resolved:
        have = inventory.get(name, "absent")
        need = [s for s in specs.get(name, []) if str(s)]
        if have == "absent":
            keep[name] = "absent from the host"
        elif have is None:
            lower = [str(s) for s in need if any(sp.operator in (">=", ">", "==", "~=") for sp in s)]
            if lower:
                keep[name] = f"host version unknown; required {', '.join(lower)}"
        elif not all(have in s for s in need):
            keep[name] = f"host has {have}; required {', '.join(str(s) for s in need)}"
    return keep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_wheels", description=__doc__.split("\n")[0])
    ap.add_argument("dest", nargs="?", default=str(ROOT / ".whl"))
    ap.add_argument("--host", default=str(ROOT / "ci" / "gpu_host_h200.txt"), help="the host image's package inventory")
    ap.add_argument("--needs", default=str(ROOT / "requirements" / "gpu-host.txt"))
    ap.add_argument("--python", default="3.12", help="the host's Python (major.minor)")
    ap.add_argument("--dry-run", action="store_true", help="resolve and print; leave DEST alone")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for f in (args.host, args.needs):
        if not Path(f).is_file():
            print(f"gpu_wheels: no such file {f}", file=sys.stderr)
            return 2
    wanted = top_level(Path(args.needs), ROOT / "requirements" / "cpu.txt")
    inventory = read_inventory(Path(args.host))
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "--python-version",
            args.python,
            "--implementation",
            "cp",
            *[a for p in PLATFORMS for a in ("--platform", p)],
            "-d",
            tmp,
            *wanted,
        ]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(
                f"gpu_wheels: pip could not resolve {wanted} for Python {args.python}: "
                f"{r.stderr.strip().splitlines()[-1:]}",
                file=sys.stderr,
            )
            return 1
        wheels = {wheel_meta(w)[0]: (w, *wheel_meta(w)[1:]) for w in sorted(Path(tmp).glob("*.whl"))}
        keep = select({n: (v, reqs) for n, (_w, v, reqs) in wheels.items()}, inventory, wanted, args.python)
        # headers-only projects (requirements/cutlass.txt: CUTLASS for kernels-cuda's sm_90a GEMM build): the wheel
        # alone, --no-deps (its Python side is never imported), carried unless the host has that very version
        hdr = Path(tmp) / "headers"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "-d",
                str(hdr),
                "-r",
                str(ROOT / "requirements" / "cutlass.txt"),
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            print(
                f"gpu_wheels: pip could not fetch requirements/cutlass.txt: {r.stderr.strip().splitlines()[-1:]}",
                file=sys.stderr,
            )
            return 1
        for w in sorted(hdr.glob("*.whl")):
            name, ver, _reqs = wheel_meta(w)
            wheels[name] = (w, ver, [])
            if inventory.get(name) != ver:
                keep[name] = "headers for the kernels-cuda build (--no-deps)"
        rows = [
            {
                "project": n,
                "version": str(wheels[n][1]),
                "wheel": wheels[n][0].name,
                "carried": n in keep,
                "why": keep.get(n, "the host has it"),
            }
            for n in sorted(wheels)
        ]
        if not args.dry_run:
            dest = Path(args.dest)
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir(parents=True)
            for n in keep:
                shutil.copy2(wheels[n][0], dest / wheels[n][0].name)
    if args.json:
        print(json.dumps({"wanted": wanted, "python": args.python, "wheels": rows}, indent=1))
    else:
        print(
            f"gpu_wheels: {len(keep)} of {len(rows)} resolved projects carried into {args.dest}"
            f"{' (dry run)' if args.dry_run else ''}  (needs: {', '.join(wanted)}; host: {Path(args.host).name})"
        )
        for row in rows:
            print(
                f"  {'carry' if row['carried'] else 'skip ':<5} {row['project']:<20} {row['version']:<12} {row['why']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
