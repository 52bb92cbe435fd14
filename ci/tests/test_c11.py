"""C11's flow logic: exit 2 after the static gates on a host without the device, and the negative
control step shown able to fail (a 'negative control' that comes out green is red in C11)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))

import c11  # noqa: E402


def test_absent_device_exits_2_after_the_static_gates(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "ci" / "c11.py"), "ascend_bf16", "--evidence-dir", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    line = [x for x in p.stderr.splitlines() if x.startswith("ws1 c11_ci:")]
    assert len(line) == 1 and "ascend_bf16 needs a npu device" in line[0]
    rec = json.loads((tmp_path / "ascend_bf16" / "c11_ci.json").read_text())
    assert [c["id"] for c in rec["cells"]] == ["c1_contract", "c2_manifest", "device"]
    assert rec["cells"][-1]["status"] == "red" and "not executed on this host" in rec["cells"][-1]["detail"]
    assert (tmp_path / "ascend_bf16" / "report.md").exists()


def test_unknown_profile_exits_2(tmp_path):
    assert c11.main(["tpu_bf16", "--evidence-dir", str(tmp_path)]) == 2


def _fake_gate(tmp_path, passed: bool, first_drift) -> list[str]:
    """A command that writes a c10_negative_control record (green or red) and exits accordingly."""
    code = f"""
import sys
from ws1_contract import Cell, write_evidence
cells = [Cell(id="x", judgment="chain_gate", status={'"green"' if passed else '"red"'}, detail="fake")]
write_evidence("c10_negative_control", "cpu_bf16", cells, None, contract_fingerprint="f", fixture_hash="h",
               git_sha="s", dirty=False, root={str(tmp_path)!r}, extra={{"first_drift": {first_drift!r}}})
sys.exit({0 if passed else 1})
"""
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("passed,first_drift,want", [
    (False, {"cell": "BN/chunked", "layer": 0, "node": "attention", "tokens_differ": 3}, "green"),
    (True, None, "red"),          # the negative control came out green: the gate could not fail
    (False, None, "red"),         # red, but with no first_drift: the drift locator did not work
])
def test_negative_control_step_must_be_red_with_a_drift(tmp_path, passed, first_drift, want):
    class A:
        evidence_root = tmp_path
    step = c11.Step("c10_negative_control", "neg", _fake_gate(tmp_path, passed, first_drift), "c10_negative_control.json",
                    expect_red=True)
    out = c11.run_gate(step, "cpu_bf16", A)
    assert out.status == want, out.detail


def test_a_red_gate_names_its_first_red_cell(tmp_path):
    class A:
        evidence_root = tmp_path
    code = f"""
import sys
from ws1_contract import Cell, write_evidence
write_evidence("c7_stateful_kv", "cpu_bf16", [Cell(id="b2/warm", judgment="stateful_kv", status="red", detail="differs")],
               None, contract_fingerprint="f", fixture_hash="h", git_sha="s", dirty=False, root={str(tmp_path)!r})
sys.exit(1)
"""
    out = c11.run_gate(c11.Step("c7_stateful_kv", "C7", [sys.executable, "-c", code], "c7_stateful_kv.json"), "cpu_bf16", A)
    assert out.status == "red" and "first red: b2/warm: differs" in out.detail
