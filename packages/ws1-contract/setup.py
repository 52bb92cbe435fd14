"""Bundle the repository's contracts/*.json into the package at build time.

The JSON files under <repo>/contracts are the one source of truth. An editable install reads them
in place (ws1_contract.locate finds the checkout); a wheel carries the copy made here, at build
time, and every report records the fingerprint of the file it actually read.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_CONTRACTS = os.path.join(HERE, "..", "..", "contracts")
NAMES = ("tolerance_contract.json", "ws1_manifest.json")


class BuildPyWithContracts(build_py):
    def run(self):
        super().run()
        if not os.path.isdir(REPO_CONTRACTS):
            raise SystemExit(f"ws1-contract: {REPO_CONTRACTS} not found (build from the WS1 repository)")
        dest = os.path.join(self.build_lib, "ws1_contract", "data")
        os.makedirs(dest, exist_ok=True)
        for name in NAMES:
            shutil.copyfile(os.path.join(REPO_CONTRACTS, name), os.path.join(dest, name))


setup(cmdclass={"build_py": BuildPyWithContracts})
