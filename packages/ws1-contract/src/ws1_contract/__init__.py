"""WS1 numerical contract and workload manifest (C1, C2).

    from ws1_contract import load_contract, load_manifest, bitwise, within_tolerance, aggregates
    c = load_contract()
    th = c.resolve("forward_accuracy", "det_gemm", "bfloat16")     # Threshold(atol=0.05, rtol=0.02)
"""

from .compare import AggregateResult, Comparison, aggregates, bitwise, within_tolerance
from .contract import Contract, Threshold, load_contract
from .errors import ContractError, EvidenceError
from .evidence import Cell, read_evidence, red_not_executed, write_evidence
from .gate import GateRun, gate_main
from .manifest import Manifest, load_manifest
from .provenance import Provenance, validate_provenance
from .provenance import collect as collect_provenance

__all__ = [
    "AggregateResult", "Cell", "Comparison", "Contract", "ContractError", "EvidenceError", "GateRun", "Manifest",
    "Provenance", "Threshold", "aggregates", "bitwise", "collect_provenance", "gate_main", "load_contract",
    "load_manifest", "read_evidence", "red_not_executed", "validate_provenance", "within_tolerance", "write_evidence",
]
