import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the tests share emu_cases.py (pytest runs in importlib mode)


@pytest.fixture(scope="session")
def contract():
    from ws1_contract import load_contract

    return load_contract()


@pytest.fixture
def soc():
    """Set the emulated SoC's core counts (AIC, AIV) for one test — the blockDim of every later launch: vector
    kernels get AIV blocks, Cube kernels AIC blocks, mixed kernels AIC AI cores — restoring 20 / 40 after."""
    import ws1_kernels_ascend_emu as emu

    yield emu.set_soc_cores
    emu.set_soc_cores(0, 0)
