"""The parallel gate's command, as ``nox -s parallel_gate -- cpu_bf16`` runs it (CI runs it here, once): the FSDP2,
tensor-parallel and context-parallel checks on gloo (up to 8 processes), each record's cells checked, and the gate's
verdict wired to its checks' (a red check is a red gate; an absent device exit 2)."""

import json
import subprocess
import sys

import pytest

from ws1_matrix import gloo_checks, parallel_gate


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    out = tmp_path_factory.mktemp("parallel")
    r = subprocess.run(
        [sys.executable, "-m", "ws1_matrix", "parallel", "cpu_bf16", "--json", "--evidence-dir", str(out)],
        capture_output=True,
        text=True,
    )
    return r, out


def _record(gate, name: str) -> dict:
    return json.loads((gate[1] / f"{name}.json").read_text())


def test_the_gate_is_green_and_its_stdout_is_one_json_record(gate):
    r, out = gate
    assert r.returncode == 0, r.stderr[-3000:]
    record = json.loads(r.stdout)
    assert record == json.loads((out / "parallel_gate.json").read_text())
    assert [c["check"] for c in record["checks"]] == ["fsdp", "tp", "cp"]
    assert record["green"] and all(c["green"] and c["exit"] == 0 for c in record["checks"])


def test_fsdp_1_2_4_ranks_untied_and_tied(gate):
    """FSDP2 at 1, 2, 4 ranks, WS1's model and transformers' patched: per-rank log-probs == one device, gradients
    bitwise run to run; in sample_tree order the gradients == one device's at every world size, while the default
    order under the split and our rank fold differ (red as required), and our variant kernels' log-probs differ."""
    record = _record(gate, "fsdp_check")
    cells = record["cells"]
    assert record["green"], [c for c in cells if c["green"] is False]
    by = {(c["world"], c["model"], c["cell"]): c for c in cells}
    models = ("tiny/ws1", "tiny/hf", "tiny-tied/ws1", "tiny-tied/hf")
    always = {"logp", "run_to_run", "control", "control_run_to_run", "tree_grads"}
    expected = {
        1: always | {"dp1"},
        2: always | {"serial_across_world", "control_pg_sum"},
        4: always | {"serial_across_world", "control_pg_sum", "control_rank_fold"},
    }
    assert {(w, m, c) for (w, m, c) in by} == {(w, m, c) for w, cs in expected.items() for m in models for c in cs}
    for (_world, _model, name), cell in by.items():
        if name in ("logp", "run_to_run", "dp1", "tree_grads"):
            assert cell["green"], cell
        if name in ("dp1", "tree_grads"):
            # one device's bits: at world 1 in both orders, at every world size in the parallel-invariant one
            assert cell["elements_differ"] == 0 and cell["max_abs_diff"] == 0, cell
        if name in ("control", "control_run_to_run", "serial_across_world", "control_rank_fold"):
            assert cell["red_required"] and cell["green"], cell
        if name == "serial_across_world":
            # what the default order gives under a split: each rank's BF16 gradient is its own rows' canonical sum
            assert cell["elements_differ"] > 0 and 0 < cell["max_abs_diff"] < 1e-2, cell
    # WS1's model and the patched transformers model: the same bits, so the same differences
    for world in (2, 4):
        for m in ("tiny", "tiny-tied"):
            a, b = by[(world, f"{m}/ws1", "serial_across_world")], by[(world, f"{m}/hf", "serial_across_world")]
            assert (a["elements_differ"], a["max_abs_diff"]) == (b["elements_differ"], b["max_abs_diff"])


def test_tp_1_2_4_8_same_logprobs(gate):
    """The log-probs of a tiny model with Qwen3's 151,936-token vocabulary and of one Qwen3-8B-shaped layer: the same
    bits at TP 1, 2, 4, 8; the row-parallel sum's controls (the default order under the split, our rank fold) red."""
    record = _record(gate, "tp_check")
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


def test_cp_1_2_4_same_attention_gradients_and_logprobs(gate):
    """One 2,048-token sequence, Qwen3-8B's heads: the output and dq equal the one-device default kernel's, dk/dv
    equal CP 1's (the chunk tree) at every degree, the model's log-probs equal one device's and its weight gradients
    CP 1's; the ring merge (torch's order), the default order under the split and the rank fold change the bits (red
    as required)."""
    record = _record(gate, "cp_check")
    assert record["green"], [c for c in record["cells"] if c["green"] is False]
    assert record["seq"] == 2048
    by = {(c["world"], c["cell"]): c for c in record["cells"]}
    for world in (1, 2, 4):
        for cell, n in (("cp_out", 2048 * 32 * 128), ("cp_dq", 2048 * 32 * 128), ("cp_dkdv", 2 * 2048 * 8 * 128)):
            assert by[(world, cell)]["differ"] == 0 and by[(world, cell)]["n"] == n, by[(world, cell)]
        assert by[(world, "cp_logp")]["differ"] == 0 and by[(world, "cp_logp")]["n"] == 2047
        # training under CP (FSDP2 over the CP group, chunk_tree): every weight gradient element as at CP 1
        assert by[(world, "cp_grads")]["differ"] == 0 and by[(world, "cp_grads")]["n"] == 656_128
    for world in (2, 4):
        assert by[(world, "control_ring_out")]["differ"] > 100_000
        assert by[(world, "control_serial_split")]["differ"] > 100
        assert by[(world, "control_grads_serial")]["differ"] > 10_000
    assert by[(4, "control_rank_fold")]["differ"] > 0
    for (_world, name), c in by.items():
        if name.startswith("control_") and c["green"] is not None:
            assert c["red_required"] and c["green"], c


def _fake(codes):
    """Checks that return the given exit codes (the gate's wiring alone)."""
    return tuple((name, type("M", (), {"main": staticmethod(lambda argv, rc=rc: rc)})) for name, rc in codes)


@pytest.mark.parametrize(
    ("codes", "verdict"),
    [((0, 0, 0), 0), ((0, 1, 0), 1), ((1, 2), 1), ((2,), 2)],
)
def test_the_verdict_is_the_checks_red_first(monkeypatch, tmp_path, codes, verdict):
    monkeypatch.setattr(parallel_gate, "CHECKS", _fake(zip(("fsdp", "tp", "cp"), codes)))
    assert parallel_gate.main(["cpu_bf16", "--evidence-dir", str(tmp_path)]) == verdict
    if verdict != gloo_checks.EXIT_UNAVAILABLE:
        record = json.loads((tmp_path / "parallel_gate.json").read_text())
        assert record["green"] is (verdict == 0) and [c["exit"] for c in record["checks"]] == list(codes)


def test_an_absent_device_is_exit_2_one_line():
    r = subprocess.run([sys.executable, "-m", "ws1_matrix", "parallel", "cuda_bf16"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith("parallel: ")]
    assert len(lines) == 1 and lines[0].startswith("fsdp: "), r.stderr
