import os
import sys

import pytest

import ws1_qwen3
from ws1_contract import load_contract

sys.path.insert(0, os.path.dirname(__file__))  # tests share hf_ref.py (pytest runs in importlib mode)


@pytest.fixture(scope="session")
def contract():
    return load_contract()


@pytest.fixture(scope="session")
def tiny():
    return ws1_qwen3.synthetic("tiny", "cpu_bf16")


@pytest.fixture(scope="session")
def samples():
    return ws1_qwen3.fixture_samples()
