import pytest

import ws1_ops


@pytest.fixture
def cpu():
    with ws1_ops.use_profile("cpu_bf16"):
        yield
