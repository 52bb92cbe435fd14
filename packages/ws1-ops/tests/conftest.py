import pytest

import ws1_ops
from ws1_contract import load_contract


@pytest.fixture(scope="session")
def contract():
    return load_contract()


@pytest.fixture
def cpu():
    """Run the test body with the cpu_bf16 kernels active."""
    with ws1_ops.use_profile("cpu_bf16"):
        yield
