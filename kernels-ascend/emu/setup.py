"""Build ws1-kernels-ascend-emu: the Ascend C kernels of ../csrc compiled by g++ against WS1's emulator of
the Ascend C API subset they use (include/kernel_operator.h), registered as torch.ops.ws1_ascend_emu.* on CPU.

One translation unit (csrc/register_emu.cpp includes every .asc). Numerics flags as kernels-cpu:
``-ffp-contract=off`` (no FMA the source does not write: the emulated vector instructions are one IEEE op
each) and no ``-ffast-math``. ``-O2``: the emulator is about logic, not speed (build ~1 min on 2 cores).
"""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
kernels = os.path.normpath(os.path.join(here, "..", "csrc"))

setup(
    ext_modules=[
        CppExtension(
            name="ws1_kernels_ascend_emu._C",
            sources=["csrc/register_emu.cpp"],
            include_dirs=[os.path.join(here, "include"), kernels],
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math", "-std=c++17"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
