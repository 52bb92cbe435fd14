"""On a host without CANN / torch_npu (this CI), the NPU package refuses clearly: the build prints one line
naming what is missing and how to set it and exits non-zero; the import raises naming torch_npu. Never a
silent CPU build or fallback under the ascend name."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)


def test_build_without_cann_is_one_line_and_nonzero():
    env = {k: v for k, v in os.environ.items() if k not in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")}
    env["PATH"] = "/usr/bin:/bin"  # no bisheng
    p = subprocess.run(
        [sys.executable, os.path.join(PKG, "setup.py"), "build_ext"],
        cwd=PKG,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    for needed in ("ASCEND_HOME_PATH", "set_env.sh", "WS1_NPU_ARCH", "dav-2201"):
        assert needed in lines[0]


def test_build_with_a_bogus_cann_names_the_missing_compiler(tmp_path):
    env = dict(os.environ, ASCEND_HOME_PATH=str(tmp_path), PATH="/usr/bin:/bin")
    p = subprocess.run(
        [sys.executable, os.path.join(PKG, "setup.py"), "build_ext"],
        cwd=PKG,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "bisheng" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_build_without_the_cann_runtime_libraries_names_them(tmp_path):
    bindir = tmp_path / "compiler" / "ccec_compiler" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "bisheng").write_text("#!/bin/sh\nexit 1\n")
    (bindir / "bisheng").chmod(0o755)
    env = dict(os.environ, ASCEND_HOME_PATH=str(tmp_path), PATH="/usr/bin:/bin")
    p = subprocess.run(
        [sys.executable, os.path.join(PKG, "setup.py"), "build_ext"],
        cwd=PKG,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "libascendcl.so" in p.stderr and "lib64" in p.stderr, p.stderr


def test_build_without_the_platform_libraries_names_them(tmp_path):
    # the runtime is there, PlatformAscendCManager's libraries (the SoC's core counts) are not: one line, exit 2
    bindir = tmp_path / "compiler" / "ccec_compiler" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "bisheng").write_text("#!/bin/sh\nexit 1\n")
    (bindir / "bisheng").chmod(0o755)
    (tmp_path / "lib64").mkdir()
    for lib in ("ascendcl", "runtime"):
        (tmp_path / "lib64" / f"lib{lib}.so").write_text("")
    env = dict(os.environ, ASCEND_HOME_PATH=str(tmp_path), PATH="/usr/bin:/bin")
    p = subprocess.run(
        [sys.executable, os.path.join(PKG, "setup.py"), "build_ext"],
        cwd=PKG,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "libtiling_api" in p.stderr and "PlatformAscendCManager" in p.stderr, p.stderr


def test_import_without_torch_npu_names_it():
    code = f"import sys; sys.path.insert(0, {os.path.join(PKG, 'src')!r}); import ws1_kernels_ascend"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "ws1_kernels_ascend needs torch_npu (and CANN)" in p.stderr
