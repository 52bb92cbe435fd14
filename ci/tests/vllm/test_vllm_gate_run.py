"""The vLLM gate run whole, as ``nox -s vllm_gate -- cpu_bf16`` runs it: vLLM's CPU build with the ws1-vllm plugin
returns teacher forcing's log-probs bitwise in every serving regime, and both negative controls come out red.

Runs in .venv-vllm (noxfile.SUITES["vllm"]); ~30 s on 2 cores (each regime's engine, the controls in subprocesses)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="the vllm suite runs in .venv-vllm (bash ci/setup_vllm.sh)")

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    evidence = tmp_path_factory.mktemp("evidence")
    out = subprocess.run(
        [sys.executable, "-m", "ws1_matrix", "vllm", "cpu_bf16", "--json", "--evidence-dir", str(evidence)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")},
    )
    record = json.loads((evidence / "cpu_bf16" / "vllm_gate.json").read_text())
    return out, record, {c["id"]: c for c in record["cells"]}


def test_the_gate_passes_with_every_regime_bitwise(gate):
    out, record, cells = gate
    assert out.returncode == 0, out.stderr[-4000:]
    from ws1_matrix.vllm_gate import REGIMES

    for regime in REGIMES:
        cell = cells[f"regime/{regime}"]
        assert cell["status"] == "green", (regime, cell["detail"])
        if regime != "provenance":
            assert cell["tokens_compared"] > 0 and cell["tokens_differing"] == 0, (regime, cell["detail"])


def test_the_regimes_were_exercised(gate):
    """Each regime did what it names: prompts prefilled in chunks, prefix-cache hits, preemptions, 64 requests."""
    _, _, cells = gate
    assert min(cells["regime/chunked_prefill_on"]["prefill_chunks"]) >= 2
    hits = cells["regime/prefix_cache_on"]["num_cached_tokens"]
    assert hits[0] == 0 and all(h > 0 for h in hits[1:])
    assert not any(cells["regime/prefix_cache_off"]["num_cached_tokens"])
    assert cells["regime/preemption"]["num_preemptions"] > 0
    assert cells["regime/alone_vs_batch"]["batch_size"] == 64
    assert cells["regime/weight_update"]["num_cached_tokens"]["after_reset_hit"] > 0


def test_both_negative_controls_came_out_red(gate):
    """Green control cells mean the controls ran as set up and their own comparison was red: stock vLLM (the plugin
    off) and the plugin on our variant kernel both miss teacher forcing."""
    _, _, cells = gate
    for name in ("stock", "variant_m_split_k"):
        cell = cells[f"control/{name}"]
        assert cell["status"] == "green", (name, cell["detail"])
        assert cell["tokens_differing"] > 0 and cell["first_mismatch"] is not None, (name, cell)
