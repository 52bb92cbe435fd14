"""The C1/C2 gates and CLI: exit codes, one-line errors (no traceback), evidence written."""

import json
import shutil
import subprocess
import sys

import pytest

from ws1_contract import locate, read_evidence
from ws1_contract.cli import main


def test_c1_green_for_every_profile(tmp_path, capsys):
    assert main(["c1", "--evidence-dir", str(tmp_path)]) == 0
    for p in ("cpu_bf16", "triton_cuda_bf16", "cuda_bf16", "ascend_bf16"):
        d = read_evidence(tmp_path / p / "c1_contract.json")
        assert d["passed"] and d["counts"]["green"] >= 20


def test_c2_writes_evidence_with_a_cell_per_node(tmp_path):
    main(["c2", "cpu_bf16", "--evidence-dir", str(tmp_path)])
    d = read_evidence(tmp_path / "cpu_bf16" / "c2_manifest.json")
    ids = {c["id"] for c in d["cells"]}
    assert {"node-det_gemm", "cases-attention-long", "fixture-hash", "validator-rejects-fixture-edit"} <= ids


def test_c2_missing_source_is_red(tmp_path, monkeypatch):
    work = tmp_path / "repo"
    shutil.copytree(locate.contracts_dir(), work / "contracts")
    (work / "noxfile.py").write_text("")
    monkeypatch.setenv("WS1_CONTRACTS_DIR", str(work / "contracts"))
    assert main(["c2", "cpu_bf16", "--evidence-dir", str(tmp_path / "ev")]) == 1
    d = read_evidence(tmp_path / "ev" / "cpu_bf16" / "c2_manifest.json")
    red = [c for c in d["cells"] if c["status"] == "red"]
    assert red and all("declared kernel source not found" in c["detail"] for c in red)


def test_unknown_profile_exit_2(capsys):
    assert main(["c1", "tpu_bf16"]) == 2
    assert "unknown profile" in capsys.readouterr().err


def test_json_output(tmp_path, capsys):
    assert main(["c1", "cpu_bf16", "--json", "--evidence-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exit_code"] == 0 and out["records"][0]["gate"] == "c1_contract"


def test_broken_contract_one_line_no_traceback(tmp_path):
    shutil.copytree(locate.contracts_dir(), tmp_path / "c")
    p = tmp_path / "c" / "tolerance_contract.json"
    d = json.loads(p.read_text())
    d["judgments"]["gradient_invariance"]["by_op_class"]["logprob"]["float32"]["rtol"] = 1e-9
    p.write_text(json.dumps(d))
    r = subprocess.run(
        [sys.executable, "-m", "ws1_contract", "c1", "cpu_bf16"],
        capture_output=True,
        text=True,
        env={"WS1_CONTRACTS_DIR": str(tmp_path / "c"), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0
    assert (
        "judgments.gradient_invariance.by_op_class.logprob.float32.rtol: an invariance threshold must be 0" in r.stderr
    )


def test_non_json_manifest_one_line(tmp_path):
    shutil.copytree(locate.contracts_dir(), tmp_path / "c")
    (tmp_path / "c" / "ws1_manifest.json").write_text("not json at all")
    r = subprocess.run(
        [sys.executable, "-m", "ws1_contract", "c2"],
        capture_output=True,
        text=True,
        env={"WS1_CONTRACTS_DIR": str(tmp_path / "c"), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr and "not JSON" in r.stderr


@pytest.mark.parametrize("cmd", [["show"], ["show", "--json"]])
def test_show(cmd, capsys):
    assert main(cmd) == 0
    assert "fixture_identity_sha256" in capsys.readouterr().out


def test_rehash(tmp_path, monkeypatch, capsys):
    shutil.copytree(locate.contracts_dir(), tmp_path / "c")
    monkeypatch.setenv("WS1_CONTRACTS_DIR", str(tmp_path / "c"))
    p = tmp_path / "c" / "ws1_manifest.json"
    d = json.loads(p.read_text())
    d["fixtures"]["short"]["prompt"][0] = 311
    p.write_text(json.dumps(d))
    assert main(["c2", "cpu_bf16", "--evidence-dir", str(tmp_path)]) == 1  # hash mismatch: refused
    assert main(["rehash"]) == 0
    assert "->" in capsys.readouterr().out
    from ws1_contract import load_manifest

    load_manifest()  # validates again


# ---- exit codes follow the cells: red wins over an absent device -----------------------------------


def _body_red_on_cpu(run, args):
    from ws1_contract import Cell

    run.add(
        Cell(id="x", judgment="j", status="red" if run.profile == "cpu_bf16" else "green", detail="deliberately red")
    )


def _body_green(run, args):
    from ws1_contract import Cell

    run.add(Cell(id="x", judgment="j", status="green", detail="ok"))


@pytest.mark.parametrize("profiles", [["cpu_bf16", "ascend_bf16"], ["ascend_bf16", "cpu_bf16"]])
def test_red_cell_wins_over_an_absent_device(tmp_path, profiles, capsys):
    from ws1_contract import gate_main

    # ascend_bf16's device is absent here (no torch_npu): before, that exit 2 hid cpu_bf16's red cell
    code = gate_main("cx_probe", _body_red_on_cpu, [*profiles, "--evidence-dir", str(tmp_path)], needs_device=True)
    assert code == 1
    assert "ascend_bf16 needs a npu device" in capsys.readouterr().err
    assert gate_main("cx_probe", _body_green, [*profiles, "--evidence-dir", str(tmp_path)], needs_device=True) == 2
    assert gate_main("cx_probe", _body_green, ["cpu_bf16", "--evidence-dir", str(tmp_path)], needs_device=True) == 0


def test_exit_code_rule():
    from ws1_contract.gate import exit_code

    assert [exit_code(o) for o in ([0, 2, 1], [2, 1], [1, 2], [2, 0], [0, 0], [])] == [1, 1, 1, 2, 0, 1]


# ---- closure: the WS1 verdict over several hosts' C11 records ---------------------------------------


def _c11(root, profile, *, device_type, arch, family=None, red_at=None, dirty=False, sha="a" * 40, drop=()):
    from ws1_contract import Cell, load_contract, load_manifest, write_evidence
    from ws1_contract.closure import REQUIRED_STEPS

    c = load_contract()
    m = load_manifest(contract=c)
    cells = [
        Cell(id=s, judgment="ci_step", status="red" if s == red_at else "green", detail="x")
        for s in REQUIRED_STEPS
        if s not in drop
    ]
    prov = {
        "profile": profile,
        "family": family or c.family(profile),
        "device_type": device_type,
        "device": device_type,
        "device_name": f"a {device_type}",
        "arch_key": arch,
        "host": f"host-{profile}",
    }
    write_evidence(
        "c11_ci",
        profile,
        cells,
        prov,
        contract_fingerprint=c.fingerprint,
        fixture_hash=m.fixture_identity_sha256,
        git_sha=sha,
        dirty=dirty,
        root=root,
        extra={"exit_code": 1 if red_at else 0},
    )


_SUITES = ["ascend_emu", "cpu", "cuda_build", "triton_aot", "triton_interp"]


def _full_run(root, **over):
    """The record `nox -s tests` (CI's full run) writes under an evidence root, green unless ``over`` changes it."""
    rec = {
        "kind": "ws1-tests-v1",
        "session": "tests",
        "suites": _SUITES,
        "of": _SUITES,
        "marker": "not slow",
        "posargs": [],
        "passed": True,
        "processes": [{"suites": _SUITES, "exit_code": 0, "seconds": 1.0, "counts": {"tests": 9}}],
        "git_sha": "a" * 40,
        "dirty": False,
        "record_id": None,
        "host": "ci",
        "created_at": "2026-12-07T00:00:00+00:00",
    }
    rec.update(over)
    (root / "ci").mkdir(parents=True, exist_ok=True)
    (root / "ci" / "tests.json").write_text(json.dumps(rec))


def _hosts(tmp_path, full_run=None, **over):
    """Four hosts' evidence roots, each green for its own profile, unless ``over`` changes one; the CPU host's root
    also holds CI's full test run (``full_run``: changes to its record, or False for none)."""
    spec = {
        "cpu_bf16": dict(device_type="cpu", arch="avx512"),
        "triton_cuda_bf16": dict(device_type="cuda", arch="sm90"),
        "cuda_bf16": dict(device_type="cuda", arch="sm90"),
        "ascend_bf16": dict(device_type="npu", arch="Ascend910B3"),
    }
    dirs = []
    for p, kw in spec.items():
        d = tmp_path / f"host-{p}"
        _c11(d, p, **{**kw, **over.get(p, {})})
        if p == "cpu_bf16" and full_run is not False:
            _full_run(d, **(full_run or {}))
        dirs.append(str(d))
    return dirs


def test_closure_closed_only_when_every_profile_is_green_on_its_own_hardware(tmp_path, capsys):
    from ws1_contract.closure import main as closure

    dirs = _hosts(tmp_path)
    assert closure(dirs) == 0
    assert "WS1 closure: CLOSED" in capsys.readouterr().out
    assert closure(dirs + ["--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert (
        v["closed"] is True
        and v["missing"] == []
        and set(v["profiles"]) == {"cpu_bf16", "triton_cuda_bf16", "cuda_bf16", "ascend_bf16"}
    )
    assert main(["closure", *dirs]) == 0  # the ws1-contract command
    r = subprocess.run([sys.executable, "-m", "ws1_contract", "closure", *dirs], capture_output=True, text=True)
    assert r.returncode == 0 and "CLOSED" in r.stdout


@pytest.mark.parametrize(
    "over, why",
    [
        ({"cuda_bf16": dict(red_at="c3_forward")}, "red at c3_forward"),
        (
            {"cuda_bf16": dict(device_type="cpu", arch="avx512")},
            "ran on a 'cpu' device, cuda_bf16 needs 'cuda'",
        ),  # a CPU host's record
        ({"ascend_bf16": dict(arch="sm90")}, "arch key 'sm90' is not a npu arch"),
        ({"triton_cuda_bf16": dict(family="cuda")}, "provenance names triton_cuda_bf16/cuda"),
        ({"cpu_bf16": dict(dirty=True)}, "dirty tree"),
        ({"cpu_bf16": dict(sha="unknown")}, "commit unknown"),
        ({"cpu_bf16": dict(drop=("tests",))}, "incomplete flow: steps ['tests'] not run"),
        ({"cpu_bf16": dict(sha="b" * 40)}, "from 2 commits"),
    ],
)
def test_closure_not_closed_lists_what_is_missing(tmp_path, capsys, over, why):
    from ws1_contract.closure import main as closure

    assert closure(_hosts(tmp_path, **over) + ["--json"]) == 1
    v = json.loads(capsys.readouterr().out)
    assert v["closed"] is False and any(why in m for m in v["missing"]), v["missing"]


@pytest.mark.parametrize(
    "full_run, why",
    [
        (
            False,
            "CI's full test run (nox -s tests, evidence/ci/tests.json) green at the same commit: none at aaaaaaaaaaaa",
        ),
        ({"git_sha": "b" * 40}, "none at aaaaaaaaaaaa (found at bbbbbbbbbbbb)"),
        (
            {"passed": False, "processes": [{"suites": ["cuda_build"], "exit_code": 1}]},
            "red: suites cuda_build (exit 1)",
        ),
        ({"suites": ["cpu"]}, "ran suites ['cpu'] of"),  # C11's CPU step alone is not CI's run
        ({"session": "tests_cpu"}, "not a record of nox -s tests"),
        ({"posargs": ["-k", "gemm"]}, "a filtered run"),
        ({"dirty": True}, "dirty tree"),
    ],
)
def test_closure_needs_cis_full_test_run_at_the_same_commit(tmp_path, capsys, full_run, why):
    """Each host's C11 test step runs only its own profile's suites; closure also asks for CI's full run, green,
    complete and unfiltered, from the commit of the C11 records."""
    from ws1_contract.closure import main as closure

    assert closure(_hosts(tmp_path, full_run=full_run) + ["--json"]) == 1
    v = json.loads(capsys.readouterr().out)
    assert v["closed"] is False and len(v["missing"]) == 1 and why in v["missing"][0], v["missing"]


def test_closure_a_missing_profile_and_bad_input(tmp_path, capsys):
    from ws1_contract.closure import main as closure

    dirs = _hosts(tmp_path)
    assert closure(dirs[:1]) == 1  # only the CPU host's evidence
    out = capsys.readouterr().out
    assert "NOT CLOSED" in out and "triton_cuda_bf16: no C11 record" in out and "cpu_bf16           green" in out
    assert closure([]) == 2
    assert closure([str(tmp_path / "nowhere")]) == 2
    (tmp_path / "empty").mkdir()
    assert closure([str(tmp_path / "empty")]) == 2
    p = tmp_path / "host-cpu_bf16" / "cpu_bf16" / "c11_ci.json"
    p.write_text("{ corrupt")
    assert closure(dirs) == 2
    assert "corrupt evidence" in capsys.readouterr().err
