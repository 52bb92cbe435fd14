"""Build ws1-kernels-ascend (torch.ops.ws1_ascend.*) on an Atlas A2/A3 host with CANN and torch_npu.

Two steps, in one ``build_ext``:
1. CANN's ``bisheng -x asc --npu-arch=$WS1_NPU_ARCH`` (default dav-2201, Atlas A2/A3) compiles every
   ``csrc/*.asc`` (the kernels and their host launchers) into ``libws1_ascend_kernels.so``, linked against
   CANN's ``libascendcl`` and ``libruntime`` in ``$ASCEND_HOME_PATH/lib64`` (what the ``<<<>>>`` launches call;
   the libraries asc-devkit's CMake ASC module gives every kernel library), with ``--cce-auto-sync=on`` spelled
   out: the kernels' synchronization (and the emulator's hazard model) assumes the compiler's auto-sync;
2. torch_npu's ``NpuExtension`` compiles ``csrc/register_npu.cpp`` (TORCH_LIBRARY + PrivateUse1 + Meta) and
   links it against that library (rpath $ORIGIN; the library is copied next to the extension).

Minimum CANN: 8.3.RC1. ``bisheng -x asc --npu-arch=dav-…`` (the Ascend C language mode of the bisheng driver) is
the flow the Ascend C guides document from CANN 8.3.RC1 on; CANN 8.0-era toolkits compile Ascend C with
``bisheng -xcce --cce-soc-version=Ascend910B…`` and are not supported (docs/ascend.md, "Build requirements").

Fail closed: without CANN (ASCEND_HOME_PATH / bisheng) or torch_npu the build prints ONE line naming what
is missing and how to set it, and exits with status 2 — never a CPU build under the ascend name. The host
emulator build (CI, no CANN) is a separate package: kernels-ascend/emu.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
ARCH = os.environ.get("WS1_NPU_ARCH", "dav-2201")
LIBS = ("ascendcl", "runtime")
# the extension (register_npu.cpp) reads the SoC's core counts through PlatformAscendCManager, which needs CANN's
# tiling_api and platform libraries (asc-devkit docs/zh/api/Utils-API/平台信息获取/PlatformAscendCManager.md)
PLATFORM_LIBS = ("tiling_api", "platform")
HOW = (
    "run `source /usr/local/Ascend/ascend-toolkit/set_env.sh` (or export ASCEND_HOME_PATH=<CANN toolkit>/latest); "
    "WS1_NPU_ARCH selects the target (default dav-2201 = Atlas A2/A3)"
)


def _fail(what: str) -> None:
    print(f"ws1-kernels-ascend: cannot build: {what} — {HOW}", file=sys.stderr)
    sys.exit(2)


def _cann() -> tuple[str, str]:
    """(ASCEND_HOME_PATH, bisheng path) or exit with one line; the runtime libraries must be there too."""
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
    if not home:
        _fail("CANN not found (ASCEND_HOME_PATH is not set)")
    if not os.path.isdir(home):
        _fail(f"ASCEND_HOME_PATH={home} is not a directory")
    bisheng = shutil.which("bisheng") or os.path.join(home, "compiler", "ccec_compiler", "bin", "bisheng")
    if not os.path.isfile(bisheng):
        _fail(f"bisheng (CANN's Ascend C compiler) not found on PATH or under {home}/compiler/ccec_compiler/bin")
    for lib in LIBS:
        if not os.path.isfile(os.path.join(home, "lib64", f"lib{lib}.so")):
            _fail(f"lib{lib}.so not found in {home}/lib64 (the CANN runtime the kernel launches link against)")
    for lib in PLATFORM_LIBS:
        if not any(os.path.isfile(os.path.join(home, "lib64", f"lib{lib}.{x}")) for x in ("so", "a")):
            _fail(
                f"lib{lib}.so / .a not found in {home}/lib64 (PlatformAscendCManager, "
                "which sizes the launches from the SoC's core counts)"
            )
    return home, bisheng


def _extension():
    if any(a in sys.argv for a in ("egg_info", "dist_info", "--version", "--name")):
        return [], {}
    home, bisheng = _cann()
    try:
        from torch.utils.cpp_extension import BuildExtension
        from torch_npu.utils.cpp_extension import NpuExtension
    except ImportError as e:
        _fail(f"torch_npu is not importable ({e}); install the torch_npu matching this torch and CANN")
    lib_dir = os.path.join(HERE, "build", "ws1_ascend_kernels")

    class Build(BuildExtension):
        def run(self):
            os.makedirs(lib_dir, exist_ok=True)
            lib = os.path.join(lib_dir, "libws1_ascend_kernels.so")
            sources = sorted(glob.glob(os.path.join(HERE, "csrc", "*.asc")))
            lib64 = os.path.join(home, "lib64")
            cmd = [
                bisheng,
                "-x",
                "asc",
                f"--npu-arch={ARCH}",
                "--cce-auto-sync=on",
                "-O2",
                "-std=c++17",
                "-fPIC",
                "-shared",
                "-I",
                os.path.join(HERE, "csrc"),
                "-I",
                os.path.join(home, "include"),
                *sources,
                "-L",
                lib64,
                f"-Wl,-rpath,{lib64}",
                *(f"-l{x}" for x in LIBS),
                "-o",
                lib,
            ]
            print(" ".join(cmd))
            if subprocess.call(cmd) != 0:
                print(
                    f"ws1-kernels-ascend: bisheng failed compiling csrc/*.asc for {ARCH} (needs CANN >= 8.3.RC1: "
                    "an 8.0-era bisheng knows -xcce --cce-soc-version, not -x asc --npu-arch)",
                    file=sys.stderr,
                )
                sys.exit(1)
            super().run()
            for ext in self.extensions:  # the kernel library next to the extension that loads it ($ORIGIN)
                shutil.copy2(lib, os.path.dirname(self.get_ext_fullpath(ext.name)))

    ext = NpuExtension(
        name="ws1_kernels_ascend._C",
        sources=["csrc/register_npu.cpp"],
        include_dirs=[os.path.join(HERE, "csrc"), os.path.join(home, "include")],
        library_dirs=[lib_dir, os.path.join(home, "lib64")],
        libraries=["ws1_ascend_kernels", *LIBS, *PLATFORM_LIBS],
        extra_compile_args=["-O2", "-std=c++17"],
        extra_link_args=["-Wl,-rpath,$ORIGIN", f"-Wl,-rpath,{os.path.join(home, 'lib64')}"],
    )
    return [ext], {"build_ext": Build}


ext_modules, cmdclass = _extension()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
