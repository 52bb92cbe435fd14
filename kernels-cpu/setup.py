"""Build the ws1_cpu torch extension (torch.ops.ws1_cpu.*).

Every csrc/*.cpp is compiled as its own translation unit (ws1_isa_instances.h relies on that); a
kernel file registers its ops with TORCH_LIBRARY_FRAGMENT(ws1_cpu, m). One file per kernel, not per
node: nodes that share one arithmetic share one file (qk_norm in rms_norm.cpp, lm_head in gemm.cpp,
silu in activation.cpp, batch_invariant_logp in logprob.cpp); the GEMM's packing and micro-kernels
are separate files that register nothing. The table is in README.md. Numerics-critical flags:

* ``-ffp-contract=off``: GCC contracts a*b+c into an FMA by default (``-ffp-contract=fast``), and it
  may do so in one loop and not in its vectorized twin. Every FMA in these kernels is written
  explicitly (intrinsics or std::fma), so the bits are the ones the source says on every ISA path.
* no ``-ffast-math``: it licenses reassociation, which would change reduction orders.
* ISA-specific code is compiled per function inside ``#pragma GCC target`` regions
  (WS1_BEGIN_<ISA> in ws1_isa.h) and chosen at run time, so one wheel serves AVX-512, AVX2 and
  plain x86-64 hosts.

Build time is mostly the headers each unit parses: kernel files include the few torch headers
ws1_cpu.h names (never <torch/extension.h>), files that touch no tensor include none, and pybind11 is
only in module.cpp (README.md, "Build time").
"""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """Objects in build/temp, also under `pip install -e` (ci/setup_cpu.sh), so ninja recompiles only
    the units whose sources or headers changed. setuptools' editable build re-initializes build_ext
    with build_temp set to a new temporary directory on every install; a build_temp given through
    setup(options=...) or setup.cfg is not re-applied then (this class's command name is not
    "build_ext"), so it is set here. `--build-temp` on the command line still wins."""

    def initialize_options(self):
        super().initialize_options()
        self.build_temp = os.path.join(here, "build", "temp")


sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")))

setup(
    ext_modules=[
        CppExtension(
            name="ws1_kernels_cpu._C",
            sources=sources,
            include_dirs=[os.path.join(here, "csrc")],
            extra_compile_args=["-O3", "-fopenmp", "-ffp-contract=off", "-fno-fast-math", "-std=c++17"],
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
