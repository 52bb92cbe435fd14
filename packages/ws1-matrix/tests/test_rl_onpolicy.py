"""rl-onpolicy: the side-by-side run writes its record and plot, and its verdict can fail both ways."""

import json

from ws1_matrix import rl_onpolicy


def test_side_by_side_run_writes_json_and_png(tmp_path, capsys):
    code = rl_onpolicy.main(
        ["cpu_bf16", "--steps", "2", "--candidates", "variant_attn_decode_order", "--out", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    rec = json.loads((tmp_path / "cpu_bf16" / "rl_onpolicy.json").read_text())
    assert set(rec["runs"]) == {"cpu_bf16", "variant_attn_decode_order"} and rec["status"] == "green"
    assert all(x["ws1/max_abs_dlogp"] == 0 for x in rec["runs"]["cpu_bf16"])
    assert (tmp_path / "cpu_bf16" / "rl_onpolicy.png").stat().st_size > 10_000
    assert "PASS" in out and "steps with differing tokens" in out


def test_verdict_red_when_off_policy_or_control_clean():
    on = {
        "step": 0,
        "ws1/max_abs_dlogp": 0.0,
        "ws1/tokens_different": 0,
        "rollout_corr/rollout_is_min": 1.0,
        "rollout_corr/rollout_is_max": 1.0,
    }
    off = {**on, "ws1/max_abs_dlogp": 1e-3, "ws1/tokens_different": 4, "rollout_corr/rollout_is_min": 0.999}
    assert rl_onpolicy.verdict("cpu_bf16", {"cpu_bf16": [on], "variant_x": [off]}) == []
    assert "not bitwise on-policy" in rl_onpolicy.verdict("cpu_bf16", {"cpu_bf16": [off]})[0]
    assert "shows no mismatch" in rl_onpolicy.verdict("cpu_bf16", {"cpu_bf16": [on], "variant_x": [on]})[0]


def test_bad_arguments_exit_2(capsys):
    assert rl_onpolicy.main(["cpu_bf16", "--steps", "0"]) == 2
    assert rl_onpolicy.main(["cpu_bf16", "--candidates", "nope"]) == 2
    assert rl_onpolicy.main(["ascend_bf16"]) == 2
    err = capsys.readouterr().err
    assert "unknown candidate" in err and "needs a npu device" in err


def test_engine_vllm_without_vllm_or_on_another_profile_exits_2_one_line():
    """--engine vllm fails closed: no vLLM in this interpreter (the main .venv), or a profile ws1-vllm cannot serve."""
    import importlib.util
    import subprocess
    import sys

    cases = [["cuda_bf16", "--engine", "vllm"]]
    if importlib.util.find_spec("vllm") is None:
        cases.append(["cpu_bf16", "--engine", "vllm"])
    for args in cases:
        r = subprocess.run([sys.executable, "-m", "ws1_matrix", "rl-onpolicy", *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr[-2000:])
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("ws1 rl-onpolicy: "), r.stderr


def test_engine_vllm_on_a_present_gpu_profile_is_red_not_executed(monkeypatch, tmp_path):
    """--engine vllm with a GPU profile whose device is here (faked present): not executed there, red with the
    reason, exit 1."""
    import ws1_accel

    monkeypatch.setattr(ws1_accel, "unavailable_reason", lambda profile: None)
    assert rl_onpolicy.main(["cuda_bf16", "--engine", "vllm", "--out", str(tmp_path)]) == 1
    record = json.loads((tmp_path / "cuda_bf16" / "rl_onpolicy_vllm.json").read_text())
    assert record["status"] == "red" and record["problems"][0].startswith("not executed")
