import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests share small.py (pytest runs in importlib mode)

from small import small_contracts  # noqa: E402

import ws1_ops  # noqa: E402
import ws1_qwen3  # noqa: E402
from ws1_contract import load_contract  # noqa: E402
from ws1_matrix import cases  # noqa: E402


@pytest.fixture
def small_env(tmp_path, monkeypatch):
    """The shrunk contracts (WS1_CONTRACTS_DIR) and a private evidence root; returns tmp_path."""
    monkeypatch.setenv("WS1_CONTRACTS_DIR", str(small_contracts(tmp_path / "contracts")))
    monkeypatch.setenv("WS1_EVIDENCE_DIR", str(tmp_path / "evidence"))
    cases.forget()
    yield tmp_path
    cases.forget()


@pytest.fixture(scope="session")
def small_matrix(tmp_path_factory):
    """One shrunk C8 run over cpu_bf16 (executed) and cuda_bf16 (absent here): (exit code, evidence root)."""
    from ws1_matrix.matrix import main

    root = tmp_path_factory.mktemp("c8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WS1_CONTRACTS_DIR", str(small_contracts(root / "contracts")))
        cases.forget()
        code = main(["cpu_bf16", "cuda_bf16", "--execute", "--evidence-dir", str(root / "evidence")])
        cases.forget()
    return code, root / "evidence"


@pytest.fixture
def cpu():
    with ws1_ops.use_profile("cpu_bf16"):
        yield


@pytest.fixture(scope="session")
def contract():
    return load_contract()


@pytest.fixture(scope="session")
def tiny():
    return ws1_qwen3.synthetic("tiny", "cpu_bf16")


@pytest.fixture(scope="session")
def samples():
    return ws1_qwen3.fixture_samples()
