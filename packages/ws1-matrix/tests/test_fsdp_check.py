"""ws1_matrix's FSDP2 check on gloo, at 1, 2 and 4 ranks, untied and tied, WS1's model and transformers' patched:
per-rank log-probs == one device, gradients bitwise run to run and at world 1 == one device; in the
parallel-invariant order (sample_tree) the gradients == one device's at every world size, while the default order
under the split and our rank-fold control differ (red as required), and our variant kernels' log-probs differ."""

import subprocess
import sys

from ws1_matrix import fsdp_check


def test_fsdp_on_gloo_1_2_4_ranks():
    record = fsdp_check.run("cpu_bf16", [1, 2, 4], ["tiny", "tiny-tied"])
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


def test_bad_arguments_exit_2_one_line():
    for args in (["--world", "x"], ["--world", "0"], ["--models", "nope"], ["cuda_bf16"]):
        r = subprocess.run([sys.executable, "-m", "ws1_matrix", "fsdp", *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("fsdp: "), r.stderr
