"""Build the ws1_cuda torch extension (torch.ops.ws1_cuda.*) for sm_80 (A100) and sm_90a (H100/H200).

Fails closed: a CPU-only torch or no nvcc is one line on stderr and exit status 2, never a silent skip
and never a wheel without its library. Build in the environment that holds the CUDA torch:

    bash ci/setup_cuda_build.sh            # .venv-cuda: torch 2.14.1 (CUDA 13) + this package, here, no GPU needed
    pip install --no-build-isolation --no-deps -e kernels-cuda   # on a CUDA host, into its Python

Numerics-critical flags (docs/cuda.md):
* ``-fmad=false``: nvcc never contracts a*b+c into an FMA on its own; every FMA is an explicit fmaf().
* no ``--use_fast_math``: IEEE division and square root, full-precision expf/logf.
* ``-gencode`` for exactly sm_80 and sm_90a (no PTX JIT for other archs: a GPU outside the list fails at
  launch with "no kernel image", which the entry points report — never a JIT-compiled variant).
  ``WS1_CUDA_ARCHS=90a`` builds one of them (a GPU host building for its own card: ci/gpu_check.sh).
* CUTLASS 3.x headers (PyPI ``nvidia-cutlass`` 4.2.0.0: ``cutlass_library/source/include``; or
  ``WS1_CUTLASS_INCLUDE``) for the sm_90a GEMM (csrc/wgmma_gemm*): included with ``-isystem`` (their own
  warnings are not ours) and ``-DNDEBUG`` (CUTLASS's device asserts off, as in its release builds; no
  kernel of ours asserts). With 90a among the archs and no headers the build stops with one line (exit 2);
  without 90a the GEMM TUs compile as stubs (``-DWS1_NO_SM90_GEMM``).
* warnings are errors (nvcc ``-Werror all-warnings``, g++ ``-Wall -Werror`` on the registration file).
  ``WS1_CUDA_WERROR=0`` drops the two ``-Werror`` (warnings stay visible): only for a host whose torch
  headers warn under this nvcc (ci/gpu_check.sh retries with it and keeps the strict build's failure red).
"""

import glob
import os
import sys

from setuptools import setup


def _fail(msg: str) -> None:
    sys.stderr.write(f"ws1-kernels-cuda: cannot build: {msg}\n")
    sys.exit(2)


try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
except ImportError as exc:  # pragma: no cover - depends on the environment
    _fail(
        f"torch is not importable here ({exc}); install a CUDA build of torch first and build with --no-build-isolation"
    )

if torch.version.cuda is None:
    _fail(
        f"torch {torch.__version__} is a CPU-only build; a CUDA build of torch is needed (bash ci/setup_cuda_build.sh)"
    )
if CUDA_HOME is None or not os.path.isfile(os.path.join(CUDA_HOME, "bin", "nvcc")):
    _fail("no nvcc: set CUDA_HOME to a CUDA toolkit (e.g. /usr/local/cuda-13.0) or put nvcc on PATH")

here = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCHS = "80,90a"
SUPPORTED = {"80", "90a"}  # the archs the kernels are written and resource-checked for (docs/cuda.md)


def _archs(spec: str) -> list[str]:
    """``WS1_CUDA_ARCHS`` ("80,90a", "90a", "sm_90a"): the -gencode list. A GPU host builds for its own arch
    alone (half the compile time); the default stays both. No PTX is embedded for any arch."""
    want = [
        a.strip().lower().removeprefix("sm_").removeprefix("sm") for a in spec.replace(" ", ",").split(",") if a.strip()
    ]
    bad = [a for a in want if a not in SUPPORTED]
    if not want or bad:
        _fail(
            f"WS1_CUDA_ARCHS={spec!r}: expected a comma list of {sorted(SUPPORTED)} (e.g. 90a), got {bad or 'nothing'}"
        )
    return [f for a in dict.fromkeys(want) for f in ("-gencode", f"arch=compute_{a},code=sm_{a}")]


def cutlass_include() -> str | None:
    """CUTLASS's include directory: WS1_CUTLASS_INCLUDE, else the nvidia-cutlass wheel's (found without
    importing cutlass_library, whose import needs packages the build does not)."""
    import importlib.util

    env = os.environ.get("WS1_CUTLASS_INCLUDE")
    cands = [env] if env else []
    spec = importlib.util.find_spec("cutlass_library")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        cands.append(os.path.join(loc, "source", "include"))
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "cutlass", "gemm", "collective", "collective_builder.hpp")):
            return c
    return None


ARCHS = _archs(os.environ.get("WS1_CUDA_ARCHS", DEFAULT_ARCHS))
SM90 = "arch=compute_90a,code=sm_90a" in ARCHS
CUTLASS = cutlass_include()
if SM90 and CUTLASS is None:
    _fail(
        "no CUTLASS headers for the sm_90a GEMM: "
        "pip install --no-deps nvidia-cutlass==4.2.0.0 (or set WS1_CUTLASS_INCLUDE)"
    )
GEMM_FLAGS = ["-isystem", CUTLASS, "-DNDEBUG"] if SM90 else ["-DWS1_NO_SM90_GEMM"]
STRICT = os.environ.get("WS1_CUDA_WERROR", "1") != "0"
sources = sorted(glob.glob(os.path.join("csrc", "*.cu"))) + [os.path.join("csrc", "ws1_cuda.cpp")]

setup(
    ext_modules=[
        CUDAExtension(
            name="ws1_kernels_cuda._C",
            sources=sources,
            include_dirs=[os.path.join(here, "csrc")],
            extra_compile_args={
                "cxx": ["-O3", "-std=c++20", "-Wall", *(["-Werror"] if STRICT else [])],
                "nvcc": [
                    "-O3",
                    "-std=c++20",
                    "-fmad=false",
                    *(["-Werror", "all-warnings"] if STRICT else []),
                    *GEMM_FLAGS,
                    *ARCHS,
                ],
            },
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
