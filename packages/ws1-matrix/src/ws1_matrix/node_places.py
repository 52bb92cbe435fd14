"""Every place a node of the manifest's node table must appear, checked: one message per missing place.

    python -m ws1_matrix nodes [--json]

The node set is declared once (``contracts/ws1_manifest.json``, ``nodes``); the code around it is
derived from that table where it can be, and where a node needs code of its own (its op, its FP32
reference, its kernels, its test inputs, its place in the model's chain) this check names what is
missing. It is what a newcomer runs after adding a row to the table (docs/adding_a_node.md), and a
test holds the repository to it (tests/test_node_table.py): a node missing anywhere fails.

Places, per node (``required``: nodes with one kernel per profile; ``helper``: profile-independent):

=================================================  ==========================================
place                                              for
=================================================  ==========================================
the contract's op class (tolerance_contract.json)  every node
``ws1_ops.ops.<node>`` with a public ``<node>()``  every node
``ws1_ops.reference.<node>`` (the FP32 reference)  every node
``ws1_matrix.cases.BUILDERS[<node>]`` (inputs)     every node (C2 runtime, C3/C4/C8 run them)
a kernel in each loadable family's ``KERNELS``     required (cpu, triton, cuda, ascend where they import)
``torch_default``'s ``KERNELS`` (negative control) required
a trace point of the model's chain (ws1_qwen3)     required
=================================================  ==========================================
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

import ws1_accel
from ws1_contract import load_contract
from ws1_contract._strict import read_json
from ws1_contract.locate import manifest_path
from ws1_ops import registry


def _backend_kernels(family: str) -> dict | str:
    """The family module's KERNELS, or why it cannot be read here (its kernel package is not installed)."""
    try:
        mod = importlib.import_module(registry.backend_module(family))
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return getattr(mod, "KERNELS", {})


def missing_places(table: dict | None = None) -> tuple[list[str], list[str]]:
    """(problems, notes): one problem per (node, place) missing; notes say what could not be checked here.

    ``table``: the raw ``nodes`` object of a manifest (default: the manifest in force), so a table
    that does not validate yet (a node the contract does not know) is still checked place by place."""
    if table is None:
        table = read_json(manifest_path())["nodes"]
    from ws1_ops import reference
    from ws1_qwen3.model import NODE_KIND

    from . import cases

    problems: list[str] = []
    notes: list[str] = []
    contract = load_contract()
    classes = {op for ops in contract.op_classes.values() for op in ops}
    traced = set(NODE_KIND.values())
    backends = {fam: _backend_kernels(fam) for fam in [*ws1_accel.FAMILY_DEVICE_TYPE, *registry.CANDIDATE_FAMILIES]}
    for fam, k in backends.items():
        if isinstance(k, str):
            notes.append(f"family {fam!r}: KERNELS not checked here ({k})")
    for node, row in table.items():
        required = bool(row.get("required", True))

        def need(ok: bool, place: str, node: str = node) -> None:
            if not ok:
                problems.append(f"node {node!r}: {place}")

        need(node in classes, "no op class in contracts/tolerance_contract.json op_classes")
        try:
            mod = importlib.import_module(f"ws1_ops.ops.{node}")
            need(callable(getattr(mod, node, None)), f"ws1_ops/ops/{node}.py has no public function {node}()")
        except ImportError:
            problems.append(f"node {node!r}: no module ws1_ops/ops/{node}.py (the op and its autograd.Function)")
        need(callable(getattr(reference, node, None)), f"no FP32 reference ws1_ops.reference.{node}")
        need(node in cases.BUILDERS, "no input builder in ws1_matrix.cases.BUILDERS (C3/C4/C8 inputs)")
        if not required:
            continue
        for fam, k in backends.items():
            if not isinstance(k, str):
                need(node in k, f"ws1_ops/backends/{fam}.py KERNELS has no entry")
        need(
            node in traced,
            "no trace point of this kind in ws1_qwen3.model NODE_KIND "
            "(the model never runs it: C9/C10 cannot observe it)",
        )
    return problems, notes


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ws1 nodes", description="every place a node of the node table must appear")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problems, notes = missing_places()
    if args.json:
        print(json.dumps({"problems": problems, "notes": notes}, indent=1))
    else:
        for n in notes:
            print(f"  note  {n}")
        for p in problems:
            print(f"  red   {p}")
        print(f"nodes: {'PASS' if not problems else 'FAIL'} ({len(problems)} missing place(s))")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
