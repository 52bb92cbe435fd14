"""ws1_matrix's tensor-parallel check on gloo at TP 1, 2, 4 and 8 (8 processes): the log-probs of a tiny model with
Qwen3's 151,936-token vocabulary and of one Qwen3-8B-shaped layer are the same bits at every degree in the
parallel-invariant order; the row-parallel sum's controls (the default order under the split, our rank fold) red."""

import subprocess
import sys

from ws1_matrix import tp_check


def test_tp_1_2_4_8_same_logprobs():
    record = tp_check.run("cpu_bf16", [1, 2, 4, 8])
    assert record["green"], [c for c in record["cells"] if c["green"] is False]
    by = {(c["world"], c["model"], c["cell"]): c for c in record["cells"]}
    for world in (1, 2, 4, 8):
        for model in ("tiny-tp", "qwen3-8b-layer"):
            assert by[(world, model, "tp_logp")]["differ"] == 0 and by[(world, model, "tp_logp")]["n"] == 44
        assert by[(world, "gemm", "gemm_tree")]["differ"] == 0
    for world in (2, 4, 8):
        assert by[(world, "gemm", "control_gemm_serial_split")]["differ"] > 1000
        # on the 8B-shaped layer the default order under the split reaches the log-probs (a fixed function of fixed
        # inputs on ISA-invariant kernels: the same count on every host)
        assert by[(world, "qwen3-8b-layer", "control_logp_serial_split")]["differ"] > 0
    for world in (4, 8):
        assert by[(world, "gemm", "control_gemm_rank_fold")]["differ"] > 1000


def test_bad_arguments_exit_2_one_line():
    for args in (["--world", "3"], ["--world", "x"], ["cuda_bf16"]):
        r = subprocess.run([sys.executable, "-m", "ws1_matrix", "tp", *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("tp: "), r.stderr


def test_a_gpu_profile_whose_device_is_here_is_red_not_executed(monkeypatch, tmp_path, capsys):
    """On a host with the profile's device (faked present here), the gloo checks do not run another profile: the
    record is red with the reason, exit 1 — never exit 0, never a skip."""
    import json

    import ws1_accel
    from ws1_matrix import fsdp_check

    monkeypatch.setattr(ws1_accel, "resolve_device", lambda profile, device=None: None)
    for mod, name in ((tp_check, "tp_check"), (fsdp_check, "fsdp_check")):
        assert mod.main(["cuda_bf16", "--evidence-dir", str(tmp_path)]) == 1
        record = json.loads((tmp_path / f"{name}.json").read_text())
        (cell,) = record["cells"]
        assert record["green"] is False and cell["green"] is False and cell["detail"].startswith("not executed")
