import os
import sys

import pytest

import ws1_ops
from ws1_contract import load_contract

sys.path.insert(0, os.path.dirname(__file__))  # tests share cases.py (pytest runs in importlib mode)


@pytest.fixture(scope="session")
def contract():
    return load_contract()


@pytest.fixture
def cpu():
    """Run the test body with the cpu_bf16 kernels active."""
    with ws1_ops.use_profile("cpu_bf16"):
        yield
