"""A copy of the repository's contracts with the representative cases' widths shrunk
(ws1_matrix.cases.shrink_shape: rows stay, widths shrink) so a whole matrix runs in seconds; the real
shapes run in the gate sessions and the slow test. And the gate-run helpers the tests share (make_run, args):
here, not in conftest.py, since ``from conftest import`` finds whichever package's conftest a process
imported first (pytest's importlib mode; an xdist worker collects every folder).
"""

from __future__ import annotations

import json
import shutil
from argparse import Namespace
from pathlib import Path

from ws1_contract import GateRun, load_contract, load_manifest, locate
from ws1_matrix.cases import shrink_shape


def make_run(gate: str, profile: str = "cpu_bf16") -> GateRun:
    c = load_contract()
    return GateRun(gate, profile, c, load_manifest(contract=c))


def args(**kw) -> Namespace:
    return Namespace(**{"op": None, "execute": True, "evidence_dir": None, "json": False, **kw})


def small_contracts(dest: Path, edit=None) -> Path:
    """Write ``dest``/tolerance_contract.json and a shrunk ws1_manifest.json; ``edit(manifest_dict)``
    may change the manifest further. Returns ``dest`` (for WS1_CONTRACTS_DIR)."""
    dest.mkdir(parents=True, exist_ok=True)
    src = locate.contracts_dir()
    shutil.copy(src / locate.CONTRACT_NAME, dest / locate.CONTRACT_NAME)
    m = json.loads((src / locate.MANIFEST_NAME).read_text())
    for node in m["nodes"].values():
        for c in node["cases"].values():
            c["shape"] = shrink_shape(c["shape"])
    if edit is not None:
        edit(m)
    (dest / locate.MANIFEST_NAME).write_text(json.dumps(m, indent=1))
    return dest
