import copy
import json

import pytest

from ws1_contract import locate


@pytest.fixture(scope="session")
def raw_contract():
    return json.loads(locate.contract_path().read_text())


@pytest.fixture(scope="session")
def raw_manifest():
    return json.loads(locate.manifest_path().read_text())


@pytest.fixture
def contract_data(raw_contract):
    return copy.deepcopy(raw_contract)


@pytest.fixture
def manifest_data(raw_manifest):
    return copy.deepcopy(raw_manifest)
