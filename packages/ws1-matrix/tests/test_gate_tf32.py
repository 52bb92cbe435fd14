"""TF32 on a CUDA host (simulated: there is no GPU here): every model gate (C6, C7, C9, C10) runs its
body with TF32 off for matmul and cuDNN, and the record's provenance says so."""

import pytest
import torch

import ws1_accel
import ws1_matrix.__main__ as qmain
from ws1_contract import Cell, collect_provenance, read_evidence
from ws1_matrix import chain_gate, decode_prefill, model_nodes, stateful_kv

# command -> (the module holding the gate's body, the body's name, the evidence name)
BODIES = {
    "c6": (decode_prefill, "c6", "c6_decode_prefill"),
    "c7": (stateful_kv, "c7", "c7_stateful_kv"),
    "c9": (model_nodes, "c9", "c9_model"),
    "c10": (chain_gate, "c10", "c10_chain_gate"),
}


@pytest.fixture
def cuda_host_with_tf32_on(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    # torch's CUDA defaults: cuDNN TF32 on; a user's script may have turned matmul TF32 on too
    # (module-level switches, not plain attributes: set and restored by hand, not by monkeypatch)
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old[:2]
    torch.set_float32_matmul_precision(old[2])


@pytest.mark.parametrize("gate", ["c6", "c7", "c9", "c10"])
def test_model_gates_disable_tf32_and_record_it(tmp_path, monkeypatch, cuda_host_with_tf32_on, gate):
    seen = {}

    def probe(run, args):  # stands in for the gate's body: what would its matmuls see?
        seen.update(ws1_accel.tf32_flags(), cuda=ws1_accel.tf32_enabled("cuda:0"), cpu=ws1_accel.tf32_enabled("cpu"))
        prov = collect_provenance(
            run.profile,
            run.contract.family(run.profile),
            run.contract,
            run.manifest.fixture_identity_sha256,
            device="cuda:0",
        )
        run.provenance = prov.to_dict()
        on = prov.candidate_tf32_enabled or prov.reference_tf32_enabled
        run.add(Cell(id="tf32", judgment="provenance", status="red" if on else "green", detail=f"tf32 on: {on}"))

    module, body, name = BODIES[gate]
    monkeypatch.setattr(module, body, probe)
    assert qmain.main([gate, "cuda_bf16", "--evidence-dir", str(tmp_path)]) == 0
    assert seen == {
        "cuda_matmul_allow_tf32": False,
        "cudnn_allow_tf32": False,
        "float32_matmul_precision": "highest",
        "cuda": False,
        "cpu": False,
    }
    rec = read_evidence(tmp_path / "cuda_bf16" / f"{name}.json")
    tf32 = rec["provenance"]["tf32"]
    assert tf32["disabled_on"] == ["cpu", "cuda:0"] and tf32["left_on"] == []
    assert (
        tf32["at_start"]
        == tf32["at_finish"]
        == {"cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": False, "float32_matmul_precision": "highest"}
    )
    assert rec["provenance"]["candidate_tf32_enabled"] is False and rec["tf32"] == tf32


def test_tf32_that_cannot_be_disabled_is_red(tmp_path, monkeypatch, cuda_host_with_tf32_on):
    """The gate's own check can fail: a vendor whose disable does nothing leaves a red cell."""
    monkeypatch.setattr(ws1_accel.VENDORS["cuda"], "disable_tf32", lambda: None)
    module, body, name = BODIES["c9"]
    monkeypatch.setattr(
        module, body, lambda run, args: run.add(Cell(id="x", judgment="j", status="green", detail="ok"))
    )
    assert qmain.main(["c9", "cuda_bf16", "--evidence-dir", str(tmp_path)]) == 1
    rec = read_evidence(tmp_path / "cuda_bf16" / f"{name}.json")
    assert [c["id"] for c in rec["cells"] if c["status"] == "red"] == ["tf32"]
    assert rec["tf32"]["left_on"] == ["cuda:0"]
