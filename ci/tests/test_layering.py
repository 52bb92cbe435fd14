"""Libraries and gates apart: ws1-ops, ws1-kv and ws1-qwen3 import nothing of the evidence/gate
machinery, and the packages depend one way (ws1-accel <- ws1-contract <- ws1-ops <- ws1-kv <-
ws1-qwen3 <- ws1-matrix). Checked two ways: every import statement in the libraries' sources (the
import graph, read with ast), and what importing them actually loads (a fresh interpreter)."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = {
    "ws1_ops": "packages/ws1-ops/src/ws1_ops",
    "ws1_kv": "packages/ws1-kv/src/ws1_kv",
    "ws1_qwen3": "packages/ws1-qwen3/src/ws1_qwen3",
}
# the contract half of ws1_contract a library may read; the rest is the evidence/gate machinery
CONTRACT_MODULES = {
    "ws1_contract.contract",
    "ws1_contract.manifest",
    "ws1_contract.compare",
    "ws1_contract.errors",
    "ws1_contract.locate",
    "ws1_contract._strict",
}
CONTRACT_NAMES = {
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
}
ORDER = ["ws1_accel", "ws1_contract", "ws1_ops", "ws1_kv", "ws1_qwen3", "ws1_matrix"]


def _imports(pkg: str, path: Path):
    """(file, line, module, names) of every import in the package's sources, relative ones resolved."""
    for f in sorted(path.rglob("*.py")):
        parts = [pkg, *f.relative_to(path).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                for a in node.names:
                    yield f, node.lineno, a.name, []
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = parts[: len(parts) - node.level + (1 if f.name == "__init__.py" else 0)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module
                yield f, node.lineno, mod, [a.name for a in node.names]


def _violations(pkg: str, path: Path) -> list[str]:
    bad = []
    for f, line, mod, names in _imports(pkg, path):
        where = f"{f.name}:{line}"
        top = mod.split(".")[0]
        if top in ORDER and ORDER.index(top) > ORDER.index(pkg):
            bad.append(f"{where}: {pkg} imports {mod} (a package above it)")
        if top == "ws1_contract":
            if mod == "ws1_contract":
                extra = [n for n in names if n not in CONTRACT_NAMES]
                if extra:
                    bad.append(f"{where}: imports {extra} from ws1_contract (evidence/gate machinery)")
            elif mod not in CONTRACT_MODULES:
                bad.append(f"{where}: imports {mod} (evidence/gate machinery)")
    return bad


def test_libraries_import_no_gate_machinery_and_depend_one_way():
    bad = [v for pkg, rel in LIBRARIES.items() for v in _violations(pkg, ROOT / rel)]
    assert bad == [], "\n".join(bad)


def test_importing_the_libraries_loads_no_gate_module():
    code = (
        "import sys, ws1_ops, ws1_kv, ws1_qwen3\n"
        "import ws1_ops\n"
        "with ws1_ops.use_profile('cpu_bf16'): pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('ws1_matrix', 'ws1_contract')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    allowed = CONTRACT_MODULES | {"ws1_contract"}
    assert set(out) <= allowed, sorted(set(out) - allowed)


def test_the_check_sees_a_gate_import(tmp_path):
    """The static check can fail: a library module importing the gate machinery is named."""
    pkg = tmp_path / "ws1_ops"
    pkg.mkdir()
    (pkg / "bad.py").write_text(
        "from ws1_contract import Cell, bitwise\nfrom ws1_contract.gate import gate_main\nimport ws1_matrix\n"
    )
    assert _violations("ws1_ops", pkg) == [
        "bad.py:1: imports ['Cell'] from ws1_contract (evidence/gate machinery)",
        "bad.py:2: imports ws1_contract.gate (evidence/gate machinery)",
        "bad.py:3: ws1_ops imports ws1_matrix (a package above it)",
    ]
