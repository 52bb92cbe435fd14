"""report.md / report.html from a folder of evidence records."""

import pytest

from ws1_contract import Cell, EvidenceError, write_evidence
from ws1_contract.report import drift_columns, write_report

# the chain's trace points as a C10 record names them (test data: ws1_qwen3.model.NODE_ORDER is the source)
DRIFT_NODES = (
    "embedding",
    "input_layernorm",
    "q_proj",
    "q_norm",
    "k_proj",
    "k_norm",
    "v_proj",
    "rope_q",
    "rope_k",
    "attention",
    "o_proj",
    "attn_residual",
    "post_attention_layernorm",
    "gate_proj",
    "up_proj",
    "swiglu",
    "silu",
    "down_proj",
    "mlp_residual",
    "final_norm",
    "lm_head",
    "logprob",
    "batch_invariant_logp",
)
KW = dict(contract_fingerprint="c" * 64, fixture_hash="f" * 64, git_sha="0123456789abcdef", dirty=False)


def _drift_map():
    rows = [{"layer": -1, "node": "embedding", "tokens": 59, "tokens_differ": 0, "first_key": None}]
    rows += [
        {"layer": 0, "node": n, "tokens": 59, "tokens_differ": d, "first_key": None}
        for n, d in (("rope_k", 0), ("attention", 16), ("swiglu", 16))
    ]
    rows += [{"layer": 1, "node": "final_norm", "tokens": 59, "tokens_differ": 33, "first_key": None}]
    return rows


def test_report_combines_gates_and_shows_the_drift(tmp_path):
    write_evidence(
        "c7_stateful_kv",
        "cpu_bf16",
        [
            Cell(id="ok", judgment="j", status="green", detail="fine"),
            Cell(id="bad", judgment="j", status="red", detail="paged differs"),
        ],
        None,
        root=tmp_path,
        **KW,
    )
    fd = {"cell": "BN/chunked", "layer": 0, "node": "attention", "tokens": 59, "tokens_differ": 16, "first_key": None}
    write_evidence(
        "c10_negative_control",
        "cpu_bf16",
        [Cell(id="first_drift", judgment="chain_gate", status="red", detail="x")],
        None,
        root=tmp_path,
        **KW,
        extra={
            "mode": "synthetic",
            "model": "tiny",
            "grad_compare": "full",
            "first_drift": fd,
            "candidate": "variant_attn_decode_order",
            "train_infer": {"max_abs_dlogp": 2e-3, "bitwise": False},
            "gradient_invariance": {"min_bitwise": 0, "of": 25, "cells": 7},
            "drift_maps": [{**fd, "map": _drift_map(), "nodes": list(DRIFT_NODES)}],
        },
    )
    md, html = write_report(tmp_path / "cpu_bf16")
    text = md.read_text()
    assert "| c7_stateful_kv | FAIL | 1 | 1 |" in text and "`bad` — paged differs" in text
    assert "| c10_negative_control | red (expected) |" in text
    assert "First-drift view — `BN/chunked`" in text
    # the heading names the control the record holds (the first GPU run's report said "plain PyTorch ops")
    assert "## C10 negative control (variant_attn_decode_order: must be red)" in text and "plain PyTorch" not in text
    before = DRIFT_NODES.index("rope_k")  # empty cells of layer 0 before rope_k (the map has no entry there)
    assert "| layer 0 | " + " | " * before + "0/59 | **16**/59 |" in text and "| head |" in text
    h = html.read_text()
    assert "<td class='hot first'>16/59</td>" in h and h.count("<details") == 2
    assert "<h2>C10 negative control (variant_attn_decode_order: must be red)</h2>" in h
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


def _place(node):  # -1 input, 0 a decoder layer, 2 the head (of a 2-layer model)
    return (
        -1 if node == "embedding" else 2 if node in ("final_norm", "lm_head", "logprob", "batch_invariant_logp") else 0
    )


def test_html_renders_markdown_and_has_a_drift_column_per_node(tmp_path):
    """report.html as a browser shows it: no raw Markdown (``**``, backticks), the C10 facts as HTML,
    and the first-drift view with a column for every node of the chain (each GEMM, norm, qk_norm)."""
    fd = {
        "cell": "permuted",
        "layer": 1,
        "node": "q_proj",
        "kind": "det_gemm",
        "tokens": 59,
        "tokens_differ": 4,
        "first_key": {"sample_rank": 0, "position": 3},
    }
    m = [
        {"layer": i, "node": n, "tokens": 59, "tokens_differ": 4 if (i, n) == (1, "q_proj") else 0, "first_key": None}
        for i in (-1, 0, 1, 2)
        for n in DRIFT_NODES
        if _place(n) == min(i, 0) + (i == 2) * 2
    ]
    write_evidence(
        "c10_chain_gate",
        "cpu_bf16",
        [Cell(id="first_drift", judgment="chain_gate", status="red", detail="x")],
        None,
        root=tmp_path,
        **KW,
        extra={
            "mode": "synthetic",
            "model": "tiny",
            "grad_compare": "full",
            "first_drift": fd,
            "train_infer": {"max_abs_dlogp": 0.0, "bitwise": True},
            "gradient_invariance": {"min_bitwise": 25, "of": 25, "cells": 7},
            "drift_maps": [{**fd, "map": m, "nodes": list(DRIFT_NODES)}],
        },
    )
    _, html = write_report(tmp_path / "cpu_bf16")
    h = html.read_text()
    assert "**" not in h and "`" not in h, "raw Markdown in report.html"
    assert "mode <b>synthetic</b>, model <code>tiny</code>" in h
    for node in (
        "input_layernorm",
        "q_proj",
        "q_norm",
        "k_proj",
        "k_norm",
        "v_proj",
        "o_proj",
        "post_attention_layernorm",
        "gate_proj",
        "up_proj",
        "down_proj",
        "final_norm",
        "lm_head",
        "logprob",
        "batch_invariant_logp",
    ):
        assert f"<th title='{node}'>" in h, node
    assert h.count("<th title=") == len(DRIFT_NODES)
    assert "<td class='hot first'>4/59</td>" in h  # the first drifting node, outlined


def test_report_shows_only_the_records_of_one_run(tmp_path, monkeypatch):
    cell = [Cell(id="ok", judgment="j", status="green", detail="fine")]
    monkeypatch.setenv("WS1_RUN_ID", "old-run")
    write_evidence(
        "c7_stateful_kv",
        "cpu_bf16",
        [Cell(id="old", judgment="j", status="red", detail="stale red")],
        None,
        root=tmp_path,
        **KW,
    )
    monkeypatch.setenv("WS1_RUN_ID", "new-run")
    write_evidence("c1_contract", "cpu_bf16", cell, None, root=tmp_path, **KW)
    write_evidence("c11_ci", "cpu_bf16", cell, None, root=tmp_path, **KW)
    md, html = write_report(tmp_path / "cpu_bf16")  # default: the run of c11_ci.json
    text = md.read_text()
    assert "| c1_contract |" in text and "| c11_ci |" in text
    assert "c7_stateful_kv" not in text and "stale red" not in text and "stale red" not in html.read_text()
    assert "run `new-run`; 1 record(s) of other runs in this folder left out" in text
    md, _ = write_report(tmp_path / "cpu_bf16", run_id="old-run")
    assert "c7_stateful_kv" in md.read_text() and "c1_contract" not in md.read_text()
    with pytest.raises(EvidenceError, match="no evidence records to report of run nope"):
        write_report(tmp_path / "cpu_bf16", run_id="nope")


def test_drift_columns_come_from_the_record():
    assert drift_columns({"nodes": ["a", "b"], "map": _drift_map()}) == ["a", "b"]
    # an older record without them: the order the map's rows name them
    assert drift_columns({"map": _drift_map()}) == ["embedding", "rope_k", "attention", "swiglu", "final_norm"]
