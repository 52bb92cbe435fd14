"""Compile-only check of the ws1_cuda kernels: nvcc alone, no torch, no GPU.

Every ``kernels-cuda/csrc/*.cu`` but the host-only ones (``HOST_ONLY``: torch entry points whose kernels live in
other TUs; red if one defines or launches a kernel) is compiled with ``-DWS1_DEVICE_ONLY`` (its kernels and their
explicit instantiations, without the torch entry points) for sm_80 and sm_90a with the library's numerics flags and
warnings as errors; ptxas's resource report (registers, spill stores/loads, stack frame, shared memory,
barriers per kernel per arch) is parsed and written to ``<out>/cuda_resources.json`` and a readable
``<out>/cuda_resources.md``. It is red (exit 1) on a compile error or warning, on any spill in any kernel,
when a kernel lacks a report for one of the two archs, or when a manifest-declared cuda_bf16 source is
missing or does not define its entry point (the op name after ``ws1_cuda::``) or the registration file
does not declare the op. No nvcc: one line, exit 2.

SASS expectations (``SASS_EXPECT``, a table any kernel author extends): per (file, arch, kernel name pattern),
instructions that must be present (e.g. the sm_90a GEMM's HGMMA.64x128x16 and its TMA loads UTMALDG) and
ones that must not (local memory LDL/STL); read with cuobjdump --dump-sass (CUDA_HOME, PATH, or the copy
Triton's wheel carries). A table entry whose file compiled but whose kernel or instruction is missing is red;
so is an entry that cannot be read (no cuobjdump). Counts per kernel go to the report.

The CUTLASS translation units (``HEAVY``: csrc/wgmma_gemm_*.cu, ~1.5-2 min of nvcc each on one core) are
compiled for sm_90a only (their sm_80 images are CUTLASS's arch stubs, never launched; the torch-linked build
compiles them for both), with CUTLASS's headers (-isystem, the nvidia-cutlass wheel). ``--subset ci`` (what
the CI test runs) compiles the light files and two of the four heavy ones, which between them cover every
feature of the other two (K- and MN-major TMA loads, the BF16 and FP32 epilogues, both configurations);
``--subset all`` (the default, ``nox -s build_cuda``) compiles all. Results are cached under
kernels-cuda/build/compile_check/ by a hash of the command, nvcc's and CUTLASS's versions and the file with every
csrc/ header it includes, so a second run of the same sources recompiles nothing (a fresh clone compiles everything).

    python kernels-cuda/tools/compile_check.py [--out evidence/build] [--jobs 2] [--subset all|ci] [--no-cache]
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import importlib.util
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
FLAGS = [
    "-std=c++20",
    "-O3",
    "-fmad=false",
    "-Werror",
    "all-warnings",
    "-Xcompiler",
    "-Wall,-Wextra,-Werror",
    "-Xptxas",
    "-v",
    "-DWS1_DEVICE_ONLY",
    *GENCODE,
]
REGISTRATION = CSRC / "ws1_cuda.cpp"
CACHE = PKG / "build" / "compile_check"

# Host-only translation units: an op's torch entry points (argument checks, buffers) whose kernels, and the launchers
# of those kernels, are in other TUs (attention.cu: attention_{plan,fwd,bwd}.cu). With -DWS1_DEVICE_ONLY they compile
# to nothing, so the device-only pass skips them; host_only_problems() keeps them free of kernels and launches.
HOST_ONLY = ("attention.cu",)

# Translation units built on CUTLASS: compiled for sm_90a alone (see the docstring), with its headers.
HEAVY = "wgmma_gemm_*.cu"
# The heavy TUs the CI subset compiles: together they hold every feature of the others (wgmma_gemm.h).
CI_HEAVY = ("wgmma_gemm_fwd_bf16.cu", "wgmma_gemm_dw.cu")

# SASS expectations, one row per (file pattern, arch, kernel pattern): `require` {label: regex} must each
# match at least once in every kernel the pattern selects (and the pattern must select one), `forbid`
# {label: regex} must match nowhere in them. Authors of other kernels add their rows here.
NO_LOCAL = {"local memory (LDL/STL)": r"\b(?:LDL|STL)(?:\.[A-Z0-9]+)*\b"}
# a floating-point atomic or reduction to memory (RED/REDG/ATOM/ATOMG/ATOMS .ADD.F32 and kin): the order of such
# sums is the scheduler's, so no ws1 kernel may issue one (integer atomics, e.g. a plan's CAS, are order-free)
NO_FLOAT_ATOMIC = {
    "floating-point atomic (RED/ATOM .F16/.F32/.F64)": (
        r"\b(?:REDG?|ATOMG?|ATOMS)\.[A-Z0-9_.]*?\bB?F(?:16|32|64)(?:x2|_V2)?\b"
    )
}
# `except`: files the row's pattern matches but that have a row of their own
N32_TU = "wgmma_gemm_fwd_bf16_n32.cu"  # the n32 candidate (wgmma_gemm.h): m64n32k16, never chosen by the ops
SASS_EXPECT: list[dict] = [
    {
        "file": "wgmma_gemm_*.cu",
        "except": (N32_TU,),
        "arch": "sm_90a",
        "kernel": r"GemmUniversal",
        "require": {
            "wgmma m64n128k16 BF16->FP32 (HGMMA)": r"\bHGMMA\.64x128x16\.F32\.BF16\b",
            "TMA tensor load (UTMALDG)": r"\bUTMALDG\b",
            "TMA tensor store (UTMASTG)": r"\bUTMASTG\b",
        },
        "forbid": {
            **NO_LOCAL,
            "another wgmma shape": r"\bHGMMA\.(?!64x128x16\.F32\.BF16\b)\S+",
            "mma.sync (HMMA)": r"\bHMMA\b",
        },
    },
    {
        "file": N32_TU,
        "arch": "sm_90a",
        "kernel": r"GemmUniversal",
        "require": {
            "wgmma m64n32k16 BF16->FP32 (HGMMA)": r"\bHGMMA\.64x32x16\.F32\.BF16\b",
            "TMA tensor load (UTMALDG)": r"\bUTMALDG\b",
            "TMA tensor store (UTMASTG)": r"\bUTMASTG\b",
            "RNE float->BF16 pack (F2FP.BF16.F32.PACK_AB)": r"\bF2FP\.BF16\.F32\.PACK_AB\b",
        },
        "forbid": {
            **NO_LOCAL,
            "another wgmma shape": r"\bHGMMA\.(?!64x32x16\.F32\.BF16\b)\S+",
            "mma.sync (HMMA)": r"\bHMMA\b",
        },
    },
    {
        "file": "wgmma_gemm_fwd_bf16.cu",
        "arch": "sm_90a",
        "kernel": r"GemmUniversal",
        "require": {"RNE float->BF16 pack (F2FP.BF16.F32.PACK_AB)": r"\bF2FP\.BF16\.F32\.PACK_AB\b"},
        "forbid": {},
    },
    {
        "file": "det_gemm.cu",
        "arch": "sm_90a",
        "kernel": r"mma_gemm_kernel|fp32_gemm_kernel",
        "require": {},
        "forbid": NO_LOCAL,
    },
    {
        "file": "det_gemm.cu",
        "arch": "sm_80",
        "kernel": r"mma_gemm_kernel",
        "require": {"mma.sync (HMMA)": r"\bHMMA\b"},
        "forbid": NO_LOCAL,
    },
    # attention: every compute kernel (attention_fwd.cu: the forward; attention_bwd.cu: dQ, dK/dV) on mma.sync m16n8k16
    # (BF16 in, FP32 accumulate) fed by ldmatrix and cp.async, no local memory; the sm_80 image of the 170 KB prefill
    # configuration <128, 4, 2> is a trap (never launched there)
    *[
        {
            "file": file,
            "arch": arch,
            "kernel": kern,
            "require": {
                "mma.sync m16n8k16 BF16->FP32 (HMMA.16816.F32.BF16)": r"\bHMMA\.16816\.F32\.BF16\b",
                "ldmatrix (LDSM.16.M88.4)": r"\bLDSM\.16\.M88\.4\b",
                "cp.async (LDGSTS)": r"\bLDGSTS\b",
            },
            "forbid": {**NO_LOCAL, **NO_FLOAT_ATOMIC},
        }
        for file, arch, kern in (
            ("attention_fwd.cu", "sm_90a", r"attention_fwd_kernel<"),
            ("attention_fwd.cu", "sm_80", r"attention_fwd_kernel<\d+, [14], 1>|attention_fwd_kernel<64, 4, 2>"),
            *[("attention_bwd.cu", arch, r"attention_bwd_dq_kernel<|attention_bwd_dkv_kernel<") for arch in ARCHS],
        )
    ],
    # the other attention kernels (the plans, the split-KV merge, the backward's prep): no local memory, no float atomic
    *[
        {"file": file, "arch": arch, "kernel": kern, "require": {}, "forbid": {**NO_LOCAL, **NO_FLOAT_ATOMIC}}
        for file, kern in (
            ("attention_plan.cu", r"attention_(plan|bwd_plan)_kernel"),
            ("attention_fwd.cu", r"attention_merge_kernel"),
            ("attention_bwd.cu", r"attention_bwd_prep_kernel"),
        )
        for arch in ARCHS
    ],
    # every kernel of every file: no floating-point atomic anywhere (a sum's order must never be the scheduler's);
    # the CUTLASS TUs (wgmma_gemm_*.cu) have no sm_80 image in this check
    *[
        {"file": files, "arch": arch, "kernel": r".", "require": {}, "forbid": NO_FLOAT_ATOMIC}
        for files, arch in (("*.cu", "sm_90a"), ("[!w]*.cu", "sm_80"))
    ],
]


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


def cutlass_include() -> str | None:
    """CUTLASS's include directory (WS1_CUTLASS_INCLUDE, else the nvidia-cutlass wheel's), or None."""
    cands = [os.environ["WS1_CUTLASS_INCLUDE"]] if os.environ.get("WS1_CUTLASS_INCLUDE") else []
    spec = importlib.util.find_spec("cutlass_library")
    cands += [
        os.path.join(loc, "source", "include") for loc in ((spec.submodule_search_locations or []) if spec else [])
    ]
    for c in cands:
        if (Path(c) / "cutlass" / "gemm" / "collective" / "collective_builder.hpp").is_file():
            return c
    return None


def cutlass_version() -> str:
    try:
        import importlib.metadata as md

        return md.version("nvidia-cutlass")
    except Exception:  # noqa: BLE001  (a headers folder given by WS1_CUTLASS_INCLUDE: no version)
        return "unknown"


def find_cuobjdump(nvcc: str | None = None) -> str | None:
    """cuobjdump next to nvcc, on PATH, or the copy Triton's wheel carries (found without importing triton)."""
    if os.environ.get("WS1_CUOBJDUMP") == "none":
        return None
    if nvcc and (Path(nvcc).parent / "cuobjdump").is_file():
        return str(Path(nvcc).parent / "cuobjdump")
    found = shutil.which("cuobjdump")
    if found:
        return found
    spec = importlib.util.find_spec("triton")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        cand = Path(loc) / "backends" / "nvidia" / "bin" / "cuobjdump"
        if cand.is_file():
            return str(cand)
    return None


def is_heavy(src: Path) -> bool:
    return fnmatch.fnmatch(src.name, HEAVY)


def parse_sass(text: str) -> dict[tuple[str, str], list[str]]:
    """cuobjdump --dump-sass -> {(arch, mangled kernel): [instruction text, ...]}."""
    out: dict[tuple[str, str], list[str]] = {}
    arch, cur = None, None
    for line in text.splitlines():
        if m := re.match(r"\s*arch = (sm_\w+)", line):
            arch, cur = m.group(1), None
        elif m := re.match(r"\s*Function : (\S+)", line):
            cur = out.setdefault((arch, m.group(1)), [])
        elif cur is not None and (m := re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)):
            cur.append(m.group(1))
    return out


def sass_problems(
    file: str, kernels: list[dict], sass: dict[tuple[str, str], list[str]] | None, table: list[dict] | None = None
) -> tuple[list[str], list[dict]]:
    """Check `file`'s SASS against the table; returns (problems, per-kernel facts)."""
    rows = [
        r
        for r in (SASS_EXPECT if table is None else table)
        if fnmatch.fnmatch(file, r["file"]) and file not in r.get("except", ())
    ]
    problems, facts = [], []
    if not rows:
        return problems, facts
    if sass is None:
        return [f"{file}: SASS expectations cannot be checked: no cuobjdump (CUDA_HOME, PATH, triton's wheel)"], facts
    names = {k["kernel"]: k.get("name", k["kernel"]) for k in kernels}
    for row in rows:
        sel = [
            (arch, mangled)
            for (arch, mangled) in sass
            if arch == row["arch"] and re.search(row["kernel"], names.get(mangled, mangled))
        ]
        if not sel:
            problems.append(f"{file}: no {row['arch']} kernel matching /{row['kernel']}/ in the SASS")
            continue
        for arch, mangled in sel:
            text = "\n".join(sass[(arch, mangled)])
            short = names.get(mangled, mangled)[:90]
            fact = {"file": file, "arch": arch, "kernel": short, "instructions": len(sass[(arch, mangled)])}
            for label, rx in row["require"].items():
                n = len(re.findall(rx, text))
                fact[label] = n
                if n == 0:
                    problems.append(f"{file}: {short} ({arch}) lacks {label}")
            for label, rx in row["forbid"].items():
                n = len(re.findall(rx, text))
                fact[label] = n
                if n:
                    problems.append(f"{file}: {short} ({arch}) has {n} x {label}")
            facts.append(fact)
    return problems, facts


def sass_counts(sass: dict[tuple[str, str], list[str]]) -> dict[str, dict[str, int]]:
    """Per kernel: counts of the instruction classes the docs quote (HGMMA, UTMALDG, UTMASTG, HMMA, LDL/STL)."""
    classes = {
        "HGMMA": r"\bHGMMA\.",
        "UTMALDG": r"\bUTMALDG\b",
        "UTMASTG": r"\bUTMASTG\b",
        "HMMA": r"\bHMMA\.",
        "LDL/STL": NO_LOCAL["local memory (LDL/STL)"],
        "F2FP.BF16": r"\bF2FP\.BF16",
    }
    out = {}
    for (arch, name), ins in sass.items():
        text = "\n".join(ins)
        out[f"{arch} {name}"] = {
            "instructions": len(ins),
            **{c: n for c, rx in classes.items() if (n := len(re.findall(rx, text)))},
        }
    return out


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def parse_ptxas(text: str) -> list[dict]:
    """ptxas -v lines -> one record per (kernel, arch)."""
    out: list[dict] = []
    cur: dict | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            cur = {
                "kernel": m.group(1),
                "arch": m.group(2),
                "registers": None,
                "spill_stores": None,
                "spill_loads": None,
                "stack_frame": None,
                "smem": 0,
                "barriers": 0,
            }
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


def flags_for(src: Path) -> list[str]:
    if not is_heavy(src):
        return list(FLAGS)
    inc = cutlass_include()
    base = [f for f in FLAGS if f not in GENCODE]
    return [*base, "-gencode", "arch=compute_90a,code=sm_90a", "-DNDEBUG", *(["-isystem", inc] if inc else [])]


def cache_key(nvcc: str, src: Path, cmd: list[str]) -> str:
    h = hashlib.sha256()
    h.update(" ".join(cmd).encode())
    h.update(subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout.encode())
    h.update(cutlass_version().encode())
    for f in local_deps(src):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:24]


def local_deps(src: Path) -> list[Path]:
    """The file and every csrc/ header it includes, transitively (`#include "x"`; other headers are the
    toolkit's and CUTLASS's, whose versions are in the key): another file's edit does not void this one's entry."""
    seen: dict[str, Path] = {}
    todo = [src]
    while todo:
        f = todo.pop()
        if f.name in seen or not f.is_file():
            continue
        seen[f.name] = f
        for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', f.read_text(errors="replace"), re.M):
            todo.append(src.parent / inc)
    return [seen[n] for n in sorted(seen)]


def compile_one(nvcc: str, src: Path, extra: list[str] | None = None, use_cache: bool = True) -> dict:
    """Compile one .cu (device-only); returns {file, ok, seconds, log, kernels, archs, sass, cached}."""
    flags = flags_for(src)
    archs = ["sm_90a"] if is_heavy(src) else list(ARCHS)
    if is_heavy(src) and cutlass_include() is None:
        return {
            "file": src.name,
            "ok": False,
            "seconds": 0.0,
            "archs": archs,
            "kernels": [],
            "sass": None,
            "cached": False,
            "log": "no CUTLASS headers: pip install --no-deps -r requirements/cutlass.txt (or set WS1_CUTLASS_INCLUDE)",
        }
    cmd_sig = [*flags, *(extra or []), "-I", "<csrc>", "-c", src.name]
    key = cache_key(nvcc, src, cmd_sig)
    cpath = CACHE / f"{src.stem}-{key}.json"
    if use_cache and cpath.is_file():
        try:
            rec = json.loads(cpath.read_text())
            rec["cached"] = True
            return rec
        except ValueError:
            pass
    cuobjdump = find_cuobjdump(nvcc)
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "out.o"
        cmd = [nvcc, *flags, *(extra or []), "-I", str(src.parent), "-c", str(src), "-o", str(obj)]
        t0 = time.monotonic()
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        dt = time.monotonic() - t0
        sass = None
        if res.returncode == 0 and cuobjdump:
            dump = subprocess.run([cuobjdump, "--dump-sass", str(obj)], capture_output=True, text=True, check=False)
            if dump.returncode == 0:
                sass = {f"{a}\t{k}": v for (a, k), v in parse_sass(dump.stdout).items()}
    log = res.stdout + res.stderr
    rec = {
        "file": src.name,
        "ok": res.returncode == 0,
        "seconds": round(dt, 2),
        "log": log,
        "kernels": parse_ptxas(log),
        "archs": archs,
        "sass": sass,
        "cached": False,
    }
    if rec["ok"] and use_cache:
        CACHE.mkdir(parents=True, exist_ok=True)
        cpath.write_text(json.dumps(rec))
    return rec


def manifest_sources() -> dict[str, tuple[str, str]]:
    """node -> (op name, source path) of the cuda_bf16 kernels the manifest declares."""
    nodes = json.loads((ROOT / "contracts" / "ws1_manifest.json").read_text())["nodes"]
    out = {}
    for node, spec in nodes.items():
        decl = (spec.get("kernels") or {}).get("cuda_bf16")
        if decl:
            out[node] = (decl["kernel_id"].split("::", 1)[1], decl["source"])
    return out


def entry_problems(
    declared: dict[str, tuple[str, str]], root: Path = ROOT, registration: Path = REGISTRATION
) -> list[str]:
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


def host_only_problems(csrc: Path = CSRC) -> list[str]:
    """A HOST_ONLY file must exist and hold no kernel: the device-only pass never compiles it, so a `__global__` or a
    launch (`<<<`) there would escape every check here (comments aside)."""
    problems = []
    for name in HOST_ONLY:
        path = csrc / name
        if not path.is_file():
            problems.append(f"{name}: listed in HOST_ONLY but missing")
            continue
        code = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.S)
        for what, rx in (("defines a kernel (__global__)", r"__global__"), ("launches a kernel (<<<)", r"<<<")):
            if re.search(rx, code):
                problems.append(f"{name}: a host-only file {what}; the device-only pass skips it (HOST_ONLY)")
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
                problems.append(
                    f"{r['file']}: no resource report parsed for {k.get('name', k['kernel'])} ({k['arch']})"
                )
            elif k["spill_stores"] or k["spill_loads"]:
                problems.append(
                    f"{r['file']}: {k.get('name', k['kernel'])} spills on {k['arch']} "
                    f"({k['spill_stores']} B stores, {k['spill_loads']} B loads, {k['registers']} registers)"
                )
        want = set(r.get("archs") or ARCHS)
        for kern, archs in by_kernel.items():
            if want - archs:
                problems.append(f"{r['file']}: kernel {kern} has no {sorted(want - archs)} image")
        if not r["kernels"]:
            problems.append(f"{r['file']}: compiled no kernel (explicit instantiations missing?)")
        sass = r.get("sass")
        sass_t = None if sass is None else {tuple(k.split("\t", 1)): v for k, v in sass.items()}
        sp, facts = sass_problems(r["file"], r["kernels"], sass_t)
        r["sass_facts"] = facts
        problems += sp
    return problems + entry_problems(declared)


def table(results: list[dict]) -> str:
    lines = [
        "| file | kernel | arch | registers | spill stores (B) | spill loads (B) | stack (B) | smem (B) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for k in r["kernels"]:
            lines.append(
                f"| {r['file']} | `{k.get('name', k['kernel'])}` | {k['arch']} | {k['registers']} | "
                f"{k['spill_stores']} | {k['spill_loads']} | {k['stack_frame']} | {k['smem']} |"
            )
    return "\n".join(lines) + "\n"


def selected(subset: str) -> list[Path]:
    """The csrc/*.cu files of a subset: "all", or "ci" (every light file + CI_HEAVY); never the HOST_ONLY ones."""
    srcs = sorted(s for s in CSRC.glob("*.cu") if s.name not in HOST_ONLY)
    if subset == "ci":
        srcs = [s for s in srcs if not is_heavy(s) or s.name in CI_HEAVY]
    # heavy first: the longest jobs start at once
    return sorted(srcs, key=lambda s: (not is_heavy(s), s.name))


def sass_table(results: list[dict]) -> str:
    facts = [f for r in results for f in r.get("sass_facts", [])]
    if not facts:
        return "(no SASS expectation applies)\n"
    lines = ["| file | arch | kernel | instructions | checks |", "|---|---|---|---|---|"]
    for f in facts:
        checks = "; ".join(f"{k}: {v}" for k, v in f.items() if k not in ("file", "arch", "kernel", "instructions"))
        lines.append(f"| {f['file']} | {f['arch']} | `{f['kernel']}` | {f['instructions']} | {checks} |")
    return "\n".join(lines) + "\n"


def run(
    out: Path | None,
    jobs: int,
    sources: list[Path] | None = None,
    extra: list[str] | None = None,
    subset: str = "all",
    use_cache: bool = True,
) -> tuple[int, dict]:
    nvcc = find_nvcc()
    if nvcc is None:
        print(
            "compile_check: no nvcc found (CUDA_HOME, PATH, /usr/local/cuda*): the CUDA kernels cannot be compiled here"
        )
        return 2, {}
    srcs = sources if sources is not None else selected(subset)
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda s: compile_one(nvcc, s, extra, use_cache and sources is None), srcs))
    names = demangle(sorted({k["kernel"] for r in results for k in r["kernels"]}))
    for r in results:
        for k in r["kernels"]:
            k["name"] = names.get(k["kernel"], k["kernel"])
    problems = check(results, manifest_sources() if sources is None else {}) + (
        host_only_problems() if sources is None else []
    )
    version = (
        subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout.strip().splitlines()
    )
    sass_all = {}
    for r in results:
        if r.get("sass"):
            counts = sass_counts({tuple(k.split("\t", 1)): v for k, v in r["sass"].items()})
            sass_all[r["file"]] = {
                names.get(k.split(" ", 1)[1], k)[:120] + f" [{k.split(' ', 1)[0]}]": v for k, v in counts.items()
            }
    report = {
        "nvcc": nvcc,
        "nvcc_version": version[-1] if version else "",
        "archs": list(ARCHS),
        "flags": FLAGS + (extra or []),
        "heavy_flags": flags_for(CSRC / "wgmma_gemm_x.cu"),
        "subset": subset,
        "cutlass": {"include": cutlass_include(), "version": cutlass_version()},
        "cuobjdump": find_cuobjdump(nvcc),
        "wall_seconds": round(time.monotonic() - t0, 1),
        "compile_seconds": {r["file"]: r["seconds"] for r in results},
        "cached": sorted(r["file"] for r in results if r.get("cached")),
        "sass": sass_all,
        "files": [{k: v for k, v in r.items() if k not in ("log", "sass")} for r in results],
        "problems": problems,
        "verdict": "green" if not problems else "red",
        "note": "compiled and resource-checked only: nothing here executed a kernel",
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "cuda_resources.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "cuda_resources.md").write_text(
            f"# ws1_cuda resource report ({report['nvcc_version']})\n\nverdict: {report['verdict']}; "
            f"{sum(len(r['kernels']) for r in results)} kernel images in {report['wall_seconds']} s\n\n"
            + table(results)
            + "\n## SASS expectations (cuobjdump)\n\n"
            + sass_table(results)
            + ("\n## Problems\n\n" + "\n".join(f"* {p}" for p in problems) + "\n" if problems else "")
        )
    return (0 if not problems else 1), report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "evidence" / "build")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--subset", choices=("all", "ci"), default="all", help="ci: the light files + two CUTLASS TUs")
    ap.add_argument(
        "--no-cache", action="store_true", help="recompile even what kernels-cuda/build/compile_check holds"
    )
    args = ap.parse_args(argv)
    rc, report = run(args.out, args.jobs, subset=args.subset, use_cache=not args.no_cache)
    if rc == 2:
        return 2
    files = report["files"]
    print(
        f"compile_check: {len(files)} files ({len(report['cached'])} from the cache), "
        f"{sum(len(f['kernels']) for f in files)} kernel images (sm_80, sm_90a; CUTLASS TUs sm_90a) "
        f"in {report['wall_seconds']} s -> {args.out / 'cuda_resources.json'}"
    )
    for p in report["problems"]:
        print(f"  RED: {p}")
    print(f"compile_check: {report['verdict']}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
