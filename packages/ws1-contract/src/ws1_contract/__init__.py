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

# public name -> the submodule that defines it
_EXPORTS = {
    "AggregateResult": "compare",
    "Comparison": "compare",
    "aggregates": "compare",
    "bitwise": "compare",
    "within_tolerance": "compare",
    "Contract": "contract",
    "Threshold": "contract",
    "load_contract": "contract",
    "ContractError": "errors",
    "EvidenceError": "errors",
    "Manifest": "manifest",
    "Node": "manifest",
    "load_manifest": "manifest",
    "Cell": "evidence",
    "judged": "evidence",
    "read_evidence": "evidence",
    "red_not_executed": "evidence",
    "write_evidence": "evidence",
    "GateRun": "gate",
    "gate_main": "gate",
    "Provenance": "provenance",
    "validate_provenance": "provenance",
}
_RENAMED = {"collect_provenance": ("provenance", "collect")}

__all__ = sorted([*_EXPORTS, *_RENAMED])


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _RENAMED:
        mod, attr = _RENAMED[name]
        value = getattr(importlib.import_module(f".{mod}", __name__), attr)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
