"""Compile-only check of the ws1_cuda kernels: nvcc alone, no torch, no GPU.

Every ``kernels-cuda/csrc/*.cu`` is compiled with ``-DWS1_DEVICE_ONLY`` (its kernels and their explicit
instantiations, without the torch entry points) for sm_80 and sm_90a with the library's numerics flags and
warnings as errors; ptxas's resource report (registers, spill stores/loads, stack frame, shared memory,
barriers per kernel per arch) is parsed and written to ``<out>/cuda_resources.json`` and a readable
``<out>/cuda_resources.md``. It is red (exit 1) on a compile error or warning, on any spill in any kernel,
when a kernel lacks a report for one of the two archs, or when a manifest-declared cuda_bf16 source is
missing or does not define its entry point (the op name after ``ws1_cuda::``) or the registration file
does not declare the op. No nvcc: one line, exit 2.

    python kernels-cuda/tools/compile_check.py [--out evidence/build] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PKG = HERE.parent
ROOT = PKG.parent
CSRC = PKG / "csrc"
ARCHS = ("sm_80", "sm_90a")
GENCODE = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90a,code=sm_90a"]
# the library's device flags (setup.py), warnings as errors; -Xptxas -v for the resource report
FLAGS = ["-std=c++20", "-O3", "-fmad=false", "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror",
         "-Xptxas", "-v", "-DWS1_DEVICE_ONLY", *GENCODE]
REGISTRATION = CSRC / "ws1_cuda.cpp"


def find_nvcc() -> str | None:
    """nvcc from CUDA_HOME / CUDA_PATH, PATH, or the newest /usr/local/cuda*; WS1_NVCC=none: as if absent."""
    if os.environ.get("WS1_NVCC") == "none":
        return None
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if base and (Path(base) / "bin" / "nvcc").is_file():
            return str(Path(base) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True):
        return str(cand)
    return None


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def parse_ptxas(text: str) -> list[dict]:
    """ptxas -v lines -> one record per (kernel, arch)."""
    out: list[dict] = []
    cur: dict | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            cur = {"kernel": m.group(1), "arch": m.group(2), "registers": None, "spill_stores": None,
                   "spill_loads": None, "stack_frame": None, "smem": 0, "barriers": 0}
            out.append(cur)
        elif cur is not None and (m := _PROPS.search(line)):
            cur["stack_frame"], cur["spill_stores"], cur["spill_loads"] = (int(g) for g in m.groups())
        elif cur is not None and (m := _USED.search(line)):
            cur["registers"] = int(m.group(1))
            cur["barriers"] = int(m.group(2) or 0)
            cur["smem"] = int(m.group(3) or 0)
    return out


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=False)
    lines = res.stdout.splitlines()
    return {n: (lines[i] if i < len(lines) else n) for i, n in enumerate(names)}


def compile_one(nvcc: str, src: Path, extra: list[str] | None = None) -> dict:
    """Compile one .cu (device-only); returns {file, ok, seconds, log, kernels}."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, *FLAGS, *(extra or []), "-I", str(src.parent), "-c", str(src), "-o", str(Path(tmp) / "out.o")]
        t0 = time.monotonic()
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        dt = time.monotonic() - t0
    log = res.stdout + res.stderr
    return {"file": src.name, "ok": res.returncode == 0, "seconds": round(dt, 2), "log": log, "kernels": parse_ptxas(log)}


def manifest_sources() -> dict[str, tuple[str, str]]:
    """node -> (op name, source path) of the cuda_bf16 kernels the manifest declares."""
    nodes = json.loads((ROOT / "contracts" / "ws1_manifest.json").read_text())["nodes"]
    out = {}
    for node, spec in nodes.items():
        decl = (spec.get("kernels") or {}).get("cuda_bf16")
        if decl:
            out[node] = (decl["kernel_id"].split("::", 1)[1], decl["source"])
    return out


def entry_problems(declared: dict[str, tuple[str, str]], root: Path = ROOT, registration: Path = REGISTRATION) -> list[str]:
    """A declared source must exist and define `<ret> <op>(`; the registration file must def the op."""
    problems = []
    reg = registration.read_text() if registration.is_file() else ""
    for node, (op, source) in sorted(declared.items()):
        path = root / source
        if not path.is_file():
            problems.append(f"{node}: declared source {source} does not exist")
            continue
        if not re.search(rf"^[\w:<>, ]+[ \t]+{re.escape(op)}\s*\(", path.read_text(), re.M):
            problems.append(f"{node}: {source} does not define the entry point {op}(...)")
        if f'm.def("{op}(' not in reg:
            problems.append(f"{node}: {registration.name} does not declare ws1_cuda::{op}")
    return problems


def check(results: list[dict], declared: dict[str, tuple[str, str]]) -> list[str]:
    problems = [f"{r['file']}: compile failed:\n{r['log'].strip()[-3000:]}" for r in results if not r["ok"]]
    for r in results:
        if not r["ok"]:
            continue
        by_kernel: dict[str, set[str]] = {}
        for k in r["kernels"]:
            by_kernel.setdefault(k["kernel"], set()).add(k["arch"])
            if k["spill_stores"] is None or k["registers"] is None:
                problems.append(f"{r['file']}: no resource report parsed for {k.get('name', k['kernel'])} ({k['arch']})")
            elif k["spill_stores"] or k["spill_loads"]:
                problems.append(f"{r['file']}: {k.get('name', k['kernel'])} spills on {k['arch']} "
                                f"({k['spill_stores']} B stores, {k['spill_loads']} B loads, {k['registers']} registers)")
        for kern, archs in by_kernel.items():
            if set(ARCHS) - archs:
                problems.append(f"{r['file']}: kernel {kern} has no {sorted(set(ARCHS) - archs)} image")
        if not r["kernels"]:
            problems.append(f"{r['file']}: compiled no kernel (explicit instantiations missing?)")
    return problems + entry_problems(declared)


def table(results: list[dict]) -> str:
    lines = ["| file | kernel | arch | registers | spill stores (B) | spill loads (B) | stack (B) | smem (B) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        for k in r["kernels"]:
            lines.append(f"| {r['file']} | `{k.get('name', k['kernel'])}` | {k['arch']} | {k['registers']} | "
                         f"{k['spill_stores']} | {k['spill_loads']} | {k['stack_frame']} | {k['smem']} |")
    return "\n".join(lines) + "\n"


def run(out: Path | None, jobs: int, sources: list[Path] | None = None, extra: list[str] | None = None) -> tuple[int, dict]:
    nvcc = find_nvcc()
    if nvcc is None:
        print("compile_check: no nvcc found (CUDA_HOME, PATH, /usr/local/cuda*): the CUDA kernels cannot be compiled here")
        return 2, {}
    srcs = sources if sources is not None else sorted(CSRC.glob("*.cu"))
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda s: compile_one(nvcc, s, extra), srcs))
    names = demangle(sorted({k["kernel"] for r in results for k in r["kernels"]}))
    for r in results:
        for k in r["kernels"]:
            k["name"] = names.get(k["kernel"], k["kernel"])
    problems = check(results, manifest_sources() if sources is None else {})
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout.strip().splitlines()
    report = {
        "nvcc": nvcc, "nvcc_version": version[-1] if version else "", "archs": list(ARCHS),
        "flags": FLAGS + (extra or []), "wall_seconds": round(time.monotonic() - t0, 1),
        "files": [{k: v for k, v in r.items() if k != "log"} for r in results],
        "problems": problems, "verdict": "green" if not problems else "red",
        "note": "compiled and resource-checked only: nothing here executed a kernel",
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "cuda_resources.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "cuda_resources.md").write_text(
            f"# ws1_cuda resource report ({report['nvcc_version']})\n\nverdict: {report['verdict']}; "
            f"{sum(len(r['kernels']) for r in results)} kernel images in {report['wall_seconds']} s\n\n" + table(results)
            + ("\n## Problems\n\n" + "\n".join(f"* {p}" for p in problems) + "\n" if problems else ""))
    return (0 if not problems else 1), report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "evidence" / "build")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    rc, report = run(args.out, args.jobs)
    if rc == 2:
        return 2
    files = report["files"]
    print(f"compile_check: {len(files)} files, {sum(len(f['kernels']) for f in files)} kernel images "
          f"(sm_80, sm_90a) in {report['wall_seconds']} s -> {args.out / 'cuda_resources.json'}")
    for p in report["problems"]:
        print(f"  RED: {p}")
    print(f"compile_check: {report['verdict']}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
