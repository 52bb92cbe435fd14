"""C8 end to end on shrunk shapes: 96 cells per profile with every field, cpu_bf16 executed and green
(pack N/A with its reason), an absent profile red "not executed on this host", the Markdown and SVG
beside the JSON; the assembled mode; and C3/C4/C5/C8 bad input — one line, the right exit code."""

import json
import subprocess
import sys

import pytest
from small import args, make_run

from ws1_contract import load_manifest, read_evidence
from ws1_contract.evidence import ALLOWED_NA_REASONS
from ws1_matrix import inventory as c5
from ws1_matrix.__main__ import main

OPS = len(load_manifest().ops)  # the node table's nodes (12 today)
CELLS = OPS * 2 * 4


def test_matrix_cpu_executed_absent_profile_red(small_matrix):
    code, root = small_matrix
    assert code == 1  # cuda_bf16 cannot execute here: its cells are red, so the run is red
    cpu = read_evidence(root / "cpu_bf16" / "c8_matrix.json")
    assert len(cpu["cells"]) == CELLS and cpu["counts"] == {"green": CELLS - 8, "red": 0, "N/A": 8}, [
        c["detail"] for c in cpu["cells"] if c["status"] == "red"
    ][:3]
    for c in cpu["cells"]:
        assert {"profile", "op", "tier", "judgment", "status", "detail", "case_id", "kernel"} <= set(c)
        assert c["profile"] == "cpu_bf16" and c["case_id"].endswith("-cpu_bf16")
        if c["status"] == "N/A":
            assert c["op"] == "pack" and c["na_reason"] in ALLOWED_NA_REASONS and "executed on cpu" in c["detail"]
            continue
        assert c["kernel"]["kernel_ids"] == [c["kernel"]["declared"]] == [f"ws1_cpu::{c['op']}"]
        assert c["kernel"]["families"] == ["cpu"] and c["kernel"]["devices"] == ["cpu"]
        kind = "accuracy" if c["judgment"].endswith("accuracy") else "invariance"
        assert (c["lhs_role"], c["rhs_role"]) == (
            ("bf16_candidate", "fp32_reference") if kind == "accuracy" else ("transformed_config", "canonical_config")
        )
        assert c["thresholds"]["bitwise"] == (kind == "invariance") and c["max_abs_err"] is not None
        if c["judgment"].startswith("gradient"):
            assert c["kernel"]["backward"] >= 1
    assert cpu["provenance"]["actual_backend"] == "cpu" and cpu["provenance_problems"] == []
    cuda = read_evidence(root / "cuda_bf16" / "c8_matrix.json")
    assert cuda["counts"] == {"green": 0, "red": CELLS - 8, "N/A": 8}
    red = [c for c in cuda["cells"] if c["status"] == "red"]
    assert all(c["detail"].startswith("not executed on this host: cuda_bf16 needs a cuda device") for c in red)
    assert all(c["kernel"]["declared"] == f"ws1_cuda::{c['op']}" and c["kernel"]["kernel_ids"] == [] for c in red)


def test_readable_reports(small_matrix):
    _, root = small_matrix
    md = (root / "cpu_bf16" / "c8_matrix.md").read_text()
    assert "## short" in md and "## primary" in md and "| `det_gemm` | green | green | green | green |" in md
    svg = (root / "cpu_bf16" / "c8_matrix.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") >= CELLS and "#2e7d32" in svg and "#9e9e9e" in svg
    both = (root / "c8_matrix.svg").read_text()
    assert "cuda_bf16" in both and "#c62828" in both
    assert "not executed on this host" in (root / "cuda_bf16" / "c8_matrix.md").read_text()


def test_report_command_and_corrupt_record(small_matrix, tmp_path, capsys):
    _, root = small_matrix
    good = tmp_path / "c8_matrix.json"
    good.write_text((root / "cpu_bf16" / "c8_matrix.json").read_text())
    assert main(["report", str(good)]) == 0 and (tmp_path / "c8_matrix.svg").is_file()
    good.write_text(good.read_text()[:500])
    assert main(["report", str(good)]) == 1
    err = capsys.readouterr().err.strip()
    assert "corrupt evidence (not JSON" in err and "\n" not in err


def test_assembled_from_c3_c4_evidence(small_env, capsys):
    ev = small_env / "evidence"
    ops = "det_gemm,attention,pack"
    assert main(["c3", "cpu_bf16", "--op", ops, "--evidence-dir", str(ev)]) == 0
    assert main(["c4", "cpu_bf16", "--op", ops, "--evidence-dir", str(ev)]) == 0
    assert main(["c8", "cpu_bf16", "--evidence-dir", str(ev)]) == 1  # the other ops were not executed
    d = read_evidence(ev / "cpu_bf16" / "c8_matrix.json")
    by = {c["id"]: c for c in d["cells"]}
    assert by["det_gemm-primary-gradient_invariance"]["status"] == "green"
    assert by["pack-short-forward_accuracy"]["status"] == "N/A"
    assert (
        by["rope-short-forward_accuracy"]["status"] == "red"
        and "has no rope-short-forward_accuracy cell" in by["rope-short-forward_accuracy"]["detail"]
    )
    assert d["counts"] == {"green": 16, "red": CELLS - 16 - 8, "N/A": 8}
    # a C3 record from another contract is stale, not evidence for this one
    p = ev / "cpu_bf16" / "c3_forward.json"
    rec = json.loads(p.read_text())
    rec["contract_fingerprint"] = "0" * 64
    p.write_text(json.dumps(rec))
    main(["c8", "cpu_bf16", "--evidence-dir", str(ev)])
    by = {c["id"]: c for c in read_evidence(ev / "cpu_bf16" / "c8_matrix.json")["cells"]}
    assert (
        by["det_gemm-short-forward_accuracy"]["status"] == "red"
        and "stale c3_forward" in by["det_gemm-short-forward_accuracy"]["detail"]
    )
    assert by["det_gemm-short-gradient_accuracy"]["status"] == "green"
    # a hidden N/A smuggled into the evidence is rejected, with one line naming the file
    rec["contract_fingerprint"] = d["contract_fingerprint"]
    cell = next(c for c in rec["cells"] if c["id"] == "det_gemm-short-forward_accuracy")
    cell.update(status="N/A", na_reason="profile_independent")
    rec["counts"] = {"green": rec["counts"]["green"] - 1, "red": 0, "N/A": rec["counts"]["N/A"] + 1}
    p.write_text(json.dumps(rec))
    capsys.readouterr()
    assert main(["c8", "cpu_bf16", "--evidence-dir", str(ev)]) == 1
    err = capsys.readouterr().err.strip()
    assert "hidden N/A rejected" in err and "\n" not in err
    # a corrupt file: one clear line
    p.write_text("{not json")
    assert main(["c8", "cpu_bf16", "--evidence-dir", str(ev)]) == 1
    err = capsys.readouterr().err.strip()
    assert "c3_forward.json: corrupt evidence" in err and "\n" not in err


@pytest.mark.parametrize(
    "argv, expect",
    [
        (["c3", "ascend_bf16"], "ascend_bf16 needs a npu device"),
        (["c4", "cuda_bf16"], "cuda_bf16 needs a cuda device"),
        (["c3", "cpu_bf16", "--op", "softmax"], "unknown op(s) ['softmax']"),
        (["c4", "cpu_bf16", "--op", "det_gemm,conv2d"], "unknown op(s) ['conv2d']"),
        (["c8", "tpu_bf16", "--execute"], "unknown profile(s) ['tpu_bf16']"),
        (["c5", "tpu_bf16"], "unknown profile(s) ['tpu_bf16']"),
        (["c99"], "unknown command 'c99'"),
    ],
)
def test_bad_input_exit_2_one_line(argv, expect, capsys, tmp_path):
    assert main([*argv, "--evidence-dir", str(tmp_path)] if argv[0] != "c99" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert expect in err and "\n" not in err, err


def test_cli_absent_device_no_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "ws1_matrix", "c3", "ascend_bf16", "--evidence-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "ascend_bf16 needs a npu device" in r.stderr


def test_c5_inventory_verdicts(small_env, monkeypatch):
    run = make_run("c5_inventory")
    c5.c5_inventory(run, args())
    by = {c.extra["item"]: c for c in run.cells}
    assert sorted(by) == sorted(c5.items(run.manifest))
    for item, c in by.items():
        assert c.status == "green" and c.extra["verdict"] == "pass", (item, c.detail)
        assert c.extra["argument"] and len(c.extra["checks"]) >= 3
    assert any(ch["check"] == "silu(x) == swiglu(x, ones)" for ch in by["silu"].extra["checks"])
    assert any(ch["check"].startswith("layout threads1") for ch in by["residual_add"].extra["checks"])
    # absent hardware: tracked_red, red, with the reason
    run = make_run("c5_inventory", "ascend_bf16")
    c5.c5_inventory(run, args())
    assert [c.extra["verdict"] for c in run.cells] == ["tracked_red"] * len(c5.items(run.manifest))
    assert all(c.status == "red" and "not yet executed on its hardware" in c.detail for c in run.cells)
    # a check that fails on the hardware is a blocker (here: a wrong reference for the cast)
    monkeypatch.setattr(c5, "_round_bf16_bits", lambda x: (x * 1.01).to(c5.BF16))
    monkeypatch.setattr(c5, "items", lambda manifest: ["scale", "dtype_cast"])
    run = make_run("c5_inventory")
    c5.c5_inventory(run, args())
    by = {c.extra["item"]: c for c in run.cells}
    assert by["dtype_cast"].extra["verdict"] == "blocker" and by["dtype_cast"].status == "red"
    assert by["scale"].extra["verdict"] == "pass"


@pytest.mark.slow
def test_real_matrix_cpu_bf16(tmp_path):
    """The real representative cases (K 4096, N 12288, V 151936): the whole cpu_bf16 matrix green."""
    assert main(["c8", "cpu_bf16", "--execute", "--evidence-dir", str(tmp_path)]) == 0
    d = read_evidence(tmp_path / "cpu_bf16" / "c8_matrix.json")
    assert d["counts"] == {"green": CELLS - 8, "red": 0, "N/A": 8}


def test_progress_on_stderr_json_clean_on_stdout(small_env, capsys, monkeypatch):
    """C3's op loop reports progress (cells done / total, the current op) on stderr; with --json,
    stdout is exactly the JSON document."""
    monkeypatch.setenv("WS1_PROGRESS_EVERY_S", "0")  # a line per update (CI logs: one every 10 s)
    assert main(["c3", "cpu_bf16", "--op", "silu,rope", "--json", "--evidence-dir", str(small_env / "ev")]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["gate"] == "c3_forward" and doc["exit_code"] == 0 and len(doc["records"]) == 1
    assert "c3_forward cpu_bf16: 0/" in err and "— silu short" in err and "— rope primary" in err
    n = len(doc["records"][0]["cells"])
    assert f"c3_forward cpu_bf16: {n}/{n} cells" in err


def test_assembled_refuses_dirty_unknown_and_bad_provenance_sources(small_env):
    """Assembled mode: a source record of another run must name a clean, known commit equal to the
    checkout's, and every source's provenance is validated again here."""
    from ws1_contract import Cell, collect_provenance, load_contract, load_manifest, write_evidence
    from ws1_contract.provenance import git_state

    ev = small_env / "evidence"
    c = load_contract()
    m = load_manifest(contract=c)
    sha, dirty = git_state()
    cid = "det_gemm-short-forward_accuracy"
    # a C3 record as the gate writes it (cells placed in the matrix, the registry's provenance)
    cell = Cell(
        id=cid,
        judgment="forward_accuracy",
        status="green",
        detail="within atol",
        extra={"profile": "cpu_bf16", "op": "det_gemm", "tier": "short", "case_id": None},
    )
    prov = collect_provenance("cpu_bf16", "cpu", c, m.fixture_identity_sha256).to_dict()
    p = write_evidence(
        "c3_forward",
        "cpu_bf16",
        [cell],
        prov,
        contract_fingerprint=c.fingerprint,
        fixture_hash=m.fixture_identity_sha256,
        git_sha=sha,
        dirty=dirty,
        root=ev,
    )
    good = json.loads(p.read_text())

    def c8_cell(**change):
        rec = json.loads(json.dumps(good))
        for k, v in change.items():
            if k.startswith("prov_"):
                rec["provenance"][k[5:]] = v
            else:
                rec[k] = v
        p.write_text(json.dumps(rec))
        main(["c8", "cpu_bf16", "--evidence-dir", str(ev)])
        d = read_evidence(ev / "cpu_bf16" / "c8_matrix.json")
        return {c["id"]: c for c in d["cells"]}[cid]

    assert c8_cell()["status"] == "green"  # this process's own record
    old = {"run_id": "an-earlier-run"}
    assert c8_cell(**old, git_sha=sha, dirty=False)["status"] == "green"  # an old run at this clean commit
    for change, why in (
        (dict(git_sha=sha, dirty=True), "dirty tree"),
        (dict(git_sha=sha, dirty=None), "dirty tree"),
        (dict(git_sha="unknown", dirty=False), "commit unknown"),
        (dict(git_sha="f" * 40, dirty=False), "written at git ffffffffffff"),
    ):
        c = c8_cell(**old, **change)
        assert c["status"] == "red" and why in c["detail"], (change, c["detail"])
    # provenance re-validated on every source, this run's too
    for change, why in (
        (dict(prov_candidate_tf32_enabled=True), "TF32 must be disabled"),
        (dict(prov_actual_backend="triton"), "undeclared fallback"),
        (dict(prov_execution_dtype="float16"), "execution_dtype"),
        (dict(provenance=None), "provenance incomplete"),
    ):
        c = c8_cell(**change)
        assert c["status"] == "red" and "provenance" in c["detail"] and why in c["detail"], (change, c["detail"])
