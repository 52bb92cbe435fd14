"""Interpreter unit tests of the Triton kernels (CPU tensors, ``TRITON_INTERPRET=1``).

Triton decides interpreter vs GPU when a kernel is *defined* (``triton.jit`` at import), so the
variable is set here, before anything imports ``ws1_ops.triton``, and ``nox -s tests`` runs this
directory in its own pytest process. The autouse guard fails every test if the kernels were
nevertheless compiled for the GPU (e.g. imported earlier in a shared process).

These are unit tests of logic, masking and invariance. They are never evidence for the
``triton_cuda_bf16`` profile: the gates reach that profile only through ``use_profile``, which
needs a CUDA device, so on a CPU host every triton_cuda_bf16 cell stays red "not executed".
"""

import os
import sys
import warnings

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ws1_contract import load_contract  # noqa: E402
from ws1_ops import registry  # noqa: E402

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # the cpu tests' cases.py: the same inputs

# The interpreter evaluates masked-out lanes too (exp(-inf - -inf) and the like); those lanes are
# never stored, so numpy's warnings about them are noise.
np.seterr(all="ignore")
warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")


@pytest.fixture(autouse=True)
def _interpreter_really_active():
    from ws1_ops.triton import _common

    if not _common.INTERPRET:
        pytest.fail("ws1_ops.triton was imported before TRITON_INTERPRET=1 was set: these kernels are compiled "
                    "for the GPU, not interpreted. Run tests_triton in its own pytest process (nox -s tests does).")


@pytest.fixture(scope="session")
def contract():
    return load_contract()


@pytest.fixture
def tri():
    """Interpreter-only activation of the triton family on CPU tensors.

    ``registry._activate`` skips ``use_profile``'s device resolution (there is no CUDA device
    here). Test-only: no gate uses it, and the name is not a profile name, so nothing recorded
    here can pass for triton_cuda_bf16 evidence."""
    with registry._activate("triton_interpreter", "triton"):
        yield
