"""The GRPO run on vLLM + FSDP2 whole, as ``nox -s rl_onpolicy -- cpu_bf16 --engine vllm`` runs it: vLLM's CPU build
with the ws1-vllm plugin rolls out, transformers patched by apply_ws1 trains under FSDP2 on 2 gloo ranks, the
weights are pushed into vLLM after every step — 24 steps exactly on-policy under every trainer's metric name; our
variant control shows the mismatch; stock vLLM + stock transformers are recorded beside (~80 s on 2 cores)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="the vllm suite runs in .venv-vllm (bash ci/setup_vllm.sh)")

ROOT = Path(__file__).resolve().parents[3]


def test_grpo_on_vllm_and_fsdp2_is_exactly_on_policy(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ws1_matrix", "rl-onpolicy", "cpu_bf16", "--engine", "vllm", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    record = json.loads((tmp_path / "cpu_bf16" / "rl_onpolicy_vllm.json").read_text())
    assert out.returncode == 0 and record["status"] == "green", (record["problems"], out.stderr[-3000:])
    assert (tmp_path / "cpu_bf16" / "rl_onpolicy_vllm.png").stat().st_size > 10_000
    runs = record["runs"]
    assert len(runs["cpu_bf16"]) == 24
    from ws1_matrix.rl_engines import EXACT

    for x in runs["cpu_bf16"]:
        assert {k: x[k] for k in EXACT} == EXACT, x["step"]
    # the policy learns (the run is a real one, not frozen weights): reward rises from step 0
    assert runs["cpu_bf16"][-1]["reward_mean"] > runs["cpu_bf16"][0]["reward_mean"] + 0.2
    # our control: mismatch from the first step
    assert runs["variant_m_split_k"][0]["ws1/tokens_different"] > 0
    assert runs["variant_m_split_k"][0]["sampling/importance_sampling_ratio/max"] > 1.0
    # stock vLLM + stock transformers: recorded (not judged); it ran all its steps
    assert record["stock_failed"] is None and len(runs["stock"]) == 24
    assert "stock" in out.stdout and "PASS" in out.stdout
