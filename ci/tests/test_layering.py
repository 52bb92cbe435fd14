"""Libraries and gates apart: ws1-ops, ws1-kv, ws1-qwen3, ws1-dist and ws1-vllm import nothing of the evidence/gate
machinery, and the packages depend one way (ws1-accel <- ws1-contract <- ws1-ops <- ws1-kv <- ws1-qwen3 <-
ws1-dist <- ws1-vllm <- ws1-matrix). Checked two ways: every import statement in the libraries' sources (the
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
    "ws1_dist": "packages/ws1-dist/src/ws1_dist",
    "ws1_vllm": "packages/ws1-vllm/src/ws1_vllm",
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
ORDER = ["ws1_accel", "ws1_contract", "ws1_ops", "ws1_kv", "ws1_qwen3", "ws1_dist", "ws1_vllm", "ws1_matrix"]
# every package of the monorepo, for the cycle check (a package's modules import one another without a cycle)
PACKAGES = {pkg: f"packages/{pkg.replace('_', '-')}/src/{pkg}" for pkg in ORDER}


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


def _module_of(pkg: str, path: Path, f: Path) -> str:
    parts = [pkg, *f.relative_to(path).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph(pkg: str, path: Path) -> dict[str, dict[str, str]]:
    """module -> {module of the same package it imports: "file:line" of the first such import}.

    Every import statement counts, at module level or inside a function (a lazy import hides a cycle
    from the interpreter, not from the design). ``from a import b`` is an edge to ``a.b`` when that is a
    module, else to ``a`` (a package's ``__init__``). The implicit import of a module's parent packages
    is not an edge: ``__init__`` re-exports would otherwise close a cycle through every module."""
    modules = {_module_of(pkg, path, f) for f in path.rglob("*.py")}
    graph: dict[str, dict[str, str]] = {m: {} for m in modules}
    for f, line, mod, names in _imports(pkg, path):
        src = _module_of(pkg, path, f)
        targets = [f"{mod}.{n}" if f"{mod}.{n}" in modules else mod for n in names] if names else [mod]
        for t in targets:
            if t in modules and t != src:
                graph[src].setdefault(t, f"{f.relative_to(path.parent)}:{line}")
    return graph


def _cycles(graph: dict[str, dict[str, str]]) -> list[str]:
    """Each import cycle once, as ``a (file:line) -> b (file:line) -> a``, from a depth-first search."""
    found, seen, stack, on_stack = [], set(), [], set()

    def visit(m: str) -> None:
        seen.add(m)
        stack.append(m)
        on_stack.add(m)
        for t in sorted(graph[m]):
            if t in on_stack:
                loop = stack[stack.index(t) :] + [t]
                found.append(" -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(loop, loop[1:])) + f" -> {t}")
            elif t not in seen:
                visit(t)
        stack.pop()
        on_stack.discard(m)

    for m in sorted(graph):
        if m not in seen:
            visit(m)
    return found


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


def test_no_import_cycle_inside_a_package():
    cycles = [c for pkg, rel in PACKAGES.items() for c in _cycles(_module_graph(pkg, ROOT / rel))]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_check_sees_a_lazy_cycle(tmp_path):
    """The cycle check can fail: a cycle closed by an import inside a function (the registry <->
    controls cycle as it was before issue 35) is named, with the line of each import."""
    pkg = tmp_path / "ws1_ops"
    (pkg / "backends").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .registry import use_candidate\n")
    (pkg / "backends" / "__init__.py").write_text("")
    (pkg / "registry.py").write_text("def use_candidate(name):\n    from .backends import controls\n")
    (pkg / "backends" / "controls.py").write_text("from .. import registry\n")
    assert _cycles(_module_graph("ws1_ops", pkg)) == [
        "ws1_ops.registry (ws1_ops/registry.py:2) -> ws1_ops.backends.controls (ws1_ops/backends/controls.py:1) "
        "-> ws1_ops.registry"
    ]


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


# ---- no reach-ins: a module uses another's private names only through what that module declares ----------------

# private attributes of third-party objects a module may touch, and why
THIRD_PARTY_PRIVATE = {
    "_version": "torch.Tensor's in-place version counter (a cached result is stale once it moves)",
    "_C": "torch's C extension module (dispatch-key queries of the link check)",
    "_GLOBAL_DEVICE_CONTEXT": "torch's default-device context (the stray-device check)",
    "_dispatch_has_kernel_for_dispatch_key": "torch._C: is an op registered for a dispatch key",
    "_opname": "torch OpOverload's op name (the step profiler's dispatch mode)",
    "_pack_args": "Triton JITFunction's argument packing (the ahead-of-time compile)",
    "_path_to_binary": "Triton's NVIDIA backend: the ptxas it would run (the ahead-of-time compile)",
}
# a module's own private state, reached on objects the same module creates
SAME_MODULE = {("ws1_ops/registry.py", "_settle"), ("ws1_ops/canonical.py", "_ws1_identity")}
REACH_SCOPE = ["packages/*/src/**/*.py", "ci/*.py", "benchmarks/*.py"]


def _reach_ins(files: list[Path], root: Path) -> list[str]:
    """``x._name`` on anything but ``self``/``cls`` that is neither a listed third-party private nor the module's
    own."""
    bad = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            base = ast.unparse(node.value)
            if base in ("self", "cls") or node.attr in THIRD_PARTY_PRIVATE:
                continue
            if any(rel.endswith(mod) and node.attr == attr for mod, attr in SAME_MODULE):
                continue
            bad.append(f"{rel}:{node.lineno}: {base}.{node.attr}")
    return bad


def test_no_module_reaches_into_another_modules_private_state():
    files = sorted({f for pattern in REACH_SCOPE for f in ROOT.glob(pattern)})
    assert _reach_ins(files, ROOT) == []


def test_the_reach_in_check_sees_the_reach_ins_of_before_issue_35(tmp_path):
    """It can fail: the engine's lanes stashed on the cache, the cache's private storage, the registry's private
    activation, as they were before issue 35."""
    f = tmp_path / "engine.py"
    f.write_text(
        "cache._ws1_lanes = state\n"
        "ks, vs = cache._storage(layer, None)\n"
        "with registry._activate('x', 'triton'):\n    pass\n"
        "self._ok = t._version\n"
    )
    assert _reach_ins([f], tmp_path) == [
        "engine.py:1: cache._ws1_lanes",
        "engine.py:2: cache._storage",
        "engine.py:3: registry._activate",
    ]


def test_the_model_on_a_profile_loads_no_negative_control():
    """The controls are the gates' business: building and running a model on a profile never imports them (before
    issue 35 importing ws1_qwen3 did, through the registry's list of candidates)."""
    code = (
        "import sys, torch, ws1_qwen3\n"
        "m = ws1_qwen3.synthetic('tiny', 'cpu_bf16')\n"
        "m(torch.tensor([[1, 2, 3]]))\n"
        "print('ws1_ops.backends.controls' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False"]
