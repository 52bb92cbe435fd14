import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the tests share emu_cases.py (pytest runs in importlib mode)


@pytest.fixture(scope="session")
def contract():
    from ws1_contract import load_contract

    return load_contract()


@pytest.fixture
def blocks():
    """Set the emulated launch's blockDim for one test, restoring the fixed geometry after."""
    import ws1_kernels_ascend_emu as emu

    yield emu.set_launch_blocks
    emu.set_launch_blocks(0, 0)
