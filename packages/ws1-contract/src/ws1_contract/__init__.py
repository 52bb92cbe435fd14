"""WS1 numerical contract and workload manifest (C1, C2).

    from ws1_contract import load_contract, load_manifest, bitwise, within_tolerance, aggregates
    c = load_contract()
    th = c.resolve("forward_accuracy", "det_gemm", "bfloat16")     # Threshold(atol=0.05, rtol=0.02)

Two halves: the *contract* — :mod:`.contract`, :mod:`.manifest` (the node table), :mod:`.compare`
(what "bitwise" and "within tolerance" mean), :mod:`.errors` — which the libraries (ws1-ops, ws1-kv,
ws1-qwen3) may read; and the *evidence machinery* — :mod:`.gate`, :mod:`.evidence`,
:mod:`.provenance`, :mod:`.report`, :mod:`.progress`, :mod:`.closure`, :mod:`.gates` — which only the
harness (ws1-matrix, ``ci/``) uses. Names are imported lazily (on first use), so importing this
package for the contract does not load the evidence machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# the contract half: real attributes (the libraries read these; they load nothing of the evidence machinery)
from .compare import AggregateResult, Comparison, aggregates, bitwise, within_tolerance
from .contract import Contract, Threshold, load_contract
from .errors import ContractError, EvidenceError
from .manifest import Manifest, Node, load_manifest

# the evidence half: public name -> (submodule, its name there), imported on first use
_LAZY = {
    "Cell": ("evidence", "Cell"),
    "judged": ("evidence", "judged"),
    "read_evidence": ("evidence", "read_evidence"),
    "red_not_executed": ("evidence", "red_not_executed"),
    "write_evidence": ("evidence", "write_evidence"),
    "GateRun": ("gate", "GateRun"),
    "gate_main": ("gate", "gate_main"),
    "Provenance": ("provenance", "Provenance"),
    "validate_provenance": ("provenance", "validate_provenance"),
    "collect_provenance": ("provenance", "collect"),
}

if TYPE_CHECKING:  # what editors and type checkers follow; ci/tests/test_public_api.py checks it equals _LAZY
    # ("x as x": an explicit re-export, PEP 484)
    from .evidence import Cell as Cell
    from .evidence import judged as judged
    from .evidence import read_evidence as read_evidence
    from .evidence import red_not_executed as red_not_executed
    from .evidence import write_evidence as write_evidence
    from .gate import GateRun as GateRun
    from .gate import gate_main as gate_main
    from .provenance import Provenance as Provenance
    from .provenance import collect as collect_provenance  # noqa: F401  (re-exported under its public name)
    from .provenance import validate_provenance as validate_provenance

__all__ = [
    "AggregateResult",
    "Comparison",
    "aggregates",
    "bitwise",
    "within_tolerance",
    "Contract",
    "Threshold",
    "load_contract",
    "ContractError",
    "EvidenceError",
    "Manifest",
    "Node",
    "load_manifest",
    *_LAZY,
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
