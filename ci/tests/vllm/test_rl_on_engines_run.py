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


def _run(tmp_path, name: str, *extra: str):
    """``python -m ws1_matrix rl-onpolicy cpu_bf16 --engine vllm EXTRA``: (the process, its record ``name``), green."""
    out = subprocess.run(
        [sys.executable, "-m", "ws1_matrix", "rl-onpolicy", "cpu_bf16", "--engine", "vllm", *extra]
        + ["--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    record = json.loads((tmp_path / "cpu_bf16" / f"{name}.json").read_text())
    assert out.returncode == 0 and record["status"] == "green", (record["problems"], out.stderr[-3000:])
    return out, record


def test_grpo_on_vllm_and_fsdp2_is_exactly_on_policy(tmp_path):
    out, record = _run(tmp_path, "rl_onpolicy_vllm")
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


def test_vllm_at_tp_2_and_the_trainer_at_dp_2_are_exactly_on_policy(tmp_path):
    """vLLM rolls out at tensor parallel 2 (two worker processes, the plugin's 8-chunk K tree across them) while the
    trainer is FSDP2 on 2 ranks with o_proj/down_proj in the same order (k_chunks=8): every step exactly on-policy,
    the same bits; our control red; the trainer in the default order beside it (shown) — 12 steps, ~150 s."""
    out, record = _run(tmp_path, "rl_onpolicy_vllm_tp2", "--tp", "2", "--steps", "12")
    assert record["tp"] == 2 and "TP 2" in out.stdout
    runs = record["runs"]
    from ws1_matrix.rl_engines import EXACT

    assert len(runs["cpu_bf16"]) == 12
    for x in runs["cpu_bf16"]:
        assert {k: x[k] for k in EXACT} == EXACT, x["step"]
    assert runs["variant_m_split_k"][0]["ws1/tokens_different"] > 0
    assert record["default_order_failed"] is None and len(runs["default_order"]) == 12
