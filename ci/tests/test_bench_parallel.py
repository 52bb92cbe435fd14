"""benchmarks/bench_parallel.py runs as a user runs it (tiny, one step each; the CP row at 256 tokens): exit 0, both
orders timed, the ratio; an unknown shape is one line and exit 2. Not a timing test."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_parallel_smoke(tmp_path):
    out = tmp_path / "parallel.json"
    r = subprocess.run(
        [
            sys.executable,
            "benchmarks/bench_parallel.py",
            "--shapes",
            "tiny",
            "--reps",
            "1",
            "--gemms",
            "2",
            "--cp",
            "256",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads(out.read_text())
    (row,) = record["rows"]
    assert set(row["median_ms"]) == {"serial", "sample_tree"} and row["ratio"] > 0
    assert [g["gemm"] for g in record["gemms"]] == ["o_proj", "down_proj"] and all(
        g["ratio"] > 0 for g in record["gemms"]
    )
    cp = record["cp"]
    assert cp["seq"] == 256 and set(cp["median_ms"]) == {"default", "cp_tree", "torch_sdpa_bf16"} and cp["ratio"] > 0
    bad = subprocess.run(
        [sys.executable, "benchmarks/bench_parallel.py", "--shapes", "nope"], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "unknown shape" in bad.stderr
