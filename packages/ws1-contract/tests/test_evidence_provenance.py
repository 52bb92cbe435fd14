"""Evidence records and provenance."""

import json

import pytest

from ws1_contract import Cell, EvidenceError, load_contract, load_manifest, read_evidence, write_evidence
from ws1_contract.evidence import red_not_executed
from ws1_contract.provenance import collect, validate_provenance


def _write(tmp_path, cells):
    return write_evidence(
        "c3_forward",
        "cpu_bf16",
        cells,
        {"x": 1},
        contract_fingerprint="f",
        fixture_hash="h",
        git_sha="s",
        dirty=False,
        root=tmp_path,
    )


def test_write_and_read_back(tmp_path):
    cells = [
        Cell(
            id="a",
            judgment="forward_invariance",
            status="green",
            detail="ok",
            lhs_role="transformed_config",
            rhs_role="canonical_config",
            thresholds={"atol": 0, "rtol": 0},
            max_abs_err=0.0,
            extra={"op": "rope"},
        ),
        Cell(
            id="b",
            judgment="forward_accuracy",
            status="N/A",
            detail="pack is index copies",
            na_reason="profile_independent",
            extra={"op": "pack"},
        ),
    ]
    p = _write(tmp_path, cells)
    assert p == tmp_path / "cpu_bf16" / "c3_forward.json"
    d = read_evidence(p)
    for k in (
        "schema",
        "gate",
        "profile",
        "passed",
        "counts",
        "cells",
        "provenance",
        "git_sha",
        "dirty",
        "contract_fingerprint",
        "fixture_hash",
        "created_at",
    ):
        assert k in d
    assert d["passed"] is True and d["counts"] == {"green": 1, "red": 0, "N/A": 1}
    assert d["cells"][0]["op"] == "rope" and d["cells"][0]["lhs_role"] == "transformed_config"


def test_red_cell_fails_the_record(tmp_path):
    d = read_evidence(_write(tmp_path, [red_not_executed("x", "forward_accuracy", "no NPU")]))
    assert d["passed"] is False and d["cells"][0]["detail"].startswith("not executed on this host")


def test_no_cells_is_not_a_pass(tmp_path):
    assert read_evidence(_write(tmp_path, []))["passed"] is False


def test_hidden_na_is_rejected():
    with pytest.raises(EvidenceError, match="hidden N/A rejected"):
        Cell(id="x", judgment="forward_accuracy", status="N/A", detail="didn't run")
    with pytest.raises(EvidenceError, match="status must be one of"):
        Cell(id="x", judgment="forward_accuracy", status="skipped", detail="")


def test_duplicate_ids_rejected(tmp_path):
    c = Cell(id="a", judgment="j", status="green", detail="")
    with pytest.raises(EvidenceError, match="duplicate cell ids"):
        _write(tmp_path, [c, c])


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda p: p.write_text("{ truncated"), "not JSON"),
        (lambda p: p.write_text("[]"), "not a JSON object"),
        (lambda p: p.write_text(json.dumps({"schema": "ws1-evidence-v1"})), "missing"),
    ],
)
def test_corrupt_evidence(tmp_path, mutate, match):
    p = _write(tmp_path, [Cell(id="a", judgment="j", status="green", detail="")])
    mutate(p)
    with pytest.raises(EvidenceError, match=match):
        read_evidence(p)


def test_tampered_counts_detected(tmp_path):
    p = _write(tmp_path, [Cell(id="a", judgment="j", status="red", detail="")])
    d = json.loads(p.read_text())
    d["cells"][0]["status"] = "green"
    p.write_text(json.dumps(d))
    with pytest.raises(EvidenceError, match="counts"):
        read_evidence(p)


def test_provenance_collect_and_validate():
    c = load_contract()
    m = load_manifest(contract=c)
    p = collect("cpu_bf16", "cpu", c, m.fixture_identity_sha256)
    assert p.device_name and p.arch_key and p.torch_version and p.git_sha
    assert validate_provenance(p, c, m.fixture_identity_sha256) == []
    import attrs

    bad = validate_provenance(attrs.evolve(p, actual_backend="cuda"), c)
    assert bad and "undeclared fallback" in bad[0]
    assert validate_provenance(attrs.evolve(p, execution_dtype="float16"), c)
    assert validate_provenance(attrs.evolve(p, contract_fingerprint="0" * 64), c)


# ---- N/A only for the manifest's (op, reason) pairs; all-N/A is not a pass --------------------------


def _na(op="pack", reason="profile_independent", id="n"):
    return Cell(
        id=id,
        judgment="forward_accuracy",
        status="N/A",
        detail="index copies",
        na_reason=reason,
        extra={} if op is None else {"op": op},
    )


def test_na_allowed_only_for_the_manifests_op_reason_pairs():
    from ws1_contract.evidence import allowed_na_pairs

    assert allowed_na_pairs() == {("pack", "profile_independent")}  # the manifest's helper_nodes
    _na()  # the one allowed pair
    for op in ("det_gemm", "attention", None):  # the right reason, a wrong (or no) op
        with pytest.raises(EvidenceError, match="not an allowed .op, reason. pair"):
            _na(op=op)
    with pytest.raises(EvidenceError, match="hidden N/A rejected"):
        _na(reason="no_gpu_here")


def test_read_evidence_rejects_an_na_the_manifest_does_not_allow(tmp_path):
    p = _write(tmp_path, [Cell(id="a", judgment="j", status="green", detail="ok"), _na()])
    assert read_evidence(p)["passed"] is True
    d = json.loads(p.read_text())
    d["cells"][1]["op"] = "det_gemm"  # a writer that bypassed Cell: an N/A on a chain op
    p.write_text(json.dumps(d))
    with pytest.raises(EvidenceError, match="cell 'n'.*not an allowed"):
        read_evidence(p)


def test_all_na_record_is_not_a_pass(tmp_path):
    p = _write(tmp_path, [_na(id="n1"), _na(id="n2")])
    d = read_evidence(p)
    assert d["passed"] is False and d["counts"] == {"green": 0, "red": 0, "N/A": 2}
    d["passed"] = True  # a record that claims a pass with nothing green
    p.write_text(json.dumps(d))
    with pytest.raises(EvidenceError, match="'passed' does not match"):
        read_evidence(p)


def test_a_record_names_its_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WS1_RUN_ID", "run-42")
    d = read_evidence(_write(tmp_path, [Cell(id="a", judgment="j", status="green", detail="ok")]))
    assert d["run_id"] == "run-42" and d["created_at"] and d["dirty"] is False
    monkeypatch.delenv("WS1_RUN_ID")
    from ws1_contract.evidence import run_id

    assert run_id().startswith("proc-") and run_id() == run_id()  # one id per process otherwise
