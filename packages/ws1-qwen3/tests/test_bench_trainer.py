"""benchmarks/bench_trainer.py's plumbing: the script run as a user runs it (a subprocess), on the tiny shape with one
repetition, exits 0 and writes one JSON record with the three rows (the patched model, stock transformers BF16 and
FP32), their finite losses and the two ratios; an unknown shape is one line and exit 2."""

import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BENCH = os.path.join(ROOT, "benchmarks", "bench_trainer.py")


def test_tiny_one_rep_has_the_three_rows_and_the_ratios(tmp_path):
    out = tmp_path / "trainer.json"
    p = subprocess.run(
        [sys.executable, BENCH, "--shapes", "tiny", "--reps", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(out.read_text())
    assert res["errors"] == {} and res["complete"] is True
    (case,) = res["cases"]
    assert case["shape"] == "tiny" and case["batch"] == 4 and len(set(case["lengths"])) == 4
    rows = {"ws1", "stock_bf16", "stock_fp32"}
    assert set(case["median_ms"]) == rows and all(v > 0 for v in case["median_ms"].values())
    assert set(case["tokens_per_s"]) == rows and all(len(case["runs_ms"][r]) == 1 for r in rows)
    assert all(math.isfinite(v) for v in case["loss"].values()) and set(case["loss"]) == rows
    assert set(case["ratios"]) == {"ws1/stock_bf16", "ws1/stock_fp32"}
    for contender in ("stock_bf16", "stock_fp32"):
        want = case["median_ms"]["ws1"] / case["median_ms"][contender]
        assert math.isclose(case["ratios"][f"ws1/{contender}"], want, rel_tol=1e-9)
    assert case["ws1_isa"]  # the kernels' own report of the path they took
    assert "ws1/stock_bf16" in p.stdout and "> 1: WS1 slower" in p.stdout


def test_an_unknown_shape_is_one_line_and_exit_2():
    p = subprocess.run([sys.executable, BENCH, "--shapes", "tiny,huge"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "huge" in p.stderr
