"""Compile kernels-ascend's Ascend C against CANN's real API headers (a checkout of the public asc-devkit), on a
host without CANN: as far as a host C++ compiler allows, and saying exactly where that stops.

    python kernels-ascend/tools/asc_compile_check.py /path/to/asc-devkit [--arch dav-2201] [--json]
           [--cxx g++|clang++-14] [--jobs 2] [--kernels DIR] [--no-probe] [--keep]

What it builds (docs/ascend.md, "Compile check against CANN's asc-devkit", has the report of a run):
* every kernel translation unit ``csrc/*.asc``, compiled to an object for each core type its entry points
  declare (``KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY)`` -> AIV, ``..._AIC_ONLY`` -> AIC, MIX -> both);
* every kernel header ``csrc/*.h`` on its own, for AIV and AIC (syntax only: nothing is instantiated);
* ``asc_probe_calls.cpp``: each API call exactly as the kernels write it, and the declaration it must resolve
  to, compiled against the real headers AND against WS1's emulator (kernels-ascend/emu/include);
* ``asc_probe_params.cpp``, built and run against both: where positional brace-initializers of the
  parameter structs land (constructor order in CANN, member order in the emulator).

How (asc-devkit's own host path, tests/api/basic_api/ascendc_header_checker and the UT build of
tests/api/basic_api/CMakeLists.txt): ``-x c++ -std=c++17 -DASCENDC_CPU_DEBUG=1 -D__NPU_ARCH__=2201
-D__DAV_C220__ -D__DAV_C220_VEC__ -D__DAV_VEC__`` (AIV) or ``... -D__DAV_C220_CUBE__ -D__DAV_CUBE__`` (AIC),
the include directories of asc-devkit's ``tikcfw_headers`` target. What is NOT the real thing, and is said in
every report: (1) CANN's tikicpulib headers are replaced by WS1's stub (asc_host_stub.py: intrinsics accept
anything, so nothing below the API's implementation templates is checked); (2) ``kernel_tiling.h`` is generated
from asc-devkit's tiling-data headers by our own converter; (3) the host launchers ``ws1_launch_*`` are compiled
through their ``WS1_ASCEND_EMU`` form (a plain call; a host compiler cannot parse bisheng's ``<<<...>>>``), with
a do-nothing ``ws1emu::launch`` / ``launch_mix``; (4) a unit that fails on ``AscendC::bfloat16_t`` is compiled
once more with ``namespace AscendC { using ::bfloat16_t; }`` to show what lies behind that error — reported
apart, never counted as compiled. Names that resolve to the HOST's system headers (INFINITY from math.h, std::
from libstdc++) are listed: a device compile must find them elsewhere.

Diagnostics are classified by where they point: ``ours`` (kernels-ascend), ``api`` (inside asc-devkit, reached
from our call: read it), ``host_stub`` (a gap of the stub: a limit of this check), ``host`` (system headers).
A narrowing conversion in OUR braces is counted as an error even where g++ only warns: bisheng is clang-based.

Exit: 0 every unit and probe compiled (and params agree); 1 anything failed; 2 bad input (no such path, not an
asc-devkit checkout, unsupported --arch, no compiler) with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import asc_host_stub  # noqa: E402

PROBE_CALLS = HERE / "asc_probe_calls.cpp"
PROBE_PARAMS = HERE / "asc_probe_params.cpp"

# --arch -> __NPU_ARCH__ and the per-core defines of asc-devkit's UT build (tests/api/basic_api/CMakeLists.txt,
# product ascend910B1_AIV / ascend910B1_AIC); the implementation directory whose intrinsics the stub covers.
ARCHS = {
    "dav-2201": {
        "npu_arch": "2201",
        "impl_dir": "impl/basic_api/dav_c220",
        "cores": {
            "aiv": ["-D__DAV_C220__", "-D__DAV_C220_VEC__", "-D__DAV_VEC__"],
            "aic": ["-D__DAV_C220__", "-D__DAV_C220_CUBE__", "-D__DAV_CUBE__"],
        },
    },
}
# asc-devkit's tikcfw_headers include directories (impl/basic_api/CMakeLists.txt), relative to the checkout
INCLUDE_DIRS = [
    ".",
    "impl",
    "impl/basic_api",
    "impl/basic_api/reg_compute",
    "impl/simt_api",
    "impl/c_api",
    "include",
    "include/basic_api",
    "include/simt_api",
    "include/simt_api/cpp",
    "include/basic_api/reg_compute",
    "include/c_api",
]
# what makes a directory an asc-devkit checkout for this tool
MARKERS = [
    "include/kernel_operator.h",
    "include/basic_api/kernel_tpipe.h",
    "impl/utils/sys_macros.h",
    "impl/basic_api/utils/kernel_utils_macros.h",
    "include/adv_api",
]

SHIM_BF16 = {
    "name": "AscendC::bfloat16_t -> ::bfloat16_t",
    "code": "namespace AscendC { using ::bfloat16_t; }",
    "trigger": re.compile(
        r"bfloat16_t.{0,3} is not a member of .{0,3}AscendC|no (?:type|member) named "
        r"'bfloat16_t' in namespace 'AscendC'"
    ),
}

PRELUDE = """\
// asc_compile_check.py prelude (WS1's, not CANN's): the stub first, as asc-devkit's CPU-debug headers include it
#include <cstdint>
#include "stub_def.h"
// the host launchers through their WS1_ASCEND_EMU form: a host compiler cannot parse bisheng's <<<...>>>
#define WS1_ASCEND_EMU 1
namespace ws1emu {
template <class... A> inline void launch(A&&...) {}
template <class... A> inline void launch_mix(A&&...) {}   // the mixed AIC + AIV kernels' launcher (attention)
}
"""


def die(msg: str) -> None:
    print(f"asc_compile_check: {msg}", file=sys.stderr)
    sys.exit(2)


# ---- diagnostics -------------------------------------------------------------------------------------------
_DIAG = re.compile(
    r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?:(?P<kind>fatal error|error|warning|note): )?"
    r"(?P<msg>.*)$"
)
_UNDECLARED = re.compile(
    r"was not declared in this scope|there are no arguments to|has not been declared|"
    r"does not name a type|use of undeclared identifier|unknown type name"
)
_NARROWING = re.compile(r"narrowing conversion|cannot be narrowed|-Wc\+\+11-narrowing|-Wnarrowing")


@dataclass
class Diag:
    file: str
    line: int
    kind: str
    msg: str
    context: list = field(default_factory=list)  # (file, line, text) of the instantiation chain / notes
    cls: str = ""
    site: str = ""  # the nearest location in our files of the chain that led here

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "kind": self.kind,
            "message": self.msg,
            "class": self.cls,
            "our_site": self.site,
        }


def parse_diags(text: str) -> list[Diag]:
    out: list[Diag] = []
    pending: list = []
    for raw in text.splitlines():
        m = _DIAG.match(raw)
        if not m:
            continue
        kind = m["kind"]
        loc = (m["file"], int(m["line"]), m["msg"].strip())
        if kind in ("error", "fatal error", "warning"):
            out.append(
                Diag(m["file"], int(m["line"]), "error" if kind == "fatal error" else kind, m["msg"].strip(), pending)
            )
            pending = []
        elif kind == "note" and out:
            out[-1].context.append(loc)  # clang's instantiation notes follow the error; gcc's candidates too
        else:
            pending.append(loc)  # gcc's "required from" chain precedes the error
    return out


class Classifier:
    def __init__(self, ours: list[Path], asc: Path, stub: Path):
        self.ours = [str(p.resolve()) for p in ours]
        self.asc = str(asc.resolve())
        self.stub = str(stub.resolve())

    def _under(self, f: str, roots) -> bool:
        p = os.path.realpath(f)
        return any(p == r or p.startswith(r + os.sep) for r in roots)

    def is_ours(self, f: str) -> bool:
        return self._under(f, self.ours)

    def classify(self, d: Diag) -> None:
        for f, line, _ in d.context:
            if self.is_ours(f):
                d.site = f"{short(f)}:{line}"
                break
        if self._under(d.file, [self.stub]):
            d.cls = "host_stub"
        elif self.is_ours(d.file):
            d.cls = "ours"
            d.site = d.site or f"{short(d.file)}:{d.line}"
        elif self._under(d.file, [self.asc]):
            d.cls = "host_stub" if _UNDECLARED.search(d.msg) else "api"
        else:
            d.cls = "host"
        if d.kind == "warning" and d.cls == "ours" and _NARROWING.search(d.msg):
            d.kind = "error"  # bisheng (clang) rejects narrowing in a braced initializer
            d.msg += " [an error under bisheng: clang rejects narrowing in braces]"


_SHORT: dict = {}


def short(f: str) -> str:
    p = os.path.realpath(f)
    for prefix, name in _SHORT.items():
        if p.startswith(prefix + os.sep):
            return name + p[len(prefix) :]
    return p


# ---- the build -----------------------------------------------------------------------------------------------
@dataclass
class Unit:
    name: str  # e.g. csrc/attention.asc
    kind: str  # kernel | header
    core: str  # aiv | aic
    source: Path
    status: str = ""
    diags: list = field(default_factory=list)
    shim: dict | None = None
    note: str = ""

    def errors(self) -> list[Diag]:
        return [d for d in self.diags if d.kind == "error"]

    def as_dict(self, first: int) -> dict:
        errs = self.errors()
        warns = [d for d in self.diags if d.kind == "warning" and d.cls == "ours"]
        api_warns, seen = [], set()  # warnings inside asc-devkit that one of our calls instantiated
        for d in self.diags:
            if d.kind == "warning" and d.cls == "api" and d.site and (os.path.realpath(d.file), d.line) not in seen:
                seen.add((os.path.realpath(d.file), d.line))
                api_warns.append(d.as_dict())
        return {
            "unit": self.name,
            "kind": self.kind,
            "core": self.core,
            "status": self.status,
            "n_errors": len(errs),
            "errors_by_class": count_by(errs),
            "errors": [e.as_dict() for e in errs[:first]],
            "warnings_ours": [w.as_dict() for w in warns[:first]],
            "warnings_api": api_warns[:first],
            "with_shim": self.shim,
            "note": self.note,
        }


def count_by(diags) -> dict:
    out: dict = {}
    for d in diags:
        out[d.cls] = out.get(d.cls, 0) + 1
    return out


class Builder:
    def __init__(self, cxx: str, asc: Path, arch: dict, work: Path, csrc: Path, classifier: Classifier):
        self.cxx, self.asc, self.arch, self.work, self.csrc, self.cls = cxx, asc, arch, work, csrc, classifier
        self.clang = "clang" in compiler_version(cxx).lower()
        self.stub = work / "stub"

    def real_flags(self, core: str) -> list[str]:
        flags = [
            "-x",
            "c++",
            "-std=c++17",
            f"-D__NPU_ARCH__={self.arch['npu_arch']}",
            "-DASCENDC_CPU_DEBUG=1",
            *self.arch["cores"][core],
            "-I",
            str(self.stub),
            "-I",
            str(self.csrc),
        ]
        for d in INCLUDE_DIRS:
            flags += ["-I", str(self.asc / d)]
        return flags + self.limit(50)

    def limit(self, n: int) -> list[str]:
        """error limit (0: none); clang: narrowing in asc-devkit's CPU-debug check code is a warning, as in g++"""
        return [f"-ferror-limit={n}", "-Wno-error=c++11-narrowing"] if self.clang else [f"-fmax-errors={n}"]

    def run(self, cmd: list[str]) -> str:
        r = subprocess.run(cmd, capture_output=True, text=True)
        return r.stdout + r.stderr

    def compile_unit(self, u: Unit) -> None:
        tag = re.sub(r"\W", "_", f"{u.name}_{u.core}")
        prelude = self.work / "prelude.h"
        if u.kind == "kernel":
            src, mode = u.source, ["-c", "-o", str(self.work / f"{tag}.o")]
        else:
            src = self.work / f"{tag}.cpp"
            src.write_text(f'#include "{u.source.name}"\n')
            mode = ["-fsyntax-only"]
        out = self.run([self.cxx, *self.real_flags(u.core), "-include", str(prelude), *mode, str(src)])
        u.diags = self.diags(out)
        u.status = "failed" if u.errors() else "compiled"
        if u.errors() and any(SHIM_BF16["trigger"].search(d.msg) for d in u.errors()):
            shim = self.work / "prelude_bf16.h"
            out2 = self.run([self.cxx, *self.real_flags(u.core), "-include", str(shim), *mode, str(src)])
            d2 = [d for d in self.diags(out2) if d.kind == "error"]
            u.shim = {
                "shim": SHIM_BF16["name"],
                "status": "failed" if d2 else "compiled",
                "errors": [d.as_dict() for d in d2[:5]],
                "errors_by_class": count_by(d2),
            }

    def diags(self, text: str) -> list[Diag]:
        ds = parse_diags(text)
        for d in ds:
            self.cls.classify(d)
        return ds

    def macro_origins(self, src: Path, core: str) -> dict:
        """name -> defining file of every macro visible at the end of the TU (the -E -dD output)."""
        out = self.run(
            [self.cxx, *self.real_flags(core), "-include", str(self.work / "prelude.h"), "-E", "-dD", str(src)]
        )
        where, cur = {}, ""
        for line in out.splitlines():
            if line.startswith("# ") and '"' in line:
                cur = line.split('"')[1]
            elif line.startswith("#define "):
                name = re.split(r"[\s(]", line[8:], maxsplit=1)[0]
                where[name] = cur
        return where


def compiler_version(cxx: str) -> str:
    try:
        r = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (r.stdout.splitlines() or [""])[0].strip()


# ---- what the kernels declare ----------------------------------------------------------------------------------
_TASK_TYPE = re.compile(r"KERNEL_TASK_TYPE_DEFAULT\s*\(\s*(\w+)\s*\)")
_HOST_ONLY = re.compile(r"#\s*include\s*[<\"](?:torch|ATen|c10|torch_npu)")


def kernel_meta_types(asc: Path) -> list[str]:
    text = (asc / "impl/basic_api/utils/kernel_utils_macros.h").read_text(errors="replace")
    m = re.search(r"enum\s+KernelMetaType[^{]*\{([^}]*)\}", text)
    return re.findall(r"\b(KERNEL_TYPE_\w+)", m.group(1)) if m else []


def cores_of(text: str, known: list[str]) -> tuple[list[str], list[str]]:
    """(cores to compile for, names that are not KernelMetaType enumerators)."""
    cores, bad = set(), []
    for t in _TASK_TYPE.findall(text):
        if known and t not in known:
            bad.append(t)
        if "AIV_ONLY" in t or "VECTORCORE" in t:
            cores.add("aiv")
        elif "AIC_ONLY" in t:
            cores.add("aic")
        else:
            cores |= {"aiv", "aic"}
    return (sorted(cores) or ["aiv", "aic"]), bad


# ---- the probes ----------------------------------------------------------------------------------------------
_PROBE = re.compile(r"^// PROBE (\d+) \| (.+?) \| (call|sig) \| (aiv|aic) \| (\S+)\s*$")


def probe_entries() -> list[dict]:
    entries = []
    for i, line in enumerate(PROBE_CALLS.read_text().splitlines(), 1):
        m = _PROBE.match(line)
        if m:
            if entries:
                entries[-1]["last"] = i - 1
            entries.append(
                {"id": m[1], "api": m[2], "form": m[3], "core": m[4], "token": m[5], "first": i, "last": 10**9}
            )
    return entries


def attribute(entries: list[dict], diags: list[Diag], probe: str) -> dict:
    """probe id -> its errors (by the probe line of the error, or of the nearest probe line in its chain)."""
    hits: dict = {}
    for d in diags:
        if d.kind != "error":
            continue
        lines = [(d.file, d.line)] + [(f, ln) for f, ln, _ in d.context]
        for f, ln in lines:
            if os.path.realpath(f) == probe:
                for e in entries:
                    if e["first"] <= ln <= e["last"]:
                        hits.setdefault(e["id"], []).append(d)
                        break
                break
    return hits


def run_probes(b: Builder, emu_include: Path) -> dict:
    entries = probe_entries()
    kernel_text = "\n".join(
        p.read_text(errors="replace")
        for p in sorted(b.csrc.iterdir())
        if p.suffix in (".asc", ".h") and not _HOST_ONLY.search(p.read_text(errors="replace"))
    )
    probe = os.path.realpath(PROBE_CALLS)
    real = {}
    for core in ("aiv", "aic"):
        out = b.run([b.cxx, *b.real_flags(core), *b.limit(0), "-fsyntax-only", str(PROBE_CALLS)])
        real[core] = attribute(entries, b.diags(out), probe)
    emu_flags = ["-x", "c++", "-std=c++17", "-I", str(emu_include)]
    out = b.run([b.cxx, *emu_flags, *b.limit(0), "-fsyntax-only", str(PROBE_CALLS)])
    emu = attribute(entries, b.diags(out), probe)
    rows = []
    for e in entries:
        r, m = real[e["core"]].get(e["id"], []), emu.get(e["id"], [])
        rows.append(
            {
                "id": e["id"],
                "api": e["api"],
                "form": e["form"],
                "core": e["core"],
                "used_by_kernels": re.search(r"(?<![\w:])" + e["token"] + r"(?!\w)", kernel_text) is not None,
                "real": "failed" if r else "ok",
                "emulator": "failed" if m else "ok",
                "real_errors": [d.as_dict() for d in r[:3]],
                "emulator_errors": [d.as_dict() for d in m[:3]],
            }
        )
    params = run_params(b, emu_flags)
    return {"probes": rows, "params": params}


def run_params(b: Builder, emu_flags: list[str]) -> dict:
    """Build and run asc_probe_params.cpp against both; compare field=value lines."""
    res = {}
    for side, flags in (("real", b.real_flags("aic")), ("emulator", emu_flags)):
        exe = b.work / f"params_{side}"
        out = b.run([b.cxx, *flags, str(PROBE_PARAMS), "-o", str(exe)])
        if not exe.exists():
            errs = [d.as_dict() for d in b.diags(out) if d.kind == "error"][:5]
            res[side] = {"status": "build failed", "errors": errs or [{"message": out.strip()[-400:]}]}
            continue
        r = subprocess.run([str(exe)], capture_output=True, text=True)
        vals = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        res[side] = {"status": "ran" if r.returncode == 0 else f"exit {r.returncode}", "values": vals}
    rows = []
    if all(res.get(s, {}).get("status") == "ran" for s in ("real", "emulator")):
        rv, ev = res["real"]["values"], res["emulator"]["values"]
        for key in sorted(set(rv) | set(ev), key=lambda k: (k.split(".")[0], k)):
            if rv.get(key) != ev.get(key):
                struct = key.split(".")[0]
                rows.append(
                    {"field": key, "real": rv.get(key), "emulator": ev.get(key), "positional": not struct.endswith("0")}
                )  # x0: a default-constructed struct
    return {
        "sides": {s: {k: v for k, v in d.items() if k != "values"} for s, d in res.items()},
        "values": {s: d.get("values", {}) for s, d in res.items()},
        "mismatches": rows,
    }


# ---- host-resolved names ---------------------------------------------------------------------------------------
def host_names(b: Builder, units: list[Unit], asc: Path, kernels: Path) -> dict:
    """Macros our kernel sources use that resolve to the host's system headers, and the std:: names they use."""
    srcs = [p for p in sorted(b.csrc.iterdir()) if p.suffix in (".asc", ".h") and not _HOST_ONLY.search(p.read_text())]
    origins: dict = {}
    seen = set()
    for u in units:  # one preprocessor pass per kernel TU, in its first core's configuration
        if u.kind == "kernel" and u.source not in seen:
            seen.add(u.source)
            origins.update(b.macro_origins(u.source, u.core))
    roots = [os.path.realpath(x) for x in (asc, kernels, b.stub, b.work)]
    macros, stdnames = {}, {}
    for p in srcs:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            for tok in set(re.findall(r"\b[A-Z_][A-Z0-9_]{2,}\b", code)):
                f = origins.get(tok)
                if f and f.startswith("/") and not any(os.path.realpath(f).startswith(r) for r in roots):
                    macros.setdefault(tok, {"defined_in": f, "used_at": []})["used_at"].append(f"{p.name}:{i}")
            for name in re.findall(r"\bstd::(\w+)", code):
                stdnames.setdefault(name, []).append(f"{p.name}:{i}")
    std_dir = asc / "include/utils/std"
    have = " ".join(f.read_text(errors="replace") for f in std_dir.glob("*.h")) if std_dir.is_dir() else ""
    std = {
        n: {"used_at": at, "asc_devkit_Std": bool(re.search(rf"\bstruct\s+{n}\b|\b{n}\s*=|\b{n}\s*\(", have))}
        for n, at in stdnames.items()
    }
    return {"macros": macros, "std": std}


# ---- main ----------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("asc_devkit", help="path of an asc-devkit checkout (CANN's Ascend C API: include/, impl/)")
    ap.add_argument("--arch", default="dav-2201")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout instead of the summary")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"), help="host C++ compiler (g++ or clang++)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--kernels", default=str(HERE.parent), help="the kernels-ascend directory (default: this one)")
    ap.add_argument("--no-probe", action="store_true", help="kernel units only (no API / params probes)")
    ap.add_argument("--errors", type=int, default=5, help="errors shown per unit")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and print its path")
    a = ap.parse_args(argv)

    asc = Path(a.asc_devkit)
    if not asc.exists():
        die(f"{asc}: no such path (pass the path of an asc-devkit checkout: include/, impl/)")
    missing = [m for m in MARKERS if not (asc / m).exists()]
    if not asc.is_dir() or missing:
        die(f"{asc} is not an asc-devkit checkout (missing {missing[0] if missing else 'a directory'})")
    if a.arch not in ARCHS:
        die(f"--arch {a.arch} is not supported (supported: {', '.join(ARCHS)}; the host stub covers dav-2201 only)")
    arch = ARCHS[a.arch]
    if not (asc / arch["impl_dir"]).is_dir():
        die(f"{asc} has no {arch['impl_dir']} (not an asc-devkit with {a.arch} support)")
    cxx = shutil.which(a.cxx)
    if not cxx:
        die(f"host C++ compiler {a.cxx!r} not found (--cxx, or CXX)")
    kernels = Path(a.kernels).resolve()
    csrc = kernels / "csrc"
    emu_include = kernels / "emu" / "include"
    if not csrc.is_dir() or not (emu_include / "kernel_operator.h").is_file():
        die(f"{kernels} is not a kernels-ascend directory (csrc/ and emu/include/kernel_operator.h)")
    asc = asc.resolve()
    _SHORT.update({str(HERE): "kernels-ascend/tools", str(asc): "asc-devkit", str(kernels): "kernels-ascend"})

    work = Path(tempfile.mkdtemp(prefix="asc_compile_check_"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the work directory is removed
    try:
        asc_host_stub.write(work / "stub", asc)
        _SHORT[str(work.resolve() / "stub")] = "<host stub>"
        (work / "prelude.h").write_text(PRELUDE)
        (work / "prelude_bf16.h").write_text(PRELUDE + SHIM_BF16["code"] + "\n")
        classifier = Classifier([kernels, HERE], asc, work / "stub")
        b = Builder(cxx, asc, arch, work, csrc, classifier)
        known = kernel_meta_types(asc)

        units, skipped, bad_types = [], [], []
        for p in sorted(csrc.iterdir()):
            text = p.read_text(errors="replace")
            if p.suffix == ".asc":
                cores, bad = cores_of(text, known)
                bad_types += [
                    f"csrc/{p.name}: KERNEL_TASK_TYPE_DEFAULT({t}) is not a KernelMetaType of asc-devkit" for t in bad
                ]
                units += [Unit(f"csrc/{p.name}", "kernel", c, p) for c in cores]
            elif p.suffix == ".h" and not _HOST_ONLY.search(text):
                units += [Unit(f"csrc/{p.name}", "header", c, p) for c in ("aiv", "aic")]
            elif p.suffix in (".h", ".cpp"):
                skipped.append(
                    {
                        "unit": f"csrc/{p.name}",
                        "why": "host code against torch / torch_npu headers "
                        "(setup.py builds it with torch_npu's NpuExtension, not bisheng): not a kernel unit",
                    }
                )
        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            list(pool.map(b.compile_unit, units))
            probe_fut = None if a.no_probe else pool.submit(run_probes, b, emu_include)
            names = host_names(b, units, asc, kernels)
            probes = probe_fut.result() if probe_fut else None

        report = build_report(a, asc, cxx, arch, units, skipped, bad_types, names, probes)
        if a.keep:
            report["work_dir"] = str(work)
        if a.json:
            print(json.dumps(report, indent=1))
        else:
            print_summary(report)
        return report["exit"]
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


def asc_version(asc: Path) -> str:
    v = asc / "version.cmake"
    m = re.search(r'set_cann_package\(\s*asc-devkit\s+VERSION\s+"([^"]+)"', v.read_text()) if v.is_file() else None
    return m.group(1) if m else "unknown"


def build_report(a, asc, cxx, arch, units, skipped, bad_types, names, probes) -> dict:
    failed_units = [u for u in units if u.status != "compiled"]
    failures = [f"{u.name} [{u.core}]" for u in failed_units] + bad_types
    if probes:
        # counted: a call form the kernels use that either side rejects, and a pinned declaration the real
        # headers reject (the signature table is then stale). Informational: forms no kernel uses yet, and
        # the emulator's pins (it adds a defaulted ws1emu::Where, takes scalars by value: by design).
        for r in probes["probes"]:
            if not r["used_by_kernels"]:
                continue
            if r["real"] != "ok":
                failures.append(f"probe {r['id']} {r['api']} ({r['form']}) against asc-devkit")
            if r["emulator"] != "ok" and r["form"] == "call":
                failures.append(f"probe {r['id']} {r['api']} (call) against the emulator")
        for side, s in probes["params"]["sides"].items():
            if s["status"] != "ran":
                failures.append(f"params probe against {side}: {s['status']}")
        failures += [
            f"params: {m['field']} real={m['real']} emulator={m['emulator']}"
            for m in probes["params"]["mismatches"]
            if m["positional"]
        ]
    return {
        "tool": "kernels-ascend/tools/asc_compile_check.py",
        "asc_devkit": {"path": str(asc), "version": asc_version(asc)},
        "arch": a.arch,
        "compiler": {"path": cxx, "version": compiler_version(cxx)},
        "mode": {
            "defines": [f"-D__NPU_ARCH__={arch['npu_arch']}", "-DASCENDC_CPU_DEBUG=1"],
            "cores": arch["cores"],
            "include_dirs": INCLUDE_DIRS,
            "std": "c++17",
        },
        "stand_ins": [
            "tikicpulib headers (stub_def.h, stub_fun.h, kernel_fp16.h, kernel_bf16.h, simt_stub.h): WS1's stub, "
            "intrinsics accept any arguments (asc_host_stub.py)",
            "kernel_tiling/kernel_tiling.h: generated from asc-devkit's *tilingdata.h by asc_host_stub.py",
            "host launchers: WS1_ASCEND_EMU form with a do-nothing ws1emu::launch / launch_mix "
            "(no <<<...>>> on a host compiler)",
            f"shim, reported apart, never counted: {SHIM_BF16['code']}",
        ],
        "units": [u.as_dict(a.errors) for u in units],
        "skipped": skipped,
        "kernel_type_errors": bad_types,
        "host_resolved": names,
        "probes": probes,
        "summary": {
            "units": len(units),
            "compiled": len(units) - len(failed_units),
            "failed": len(failed_units),
            "failures": failures,
        },
        "exit": 1 if failures else 0,
    }


def print_summary(r: dict) -> None:
    p = print
    api_warnings: dict = {}
    p(
        f"asc-devkit compile check: {r['asc_devkit']['path']} (asc-devkit {r['asc_devkit']['version']}), {r['arch']}, "
        f"{r['compiler']['version']}"
    )
    p(
        f"  mode: {' '.join(r['mode']['defines'])}; AIV {' '.join(r['mode']['cores']['aiv'])}; "
        f"AIC {' '.join(r['mode']['cores']['aic'])}"
    )
    for s in r["stand_ins"]:
        p(f"  stand-in: {s}")
    p("")
    for u in r["units"]:
        line = (
            f"  {u['unit']:<34} {u['kind']:<6} {u['core']}  "
            f"{u['status'].upper() if u['status'] != 'compiled' else 'compiled'}"
        )
        if u["n_errors"]:
            line += f"  {u['n_errors']} errors {u['errors_by_class']}"
        p(line)
        for e in u["errors"]:
            site = f" (from {e['our_site']})" if e["our_site"] and e["class"] != "ours" else ""
            p(f"      [{e['class']}] {short(e['file'])}:{e['line']}: {e['message'][:160]}{site}")
        for w in u["warnings_ours"]:
            p(f"      [warning, ours] {short(w['file'])}:{w['line']}: {w['message'][:160]}")
        for w in u["warnings_api"]:
            key = (short(w["file"]), w["line"], w["our_site"])
            api_warnings.setdefault(key, [w["message"], []])[1].append(f"{u['unit']} [{u['core']}]")
        if u["with_shim"]:
            s = u["with_shim"]
            p(f"      with shim ({s['shim']}): {s['status']}" + (f" {s['errors_by_class']}" if s["errors"] else ""))
            for e in s["errors"][:3]:
                p(f"        [{e['class']}] {short(e['file'])}:{e['line']}: {e['message'][:150]}")
    for s in r["skipped"]:
        p(f"  {s['unit']:<34} skipped: {s['why']}")
    if api_warnings:
        p("\n  warnings inside asc-devkit that our calls instantiate (read them; not counted):")
        for (f, line, site), (msg, where) in api_warnings.items():
            p(f"    {f}:{line}: {msg[:150]}\n      from {site}, in {len(where)} unit(s)")
    for t in r["kernel_type_errors"]:
        p(f"  {t}")
    h = r["host_resolved"]
    if h["macros"] or h["std"]:
        p("\n  resolved from the HOST's system headers (a device compile must provide them itself):")
        for n, m in sorted(h["macros"].items()):
            p(f"    {n}: {m['defined_in']} — used at {', '.join(m['used_at'][:6])}")
        for n, m in sorted(h["std"].items()):
            alt = " (asc-devkit has AscendC::Std::" + n + ")" if m["asc_devkit_Std"] else ""
            p(f"    std::{n}: host C++ library — used at {', '.join(m['used_at'][:6])}{alt}")
    if r["probes"]:
        pr = r["probes"]["probes"]
        p(
            f"\n  API probes (kernels-ascend/tools/asc_probe_calls.cpp): {len(pr)}; "
            f"asc-devkit ok {sum(x['real'] == 'ok' for x in pr)}, emulator ok {sum(x['emulator'] == 'ok' for x in pr)}"
        )
        for x in pr:
            if x["real"] != "ok" or x["emulator"] != "ok":
                used = "" if x["used_by_kernels"] else "  (not used by the kernels: informational)"
                if x["form"] == "sig" and x["real"] == "ok":
                    used = used or "  (emulator pin: informational)"
                p(f"    {x['id']} {x['api']} [{x['form']}]: asc-devkit {x['real']}, emulator {x['emulator']}{used}")
                for e in (x["real_errors"] + x["emulator_errors"])[: 1 if used else 2]:
                    p(f"        [{e['class']}] {short(e['file'])}:{e['line']}: {e['message'][:150]}")
        par = r["probes"]["params"]
        p("  params probe (asc_probe_params.cpp): " + ", ".join(f"{s} {v['status']}" for s, v in par["sides"].items()))
        if not par["mismatches"] and all(v["status"] == "ran" for v in par["sides"].values()):
            p("    every positional brace-initializer lands in the same field on both sides")
        for m in par["mismatches"]:
            tag = "POSITIONAL" if m["positional"] else "default value"
            p(f"    {tag}: {m['field']}: asc-devkit {m['real']}, emulator {m['emulator']}")
    s = r["summary"]
    p(f"\n  {s['compiled']}/{s['units']} units compiled; {len(s['failures'])} failure(s) -> exit {r['exit']}")
    for f in s["failures"]:
        p(f"    - {f}")


if __name__ == "__main__":
    sys.exit(main())
