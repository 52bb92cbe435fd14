"""kernels-ascend/tools/asc_compile_check.py without asc-devkit (CI cannot fetch it): it fails closed on bad input
(exit 2, one line), and its compile / classify / exit-code logic works on a tiny fake checkout whose
"API" is one function — a unit that calls it compiles (exit 0), one that calls an undeclared name fails with
the error pinned on our source (exit 1). The real run against asc-devkit is in docs/ascend.md."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "kernels-ascend" / "tools" / "asc_compile_check.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=300)


def one_line_exit_2(r: subprocess.CompletedProcess, words: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], r.stderr
    assert r.stdout == ""


def fake_checkout(root: Path) -> Path:
    """The files the tool requires of an asc-devkit checkout, with a one-function 'API'."""
    asc = root / "asc"
    for d in ("include/basic_api", "include/adv_api", "impl/utils", "impl/basic_api/utils", "impl/basic_api/dav_c220"):
        (asc / d).mkdir(parents=True, exist_ok=True)
    (asc / "include/kernel_operator.h").write_text(
        "#pragma once\n#define KERNEL_TASK_TYPE_DEFAULT(x)\n"
        "namespace AscendC { inline int Twice(int x) { return 2 * x; } }\n"
    )
    (asc / "include/basic_api/kernel_tpipe.h").write_text("#pragma once\n")
    (asc / "impl/utils/sys_macros.h").write_text("#pragma once\n")
    (asc / "impl/basic_api/utils/kernel_utils_macros.h").write_text(
        "enum KernelMetaType : unsigned char { KERNEL_TYPE_AIV_ONLY, KERNEL_TYPE_AIC_ONLY };\n"
    )
    return asc


def fake_kernels(root: Path, units: dict[str, str]) -> Path:
    k = root / "kernels"
    (k / "csrc").mkdir(parents=True)
    (k / "emu" / "include").mkdir(parents=True)
    (k / "emu" / "include" / "kernel_operator.h").write_text("#pragma once\n")
    for name, body in units.items():
        (k / "csrc" / name).write_text(body)
    return k


GOOD = (
    '#include "kernel_operator.h"\n'
    'extern "C" __global__ __aicore__ void good(int x) {\n'
    "  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n  (void)AscendC::Twice(x);\n}\n"
)
BAD = (
    '#include "kernel_operator.h"\n'
    'extern "C" __global__ __aicore__ void bad(int x) {\n'
    "  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);\n  (void)AscendC::Thrice(x);\n}\n"
)


def test_missing_path_fails_closed(tmp_path):
    one_line_exit_2(run(str(tmp_path / "nowhere")), "no such path")


def test_not_a_checkout_fails_closed(tmp_path):
    one_line_exit_2(run(str(tmp_path)), "is not an asc-devkit checkout")
    (tmp_path / "file").write_text("x")
    one_line_exit_2(run(str(tmp_path / "file")), "is not an asc-devkit checkout")


def test_unsupported_arch_and_missing_compiler_fail_closed(tmp_path):
    asc = fake_checkout(tmp_path)
    one_line_exit_2(run(str(asc), "--arch", "dav-3510"), "is not supported")
    one_line_exit_2(run(str(asc), "--cxx", str(tmp_path / "no-such-cxx")), "not found")
    one_line_exit_2(run(str(asc), "--kernels", str(tmp_path)), "is not a kernels-ascend directory")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host g++")
def test_compiles_classifies_and_exits_by_result(tmp_path):
    asc = fake_checkout(tmp_path)
    kernels = fake_kernels(tmp_path, {"good.asc": GOOD, "bad.asc": BAD})
    r = run(str(asc), "--kernels", str(kernels), "--no-probe", "--json", "--cxx", "g++")
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    units = {(u["unit"], u["core"]): u for u in rep["units"]}
    # the kernel type picks the core: AIV for good, AIC for bad, nothing else compiled
    assert set(units) == {("csrc/good.asc", "aiv"), ("csrc/bad.asc", "aic")}
    assert units[("csrc/good.asc", "aiv")]["status"] == "compiled"
    bad = units[("csrc/bad.asc", "aic")]
    assert bad["status"] == "failed" and bad["errors_by_class"].get("ours", 0) >= 1
    assert any("Thrice" in e["message"] and e["line"] == 4 for e in bad["errors"])
    assert rep["summary"]["failures"] == ["csrc/bad.asc [aic]"] and rep["exit"] == 1

    # without the bad unit everything compiles: exit 0; the human summary says so
    (kernels / "csrc" / "bad.asc").unlink()
    r = run(str(asc), "--kernels", str(kernels), "--no-probe", "--cxx", "g++")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1/1 units compiled; 0 failure(s) -> exit 0" in r.stdout


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host g++")
def test_unknown_kernel_type_is_a_failure(tmp_path):
    asc = fake_checkout(tmp_path)
    kernels = fake_kernels(tmp_path, {"odd.asc": GOOD.replace("KERNEL_TYPE_AIV_ONLY", "KERNEL_TYPE_AIV_ONLY_TYPO")})
    r = run(str(asc), "--kernels", str(kernels), "--no-probe", "--json", "--cxx", "g++")
    rep = json.loads(r.stdout)
    assert r.returncode == 1
    assert any("KERNEL_TYPE_AIV_ONLY_TYPO" in f for f in rep["summary"]["failures"])
