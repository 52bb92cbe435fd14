"""The vLLM gate's judgment, checked where vLLM is absent (.venv): a host without vLLM gets every cell red, not
executed, with the reason (never N/A, never green); a profile whose device is absent exits 2; one flipped bit of
one log-prob is a mismatch, named; a negative control is green only when its own record, of this run, came out red.

The gate itself, with vLLM, runs in the vllm suite (ci/tests/vllm, in .venv-vllm)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ws1_matrix import vllm_gate
from ws1_matrix.vllm_gate import Seq, Tally, bits, control_verdict

ROOT = Path(__file__).resolve().parents[2]


def _gate(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "ws1_matrix", "vllm", *args, "--evidence-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this interpreter")
def test_without_vllm_every_cell_is_red_not_executed(tmp_path):
    out = _gate(tmp_path, "cpu_bf16")
    assert out.returncode == 1, out.stderr[-2000:]
    record = json.loads((tmp_path / "cpu_bf16" / "vllm_gate.json").read_text())
    ids = [c["id"] for c in record["cells"]]
    assert ids == [f"regime/{r}" for r in vllm_gate.REGIMES] + [f"control/{c}" for c in vllm_gate.CONTROLS]
    for c in record["cells"]:
        assert c["status"] == "red" and c["detail"].startswith("not executed"), c
        assert "vllm is not importable" in c["detail"] and "setup_vllm.sh" in c["detail"], c["detail"]


def test_a_profile_whose_device_is_absent_exits_2(tmp_path):
    import ws1_accel

    if ws1_accel.unavailable_reason("cuda_bf16") is None:
        pytest.skip("this host has a CUDA device")
    out = _gate(tmp_path, "cuda_bf16")
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    record = json.loads((tmp_path / "cuda_bf16" / "vllm_gate.json").read_text())
    assert {c["status"] for c in record["cells"]} == {"red"}
    assert all("no cuda device" in c["detail"] for c in record["cells"]), record["cells"][0]["detail"]


def test_one_flipped_bit_is_a_mismatch():
    x = -6.809849739074707
    flipped = float.fromhex(x.hex()[:-1] + format(int(x.hex()[-1], 16) ^ 1, "x"))
    assert x != flipped and bits(x) != bits(flipped)
    seq = Seq("r", (5, 6), (7, 8), {2: x, 3: -1.5}, 0)
    same, off = Tally(), Tally()
    same.add(seq, {2: x, 3: -1.5})
    off.add(seq, {2: flipped, 3: -1.5})
    assert (same.compared, same.differing, same.first) == (2, 0, None)
    assert (off.compared, off.differing) == (2, 1)
    assert off.first == {"request": "r", "position": 2, "got": x, "want": flipped}
    missing = Tally()
    missing.add(seq, {2: x})  # a log-prob teacher forcing has no value for is a mismatch too
    assert missing.differing == 1 and missing.first["want"] is None


def _control_record(tmp_path, run_id: str, setup: str, parity: str, differing: int):
    path = tmp_path / "cpu_bf16" / "vllm_negative_control_stock.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [
        {"id": "control/setup", "status": setup, "detail": "plugin off"},
        {"id": "control/vs_teacher_forcing", "status": parity, "detail": "d", "tokens_differing": differing},
    ]
    path.write_text(json.dumps({"run_id": run_id, "cells": cells}))


def test_a_control_is_green_only_when_its_record_of_this_run_is_red(tmp_path, monkeypatch):
    import ws1_contract.evidence as ev

    monkeypatch.setattr(ev, "read_evidence", lambda p: json.loads(Path(p).read_text()))
    monkeypatch.setattr(ev, "run_id", lambda: "this-run")
    d = str(tmp_path)
    _control_record(tmp_path, "this-run", "green", "red", 110)
    assert control_verdict("cpu_bf16", "stock", 1, d).status == "green"
    _control_record(tmp_path, "this-run", "green", "green", 0)  # the control matched: the gate cannot fail
    assert control_verdict("cpu_bf16", "stock", 0, d).status == "red"
    _control_record(tmp_path, "an-older-run", "green", "red", 110)  # another run's record never stands in
    assert control_verdict("cpu_bf16", "stock", 1, d).status == "red"
    _control_record(tmp_path, "this-run", "red", "red", 110)  # not set up as it should be (e.g. the plugin ran)
    assert control_verdict("cpu_bf16", "stock", 1, d).status == "red"
    (tmp_path / "cpu_bf16" / "vllm_negative_control_stock.json").unlink()
    assert control_verdict("cpu_bf16", "stock", 1, d).status == "red"
