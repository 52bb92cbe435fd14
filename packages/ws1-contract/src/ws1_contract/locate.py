"""Where the contract and manifest JSON files are read from.

Order: ``$WS1_CONTRACTS_DIR``; the repository's ``contracts/`` when this package is installed
editable from a checkout (so there is no copy to drift); the copy bundled into the wheel at build
time. Every report records the fingerprint of the file actually read.
"""

from __future__ import annotations

import os
from pathlib import Path

CONTRACT_NAME = "tolerance_contract.json"
MANIFEST_NAME = "ws1_manifest.json"


def contracts_dir() -> Path:
    env = os.environ.get("WS1_CONTRACTS_DIR")
    if env:
        p = Path(env)
        if not p.is_dir():
            raise FileNotFoundError(f"WS1_CONTRACTS_DIR={env}: not a directory")
        return p
    here = Path(__file__).resolve()
    # <repo>/packages/ws1-contract/src/ws1_contract/locate.py -> <repo>/contracts
    repo = here.parents[4] / "contracts" if len(here.parents) > 4 else None
    if repo is not None and (repo / CONTRACT_NAME).is_file():
        return repo
    bundled = here.parent / "data"
    if (bundled / CONTRACT_NAME).is_file():
        return bundled
    raise FileNotFoundError(
        "no contracts/ found: set WS1_CONTRACTS_DIR or install ws1-contract from the WS1 repository"
    )


def contract_path() -> Path:
    return contracts_dir() / CONTRACT_NAME


def manifest_path() -> Path:
    return contracts_dir() / MANIFEST_NAME
