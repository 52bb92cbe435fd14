"""Unit tests of the Triton kernels, in one of two modes (decided here, once per process):

* **interpreter** (default; CI): ``TRITON_INTERPRET=1`` is set before anything imports
  ``ws1_ops.triton`` (Triton decides interpreter vs GPU when a kernel is *defined*), kernels run
  in numpy on CPU tensors: logic, masking, tiling, invariance, accuracy — not GPU numerics.
  ``nox -s tests`` runs this directory in its own pytest process; the interpreter runs the logic of
  the Hopper configuration table (``_common.INTERPRET_ARCH``), some tests the sm_80 one too.
* **device** (``WS1_TRITON_TEST_DEVICE=cuda``, or ``WS1_DEVICE_PROFILE=triton_cuda_bf16`` as
  ``nox -s tests_device -- triton_cuda_bf16`` sets it): no interpreter; the same tests run the
  real compiled kernels on the CUDA device with the device's own configuration table. Inputs are
  built on the CPU as in the interpreter and moved to the device at the kernel boundary (the
  family's launchers wrapped by the ``tri`` fixture; tests that launch a kernel themselves use
  ``DEV``), outputs come back to the CPU for the comparisons. Tests marked ``interpreter_only`` (a
  check of the interpreter itself, or a negative control that rests on an interpreter artifact)
  are deselected there, with the count printed; on a host without a CUDA device every test is
  skipped with that reason (the nox session refuses such a host before pytest runs).

Neither mode is evidence for the ``triton_cuda_bf16`` profile: the gates reach it only through
``use_profile``, which needs a CUDA device.
"""

import os
import sys
import warnings

import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
from tdev import MODE, to_cpu, to_dev  # noqa: E402

if os.environ.get("WS1_TRITON_TEST_DEVICE", "") not in ("", "cuda"):
    raise pytest.UsageError(
        f"WS1_TRITON_TEST_DEVICE must be 'cuda' or unset, got {os.environ['WS1_TRITON_TEST_DEVICE']!r}"
    )
if MODE == "interpreter":
    os.environ["TRITON_INTERPRET"] = "1"
elif os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    raise pytest.UsageError("device mode (WS1_TRITON_TEST_DEVICE=cuda) with TRITON_INTERPRET set: unset it")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ws1_contract import load_contract  # noqa: E402
from ws1_ops import registry  # noqa: E402

sys.path.insert(1, os.path.join(HERE, "..", "tests"))  # the cpu tests' cases.py: the same inputs

NO_DEVICE = MODE == "device" and not torch.cuda.is_available()

# The interpreter evaluates masked-out lanes too (exp(-inf - -inf) and the like); those lanes are
# never stored, so numpy's warnings about them are noise.
np.seterr(all="ignore")
warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "interpreter_only: a check of the interpreter itself, or a control that rests on "
        "an interpreter artifact; deselected in device mode",
    )
    config.addinivalue_line(
        "markers", "device_only: a check of the compiled kernels on the device; deselected in the interpreter"
    )


def pytest_collection_modifyitems(config, items):
    if MODE != "device":
        dropped = [i for i in items if i.get_closest_marker("device_only")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if not i.get_closest_marker("device_only")]
        return
    if NO_DEVICE:
        skip = pytest.mark.skip(reason="WS1_TRITON_TEST_DEVICE=cuda (device mode) but this host has no CUDA device")
        for item in items:
            item.add_marker(skip)
        return
    dropped = [i for i in items if i.get_closest_marker("interpreter_only")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if not i.get_closest_marker("interpreter_only")]
        print(f"\ntests_triton device mode: {len(dropped)} interpreter-only test(s) deselected", file=sys.stderr)


@pytest.fixture(autouse=True)
def _mode_really_active():
    from ws1_ops.triton import _common

    if MODE == "interpreter" and not _common.INTERPRET:
        pytest.fail(
            "ws1_ops.triton was imported before TRITON_INTERPRET=1 was set: these kernels are compiled "
            "for the GPU, not interpreted. Run tests_triton in its own pytest process (nox -s tests does)."
        )
    if MODE == "device" and _common.INTERPRET:
        pytest.fail("device mode, but ws1_ops.triton was defined under TRITON_INTERPRET=1: the interpreter would run")


@pytest.fixture(scope="session")
def contract():
    return load_contract()


def _on_device(fn):
    if fn is None:
        return None

    def run(*args):
        return to_cpu(fn(*to_dev(args)))

    return run


@pytest.fixture
def tri():
    """The triton family on the tests' CPU tensors.

    Interpreter: ``registry.activate`` without ``use_profile``'s device resolution (there is no
    CUDA device). Device mode: the same family with each launcher wrapped to move its tensors to
    the device and its results back (an overlay of the family's own kernels, same kernel ids and
    launch counts). Test-only: no gate uses either, and the name is not a profile name, so nothing
    recorded here can pass for triton_cuda_bf16 evidence."""
    if MODE == "interpreter":
        with registry.activate("triton_interpreter", "triton"):
            yield
        return
    import dataclasses

    import ws1_ops

    registry.load_family("triton")
    overlay = {
        op: dataclasses.replace(k, fwd=_on_device(k.fwd), bwd=_on_device(k.bwd), param_grad=_on_device(k.param_grad))
        for (op, fam), k in registry._KERNELS.items()
        if fam == "triton" and op in ws1_ops.REQUIRED_NODES
    }
    with registry.activate("triton_device_test", "triton", overlay):
        yield


@pytest.fixture
def sm80_table(monkeypatch):
    """The interpreter runs the sm_80 configuration table's logic (interpreter-only: a device runs its own)."""
    from ws1_ops.triton import _common

    monkeypatch.setattr(_common, "INTERPRET_ARCH", "sm80")
