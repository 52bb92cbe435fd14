"""Each package's public names: listed once (its ``__all__``), each one something an editor and a type checker
can follow, and each importable from outside the repository.

* Statically (ast over each ``__init__.py``): ``__all__`` is a literal list without repeats, and every name in it
  is bound in the file itself — an import, a definition, an assignment, or (for ws1_contract's lazily loaded
  evidence half) an import under ``if TYPE_CHECKING:`` that names exactly what its ``__getattr__`` loads.
* In a fresh interpreter whose working directory is outside the repository (as a user's script, or the vLLM
  plugin, imports them): every name of ``__all__`` resolves, ``from pkg import *`` works, and no public name
  defined by the package is missing from ``__all__``.
* ws1_ops: the chain nodes it exports are exactly the manifest's node table, each the function of its own
  ``ws1_ops/ops/<node>.py``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    pkg: ROOT / "packages" / pkg.replace("_", "-") / "src" / pkg / "__init__.py"
    for pkg in ("ws1_accel", "ws1_contract", "ws1_ops", "ws1_kv", "ws1_qwen3", "ws1_dist", "ws1_vllm", "ws1_matrix")
}


def _bound_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound at module level, names bound only under ``if TYPE_CHECKING:``)."""
    bound, typing_only = set(), set()

    def names_of(stmt: ast.stmt) -> set[str]:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return {(a.asname or a.name).split(".")[0] for a in stmt.names}
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return {stmt.name}
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        return set()

    for stmt in tree.body:
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for inner in stmt.body:
                typing_only |= names_of(inner)
        else:
            bound |= names_of(stmt)
    return bound, typing_only


def _literal_all(tree: ast.Module) -> list[str] | None:
    """``__all__`` as written: a list of string literals (``*_LAZY`` spreads a literal dict's keys)."""
    consts = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            consts[stmt.targets[0].id] = stmt.value
    node = consts.get("__all__")
    if not isinstance(node, ast.List):
        return None
    out = []
    for elt in node.elts:
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
            out.append(elt.value)
        elif isinstance(elt, ast.Starred) and isinstance(elt.value, ast.Name):
            spread = consts.get(elt.value.id)
            if not isinstance(spread, ast.Dict):
                return None
            out += [k.value for k in spread.keys]
        else:
            return None
    return out


def _lazy_map(tree: ast.Module) -> dict[str, tuple[str, str]]:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and [ast.unparse(t) for t in stmt.targets] == ["_LAZY"]:
            return ast.literal_eval(stmt.value)
    return {}


def _typing_imports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """name -> (submodule, its name there) of the ``if TYPE_CHECKING:`` imports."""
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING":
            for inner in stmt.body:
                if isinstance(inner, ast.ImportFrom) and inner.level == 1:
                    for a in inner.names:
                        out[a.asname or a.name] = (inner.module, a.name)
    return out


def static_problems(source: str) -> list[str]:
    """Why an ``__init__.py``'s public names are not listed once and statically bound (empty: they are)."""
    tree = ast.parse(source)
    names = _literal_all(tree)
    if names is None:
        return ["__all__ is not a literal list of names"]
    problems = [f"{n!r} is listed {names.count(n)} times in __all__" for n in sorted(set(names)) if names.count(n) > 1]
    bound, typing_only = _bound_names(tree)
    lazy = _lazy_map(tree)
    for n in names:
        if n in bound:
            continue
        if n in typing_only and n in lazy:
            continue
        problems.append(f"{n!r} is in __all__ but not bound in the file (an editor cannot follow it)")
    if lazy and lazy != _typing_imports(tree):
        problems.append("the TYPE_CHECKING imports differ from _LAZY (what __getattr__ loads)")
    return problems


@pytest.mark.parametrize("pkg", sorted(PACKAGES))
def test_public_names_are_listed_once_and_statically_bound(pkg):
    assert static_problems(PACKAGES[pkg].read_text()) == []


def test_the_static_check_sees_a_name_resolved_at_run_time():
    """It can fail: ws1_ops's nodes as they were before issue 35 (resolved by a module ``__getattr__``, missing
    from ``__all__``), a name listed twice, a lazy name whose TYPE_CHECKING import names another thing."""
    before = (
        "from .registry import use_profile\n"
        "def __getattr__(name):\n    return getattr(importlib.import_module(f'.ops.{name}', __name__), name)\n"
        "__all__ = ['use_profile', 'det_gemm', 'use_profile']\n"
    )
    assert static_problems(before) == [
        "'use_profile' is listed 2 times in __all__",
        "'det_gemm' is in __all__ but not bound in the file (an editor cannot follow it)",
    ]
    lazy = "_LAZY = {'Cell': ('evidence', 'Cell')}\nif TYPE_CHECKING:\n    from .gate import Cell\n__all__ = [*_LAZY]\n"
    assert static_problems(lazy) == ["the TYPE_CHECKING imports differ from _LAZY (what __getattr__ loads)"]


OUTSIDE = """
import importlib, json, sys, types
report = {}
for pkg in sys.argv[1:]:
    m = importlib.import_module(pkg)
    unresolved = [n for n in m.__all__ if not hasattr(m, n)]
    star = {}
    exec(f"from {pkg} import *", star)
    own = {n for n, v in vars(m).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)
           and getattr(v, "__module__", pkg).split(".")[0] == pkg and n not in ("annotations", "TYPE_CHECKING")}
    report[pkg] = {"unresolved": unresolved, "star_missing": sorted(set(m.__all__) - set(star)),
                   "unlisted": sorted(own - set(m.__all__)), "file": m.__file__}
print(json.dumps(report))
"""


def test_every_public_name_imports_from_outside_the_repository(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", OUTSIDE, *PACKAGES], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.splitlines()[-1])
    for pkg, r in report.items():
        assert Path(r["file"]).resolve() == PACKAGES[pkg].resolve(), f"{pkg} imported from {r['file']}"
        assert r["unresolved"] == [] and r["star_missing"] == [], (pkg, r)
        assert r["unlisted"] == [], f"{pkg} defines public names missing from its __all__: {r['unlisted']}"


def test_ws1_ops_exports_exactly_the_manifests_nodes():
    import ws1_ops
    from ws1_contract import load_manifest

    ops_dir = PACKAGES["ws1_ops"].parent / "ops"
    node_files = {f.stem for f in ops_dir.glob("*.py") if not f.stem.startswith("_")} - {"pack"}
    required = set(load_manifest().required_nodes)
    assert set(ws1_ops.REQUIRED_NODES) == required == node_files
    exported = {n for n in ws1_ops.__all__ if n in node_files}
    assert exported == required
    for node in required:
        fn = getattr(ws1_ops, node)
        assert fn.__module__ == f"ws1_ops.ops.{node}" and fn.__name__ == node, (node, fn.__module__)
