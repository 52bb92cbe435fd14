"""C11's flow logic: exit 2 after the static gates on a host without the device (1 if one was red),
the negative control step shown able to fail (a 'negative control' that comes out green is red in
C11), and each step bound to the record it wrote in this run (an old record never stands in)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))

import c11  # noqa: E402


@pytest.mark.parametrize(
    "profile,device,code,static",
    [
        ("triton_cuda_bf16", "cuda", 2, "static gates green"),
        # kernels-ascend/ exists and every .asc defines its entry point: C2 green, then the absent NPU -> exit 2
        ("ascend_bf16", "npu", 2, "static gates green"),
    ],
)
def test_absent_device_after_the_static_gates(tmp_path, profile, device, code, static):
    p = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "c11.py"), profile, "--evidence-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert p.returncode == code, p.stderr[-2000:]
    line = [x for x in p.stderr.splitlines() if x.startswith("ws1 c11_ci:")]
    assert len(line) == 1 and f"{profile} needs a {device} device" in line[0] and static in line[0]
    rec = json.loads((tmp_path / profile / "c11_ci.json").read_text())
    assert [c["id"] for c in rec["cells"]] == ["c1_contract", "c2_manifest", "device"]
    assert rec["cells"][-1]["status"] == "red" and "not executed on this host" in rec["cells"][-1]["detail"]
    assert rec["run_id"].startswith("c11-") and rec["provenance"] is None  # no device: no device provenance
    assert all(c["record"]["run_id"] == rec["run_id"] for c in rec["cells"][:2])  # static steps bound to this run
    assert (tmp_path / profile / "report.md").exists()


def test_unknown_profile_exits_2(tmp_path):
    assert c11.main(["tpu_bf16", "--evidence-dir", str(tmp_path)]) == 2


class _Args:
    run_id = "this-run"
    keep_going = False

    def __init__(self, root):
        self.evidence_root = root


@pytest.fixture
def this_run(monkeypatch):
    """The environment C11 gives its gate processes: WS1_RUN_ID of this run."""
    monkeypatch.setenv("WS1_RUN_ID", _Args.run_id)


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


@pytest.mark.parametrize(
    "passed,first_drift,want",
    [
        (False, {"cell": "BN/chunked", "layer": 0, "node": "attention", "tokens_differ": 3}, "green"),
        (True, None, "red"),  # the negative control came out green: the gate could not fail
        (False, None, "red"),  # red, but with no first_drift: the drift locator did not work
    ],
)
def test_negative_control_step_must_be_red_with_a_drift(tmp_path, this_run, passed, first_drift, want):
    step = c11.Step(
        "c10_negative_control",
        "neg",
        _fake_gate(tmp_path, passed, first_drift),
        "c10_negative_control.json",
        expect_red=True,
    )
    out = c11.run_gate(step, "cpu_bf16", _Args(tmp_path))
    assert out.status == want, out.detail


def test_a_red_gate_names_its_first_red_cell(tmp_path, this_run):
    code = f"""
import sys
from ws1_contract import Cell, write_evidence
write_evidence("c7_stateful_kv", "cpu_bf16",
               [Cell(id="b2/warm", judgment="stateful_kv", status="red", detail="differs")],
               None, contract_fingerprint="f", fixture_hash="h", git_sha="s", dirty=False, root={str(tmp_path)!r})
sys.exit(1)
"""
    out = c11.run_gate(
        c11.Step("c7_stateful_kv", "C7", [sys.executable, "-c", code], "c7_stateful_kv.json"),
        "cpu_bf16",
        _Args(tmp_path),
    )
    assert out.status == "red" and "first red: b2/warm: differs" in out.detail


def _old_record(tmp_path, monkeypatch, gate, passed, extra=None):
    """A record an earlier run left in evidence/ (another run id)."""
    from ws1_contract import Cell, write_evidence

    monkeypatch.setenv("WS1_RUN_ID", "an-earlier-run")
    write_evidence(
        gate,
        "cpu_bf16",
        [Cell(id="x", judgment="j", status="green" if passed else "red", detail="old")],
        None,
        contract_fingerprint="f",
        fixture_hash="h",
        git_sha="s",
        dirty=False,
        root=tmp_path,
        extra=extra,
    )
    monkeypatch.setenv("WS1_RUN_ID", _Args.run_id)


CRASH = [sys.executable, "-c", "raise SystemExit('boom: crashed before writing its record')"]  # exit 1, no record
SILENT = [sys.executable, "-c", "pass"]  # exit 0, no record


def test_a_crashed_negative_control_is_red_despite_an_old_red_record(tmp_path, monkeypatch):
    fd = {"cell": "BN/chunked", "layer": 0, "node": "attention", "tokens_differ": 3}
    _old_record(tmp_path, monkeypatch, "c10_negative_control", False, {"first_drift": fd})
    step = c11.Step("c10_negative_control", "neg", CRASH, "c10_negative_control.json", expect_red=True)
    out = c11.run_gate(step, "cpu_bf16", _Args(tmp_path))
    assert out.status == "red" and "no evidence record of this run" in out.detail, out.detail


def test_a_step_without_its_record_is_red_despite_an_old_green_record(tmp_path, monkeypatch):
    _old_record(tmp_path, monkeypatch, "c7_stateful_kv", True)
    for cmd in (SILENT, CRASH):
        out = c11.run_gate(c11.Step("c7_stateful_kv", "C7", cmd, "c7_stateful_kv.json"), "cpu_bf16", _Args(tmp_path))
        assert out.status == "red" and "stale, corrupt or another run's" in out.detail, out.detail
        assert "record" not in out.extra
    # the same step writing its record in this run is judged by it, and names it
    from ws1_contract import read_evidence

    code = f"""
from ws1_contract import Cell, write_evidence
write_evidence("c7_stateful_kv", "cpu_bf16", [Cell(id="ok", judgment="j", status="green", detail="fine")], None,
               contract_fingerprint="f", fixture_hash="h", git_sha="s", dirty=False, root={str(tmp_path)!r})
"""
    out = c11.run_gate(
        c11.Step("c7_stateful_kv", "C7", [sys.executable, "-c", code], "c7_stateful_kv.json"),
        "cpu_bf16",
        _Args(tmp_path),
    )
    assert out.status == "green" and out.extra["record"]["run_id"] == "this-run"
    assert read_evidence(tmp_path / "cpu_bf16" / "c7_stateful_kv.json")["run_id"] == "this-run"


def test_red_static_gate_wins_over_the_absent_device(tmp_path, monkeypatch):
    def red_static(step, profile, args):
        return c11.Outcome(step, "red" if step.key == "c1_contract" else "green", "deliberately red", 0.0)

    monkeypatch.setattr(c11, "run_gate", red_static)

    class A(_Args):
        skip_tests, model, c6_models = False, "tiny", "tiny"

    rc, outcomes = c11.flow("ascend_bf16", A(tmp_path), {})  # no NPU here: before, this was exit 2
    assert rc == 1 and [o.step.key for o in outcomes] == ["c1_contract", "c2_manifest", "device"]


def test_closure_requires_exactly_the_flows_steps():
    from ws1_contract.closure import REQUIRED_STEPS

    class A(_Args):
        skip_tests, model, c6_models = False, "tiny", "tiny"

    static, device = c11.steps_for("cpu_bf16", A(Path(".")))
    assert tuple(s.key for s in static + device) == REQUIRED_STEPS


@pytest.mark.parametrize(
    "profile,cmd_tail",
    [
        ("cpu_bf16", ["nox", "-s", "tests_cpu"]),
        ("cuda_bf16", ["nox", "-s", "tests_device", "--", "cuda_bf16"]),
        ("triton_cuda_bf16", ["nox", "-s", "tests_device", "--", "triton_cuda_bf16"]),
        ("ascend_bf16", ["nox", "-s", "tests_device", "--", "ascend_bf16"]),
    ],
)
def test_the_test_step_is_cpu_bf16s_suites_on_cpu_and_the_device_tests_elsewhere(tmp_path, profile, cmd_tail):
    class A:
        evidence_root, model, c6_models, skip_tests = tmp_path, "tiny", "tiny", False

    _static, device = c11.steps_for(profile, A)
    tests = [s for s in device if s.key == "tests"]
    assert len(tests) == 1 and tests[0].cmd[-len(cmd_tail) :] == cmd_tail


def test_tests_device_refuses_a_cpu_profile_and_exits_2_without_the_device():
    nox = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "tests_device", "--"]
    p = subprocess.run([*nox, "cpu_bf16"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 1 and "runs on the CPU" in p.stderr + p.stdout
    p = subprocess.run([*nox, "cuda_bf16"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2 and "cuda_bf16 needs its device here" in p.stderr + p.stdout


def test_sigterm_mid_flow_keeps_a_red_record_of_every_profile(tmp_path):
    """`timeout` (ci/gpu_check.sh's lanes) signals the whole process group: the gate in flight dies, C11 records it red
    "stopped by SIGTERM", runs nothing after it, and still writes c11_ci.json and the report of every requested
    profile — the one it never reached says so — instead of leaving no record at all."""
    import os
    import signal

    p = subprocess.Popen(
        [sys.executable, str(ROOT / "ci" / "c11.py"), "cpu_bf16", "triton_cuda_bf16", "--evidence-dir", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen = []
    for line in p.stdout:
        seen.append(line)
        if "C1 contract" in line:  # the first gate process has started
            os.killpg(p.pid, signal.SIGTERM)
            break
    rest = p.communicate(timeout=120)[0]
    assert p.returncode == 1, "".join(seen) + rest
    rec = json.loads((tmp_path / "cpu_bf16" / "c11_ci.json").read_text())
    assert [c["id"] for c in rec["cells"]] == ["c1_contract"] and rec["stopped_at"] == "c1_contract"
    assert rec["cells"][0]["status"] == "red" and "stopped by SIGTERM" in rec["cells"][0]["detail"]
    other = json.loads((tmp_path / "triton_cuda_bf16" / "c11_ci.json").read_text())
    assert [(c["id"], c["status"]) for c in other["cells"]] == [("stopped", "red")]
    assert (tmp_path / "cpu_bf16" / "report.md").exists()


@pytest.mark.parametrize("keep_going", [False, True])
def test_keep_going_runs_every_step_after_a_red_one_and_stays_red(tmp_path, monkeypatch, keep_going):
    """ci/gpu_check.sh runs C11 with --keep-going: a red step (here C3) no longer costs the verdicts of the gates after
    it, and the flow is red all the same; without it the flow stops there (CPU CI: fail fast)."""

    def gate(step, profile, args):
        return c11.Outcome(step, "red" if step.key == "c3_forward" else "green", "deliberately red", 0.0)

    monkeypatch.setattr(c11, "run_gate", gate)

    class A(_Args):
        skip_tests, model, c6_models = True, "tiny", "tiny"

    A.keep_going = keep_going
    rc, outcomes = c11.flow("cpu_bf16", A(tmp_path), {})
    keys = [o.step.key for o in outcomes]
    assert rc == 1 and [o.step.key for o in outcomes if o.status == "red"] == ["c3_forward"]
    assert keys[-1] == ("c10_negative_control" if keep_going else "c3_forward")
    assert ("c10_chain_gate" in keys) is keep_going
