"""ws1_matrix's gloo checks (FSDP2, tensor parallel, context parallel): their command lines, and a GPU profile whose
device is here red, not executed. The checks' runs (DP 1/2/4, TP 1/2/4/8, CP 1/2/4) are the parallel gate's
(test_parallel_gate.py)."""

import subprocess
import sys

from ws1_matrix import tp_check


def test_bad_arguments_exit_2_one_line():
    for gate, args in (
        ("fsdp", ["--world", "x"]),
        ("fsdp", ["--world", "0"]),
        ("fsdp", ["--models", "nope"]),
        ("fsdp", ["cuda_bf16"]),
        ("tp", ["--world", "3"]),
        ("tp", ["--world", "x"]),
        ("tp", ["cuda_bf16"]),
        ("cp", ["--world", "32"]),
        ("cp", ["--seq", "100"]),
        ("cp", ["ascend_bf16"]),
    ):
        r = subprocess.run([sys.executable, "-m", "ws1_matrix", gate, *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(f"{gate}: "), r.stderr


def test_a_gpu_profile_whose_device_is_here_is_red_not_executed(monkeypatch, tmp_path, capsys):
    """On a host with the profile's device (faked present here), the gloo checks do not run another profile: the
    record is red with the reason, exit 1 — never exit 0, never a skip."""
    import json

    import ws1_accel
    from ws1_matrix import cp_check, fsdp_check

    monkeypatch.setattr(ws1_accel, "resolve_device", lambda profile, device=None: None)
    for mod, name in ((tp_check, "tp_check"), (fsdp_check, "fsdp_check"), (cp_check, "cp_check")):
        assert mod.main(["cuda_bf16", "--evidence-dir", str(tmp_path)]) == 1
        record = json.loads((tmp_path / f"{name}.json").read_text())
        (cell,) = record["cells"]
        assert record["green"] is False and cell["green"] is False and cell["detail"].startswith("not executed")
