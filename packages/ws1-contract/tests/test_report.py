"""report.md / report.html from a folder of evidence records."""

import pytest

from ws1_contract import Cell, EvidenceError, write_evidence
from ws1_contract.report import write_report

KW = dict(contract_fingerprint="c" * 64, fixture_hash="f" * 64, git_sha="0123456789abcdef", dirty=False)


def _drift_map():
    rows = [{"layer": -1, "node": "embedding", "tokens": 59, "tokens_differ": 0, "first_key": None}]
    rows += [{"layer": 0, "node": n, "tokens": 59, "tokens_differ": d, "first_key": None}
             for n, d in (("rope_k", 0), ("attention", 16), ("swiglu", 16))]
    rows += [{"layer": 1, "node": "final_norm", "tokens": 59, "tokens_differ": 33, "first_key": None}]
    return rows


def test_report_combines_gates_and_shows_the_drift(tmp_path):
    write_evidence("c7_stateful_kv", "cpu_bf16", [Cell(id="ok", judgment="j", status="green", detail="fine"),
                                                  Cell(id="bad", judgment="j", status="red", detail="paged differs")],
                   None, root=tmp_path, **KW)
    fd = {"cell": "BN/chunked", "layer": 0, "node": "attention", "tokens": 59, "tokens_differ": 16, "first_key": None}
    write_evidence("c10_negative_control", "cpu_bf16", [Cell(id="first_drift", judgment="chain_gate", status="red", detail="x")],
                   None, root=tmp_path, **KW,
                   extra={"mode": "synthetic", "model": "tiny", "grad_compare": "full", "first_drift": fd,
                          "train_infer": {"max_abs_dlogp": 2e-3, "bitwise": False},
                          "gradient_invariance": {"min_bitwise": 0, "of": 25, "cells": 7},
                          "drift_maps": [{**fd, "map": _drift_map()}]})
    md, html = write_report(tmp_path / "cpu_bf16")
    text = md.read_text()
    assert "| c7_stateful_kv | FAIL | 1 | 1 |" in text and "`bad` — paged differs" in text
    assert "| c10_negative_control | red (expected) |" in text
    assert "First-drift view — `BN/chunked`" in text
    assert "| layer 0 |  | 0/59 | **16**/59 |" in text and "| head |" in text
    h = html.read_text()
    assert "<td class=hot>16/59" in h and h.count("<details") == 2
    assert "Warning" not in text


def test_report_warns_when_records_come_from_different_commits(tmp_path):
    cell = [Cell(id="ok", judgment="j", status="green", detail="fine")]
    write_evidence("c1_contract", "cpu_bf16", cell, None, root=tmp_path, **KW)
    write_evidence("c7_stateful_kv", "cpu_bf16", cell, None, root=tmp_path, **{**KW, "git_sha": "fedcba9876543210"})
    md, _ = write_report(tmp_path / "cpu_bf16")
    assert "records from 2 commits" in md.read_text()


def test_corrupt_record_is_an_error_not_skipped(tmp_path):
    d = tmp_path / "cpu_bf16"
    d.mkdir()
    (d / "c6_decode_prefill.json").write_text("{not json")
    with pytest.raises(EvidenceError, match="corrupt evidence"):
        write_report(d)
    with pytest.raises(EvidenceError, match="no evidence folder"):
        write_report(tmp_path / "nowhere")
