"""The node set is declared once: a node of the manifest's table missing from any place it must
appear is named, one message per place; the registry refuses a backend that lacks a declared node."""

import json
import shutil

import pytest

from ws1_contract import locate
from ws1_matrix.node_places import missing_places


def test_every_node_of_the_table_is_everywhere_it_must_be():
    problems, notes = missing_places()
    assert problems == []
    assert all("not checked here" in n for n in notes)  # only families whose kernel package is absent here


def _scratch_with_dummy(tmp_path, in_contract: bool):
    """The repository's contracts plus a required node ``dummy`` (a copy of silu's row, its own kernel ids)."""
    src, dest = locate.contracts_dir(), tmp_path / "contracts"
    dest.mkdir()
    shutil.copy(src / locate.CONTRACT_NAME, dest / locate.CONTRACT_NAME)
    m = json.loads((src / locate.MANIFEST_NAME).read_text())
    row = json.loads(json.dumps(m["nodes"]["silu"]))
    for decl in row["kernels"].values():
        decl["kernel_id"] = decl["kernel_id"].replace("silu", "dummy")
    m["nodes"]["dummy"] = row
    (dest / locate.MANIFEST_NAME).write_text(json.dumps(m))
    if in_contract:
        c = json.loads((src / locate.CONTRACT_NAME).read_text())
        c["op_classes"]["elementwise"].append("dummy")
        (dest / locate.CONTRACT_NAME).write_text(json.dumps(c))
    return dest, m["nodes"]


@pytest.mark.parametrize("in_contract", [True, False])
def test_a_dummy_node_fails_once_per_missing_place(tmp_path, monkeypatch, in_contract):
    dest, table = _scratch_with_dummy(tmp_path, in_contract)
    monkeypatch.setenv("WS1_CONTRACTS_DIR", str(dest))
    problems, _ = missing_places(table)
    assert all(p.startswith("node 'dummy': ") for p in problems), problems  # every other node is complete
    places = [p.removeprefix("node 'dummy': ") for p in problems]
    want = [
        "no module ws1_ops/ops/dummy.py",
        "no FP32 reference ws1_ops.reference.dummy",
        "no input builder in ws1_matrix.cases.BUILDERS",
        "ws1_ops/backends/cpu.py KERNELS has no entry",
        "ws1_ops/backends/torch_default.py KERNELS has no entry",
        "no trace point of this kind in ws1_qwen3.model",
    ]
    if not in_contract:
        want.insert(0, "no op class in contracts/tolerance_contract.json")
    if __import__("importlib").util.find_spec("triton") is not None:
        want.append("ws1_ops/backends/triton.py KERNELS has no entry")
    assert len(places) == len(want), places
    for w in want:
        assert sum(p.startswith(w) for p in places) == 1, (w, places)


def test_the_registry_refuses_a_backend_without_a_declared_node(tmp_path, monkeypatch):
    """Loading the cpu family against a table with ``dummy``: one clear error naming the node, the
    backend module and the manifest — never a silent gap."""
    import ws1_ops
    from ws1_ops import registry
    from ws1_ops.backends import cpu

    dest, _ = _scratch_with_dummy(tmp_path, in_contract=True)
    monkeypatch.setenv("WS1_CONTRACTS_DIR", str(dest))
    with pytest.raises(ws1_ops.KernelUnavailable) as ei:
        registry.register_backend(cpu)
    msg = str(ei.value)
    assert "ws1_ops.backends.cpu.KERNELS has no entry for node 'dummy'" in msg and "ws1_manifest.json" in msg
    assert "ws1_cpu::dummy" in msg


def test_the_registry_refuses_a_node_the_table_does_not_know(monkeypatch):
    import types

    import ws1_ops
    from ws1_ops import registry
    from ws1_ops.backends import cpu

    fake = types.SimpleNamespace(
        __name__="ws1_ops.backends.cpu", FAMILY="cpu", KERNELS={**cpu.KERNELS, "softmax": cpu.KERNELS["silu"]}
    )
    with pytest.raises(
        ws1_ops.KernelUnavailable, match="has node 'softmax', which the manifest's node table does not declare"
    ):
        registry.register_backend(fake)
