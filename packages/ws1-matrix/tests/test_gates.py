"""The C6/C7/C9 gates end to end (evidence, exit codes), and C9's judgment shown able to fail."""

import json

import pytest

import ws1_qwen3
from ws1_contract import load_manifest, read_evidence
from ws1_matrix.__main__ import main
from ws1_matrix.model_nodes import node_cells, observe


@pytest.mark.parametrize(
    "gate,args,name",
    [
        ("c6", ["--models", "tiny"], "c6_decode_prefill"),
        ("c7", [], "c7_stateful_kv"),
        ("c9", [], "c9_model"),
    ],
)
def test_gate_green_with_evidence(tmp_path, gate, args, name):
    assert main([gate, "cpu_bf16", "--evidence-dir", str(tmp_path), *args]) == 0
    ev = read_evidence(tmp_path / "cpu_bf16" / f"{name}.json")
    assert ev["passed"] and ev["counts"]["red"] == 0 and ev["counts"]["green"] >= 10
    assert ev["provenance"]["actual_backend"] == "cpu" and ev["provenance"]["backend_profile"] == "cpu_bf16"


def test_c6_reports_the_three_aggregates(tmp_path):
    assert main(["c6", "cpu_bf16", "--evidence-dir", str(tmp_path), "--models", "tiny", "--json"]) == 0
    ev = read_evidence(tmp_path / "cpu_bf16" / "c6_decode_prefill.json")
    model = [c for c in ev["cells"] if c["id"].startswith("model-")]
    assert len(model) == 3
    for c in model:
        assert set(c["aggregates"]) == {"max_abs_dlogp", "approx_kl0", "clipfrac0"} and c["bitwise_equal"] is True
        assert (c["lhs_role"], c["rhs_role"]) == ("training_style_teacher_forcing", "inference_style_rollout_decode")
    assert len([c for c in ev["cells"] if c["id"].startswith("op/")]) == 12


@pytest.mark.parametrize("gate", ["c6", "c7", "c9"])
def test_absent_device_exits_2(tmp_path, gate, capsys):
    assert main([gate, "ascend_bf16", "--evidence-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ascend_bf16 needs a npu device" in err[0]
    assert not (tmp_path / "ascend_bf16").exists()


def test_unknown_gate_or_profile(tmp_path):
    assert main(["c99"]) == 2
    assert main(["c9", "tpu_bf16", "--evidence-dir", str(tmp_path)]) == 2


def test_c9_judgment_is_red_for_an_undeclared_family():
    """The same observation on plain PyTorch ops: every node ran an undeclared kernel."""
    m = load_manifest()
    declared = {n: m.kernel_id("cpu_bf16", n) for n in m.required_nodes}
    rec, silu = observe(ws1_qwen3.synthetic("tiny", "torch_default"))
    cells = node_cells(rec.summary(), declared, "cpu", "cpu", silu)
    red = [c for c in cells if c.status == "red"]
    assert len(red) == 11
    assert all("undeclared fallback" in c.detail for c in red)


def test_c9_judgment_is_red_for_a_missing_node_and_an_extra_op(tiny):
    m = load_manifest()
    declared = {n: m.kernel_id("cpu_bf16", n) for n in m.required_nodes}
    rec, silu = observe(tiny)
    summary = dict(rec.summary())
    summary.pop("rope")
    summary["mystery_op"] = {"kernel_ids": ["x"], "families": ["cpu"], "devices": ["cpu"], "forward": 1, "backward": 0}
    cells = {c.id: c for c in node_cells(summary, declared, "cpu", "cpu", silu)}
    assert cells["node/rope"].status == "red" and "never ran" in cells["node/rope"].detail
    assert cells["nothing-undeclared"].status == "red" and "mystery_op" in cells["nothing-undeclared"].detail
    assert cells["node/attention"].status == "green"
    json.dumps([c.to_dict() for c in cells.values()], default=str)
