"""A copy of the repository's contracts with the representative cases' big dimensions shrunk.

Rows (T, M, B, Sq, Skv, S) stay: they come from the fixtures and carry the logical keys. Widths
shrink (K 4096 -> 64, V 151936 -> 1000 >= 616 so the fixture's token ids fit, heads 32 -> 4, ...)
so a whole matrix runs in seconds; the real shapes run in the gate sessions and the slow test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ws1_contract import locate

SHRINK = {"K": 64, "H": 64, "F": 96, "V": 1000, "heads": 4, "D": 32, "Hq": 4, "Hkv": 2}
N_SHRINK = {4096: 48, 12288: 96, 151936: 1000}


def shrink_shape(shape: dict) -> dict:
    out = dict(shape)
    for k, v in shape.items():
        if k in SHRINK:
            out[k] = SHRINK[k]
        elif k == "N":
            out[k] = N_SHRINK.get(v, 48)
    return out


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
