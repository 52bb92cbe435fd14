"""ci/gpu_check.sh's plumbing on a CPU host: no device is exit 2 with a red summary naming why; the dry run
(WS1_GPU_CHECK_DRY=1) runs both lanes in parallel through C11 (which stops at the absent device), then closure,
and packs at most 8 files — so the script a GPU session depends on has run end to end before that session."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, **env):
    return subprocess.run(
        ["bash", str(ROOT / "ci" / "gpu_check.sh"), str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path), **env},
    )


def test_no_device_is_exit_2_with_a_red_summary(tmp_path):
    r = _run(tmp_path)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["overall"] == "red" and s["facts"]["cuda_available"] is False
    assert {p: v["why"] for p, v in s["profiles"].items()} == {
        "triton_cuda_bf16": "not executed: no CUDA device on this host",
        "cuda_bf16": "not executed: no CUDA device on this host",
    }


def test_dry_run_runs_both_lanes_and_closure(tmp_path):
    r = _run(tmp_path, WS1_GPU_CHECK_DRY="1")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    out = tmp_path / "out"
    files = sorted(p.name for p in out.iterdir())
    assert files == ["c11_evidence.tar.gz", "closure.txt", "summary.json"] and len(files) <= 8
    s = json.loads((out / "summary.json").read_text())
    for p in ("triton_cuda_bf16", "cuda_bf16"):
        v = s["profiles"][p]
        assert (
            v["status"] == "red"
            and v["exit_code"] == 2
            and v["first_red"].startswith("device: not executed on this host")
        )
    closure = (out / "closure.txt").read_text()
    assert closure.startswith("WS1 closure: NOT CLOSED") and "cpu_bf16           MISSING" in closure
    with tarfile.open(out / "c11_evidence.tar.gz") as t:
        names = t.getnames()
    assert "evidence/cuda_bf16/c11_ci.json" in names and "evidence/triton_cuda_bf16/c11_ci.json" in names
    assert [st["step"] for st in s["steps"]][:1] == ["facts"] and {"c11_cuda_bf16", "c11_triton_cuda_bf16"} <= {
        st["step"] for st in s["steps"]
    }


def test_the_full_8b_task_dry_run(tmp_path):
    """WS1_GPU_TASK=c10-8b: the lane runs C10 --model qwen3-8b and its control (exit 2 here, no device); the summary
    says which record is missing, and no closure is written (the task does not produce C11 records)."""
    r = _run(tmp_path, WS1_GPU_CHECK_DRY="1", WS1_GPU_TASK="c10-8b", WS1_PROFILES="cuda_bf16")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (
        list(s["profiles"]) == ["cuda_bf16"] and s["profiles"]["cuda_bf16"]["first_red"] == "no c10_chain_gate record"
    )
    assert {"c10_8b_cuda_bf16", "c10_8b_control_cuda_bf16"} <= {st["step"] for st in s["steps"]}
    assert not (tmp_path / "out" / "closure.txt").exists()


def test_the_bench_task_dry_run(tmp_path):
    """WS1_GPU_TASK=bench: no lanes, no closure; bench_cuda, bench_triton, bench_rl one after another, each told its
    share of the time left (--deadline-s) and where to write (--json). A benchmark standing in for the real ones (the
    real ones need a device) writes one cut-short JSON: the summary reads it back as incomplete with its MET/MISS
    counts; a benchmark that wrote nothing is named with the end of its log."""
    fake = tmp_path / "py"
    fake.write_text(f"""#!/usr/bin/env bash
if [[ "$1" == benchmarks/bench_*.py ]]; then
  echo "$@" >>"{tmp_path}/bench_args.txt"
  [[ "$1" == benchmarks/bench_triton.py ]] || {{ echo "bench: no CUDA device on this host"; exit 2; }}
  while [ $# -gt 0 ]; do [ "$1" = --json ] && out=$2; shift; done
  echo '{{"host": {{"device": "fake"}}, "cases": [], "complete": false,
        "errors": {{"chain": "not run: the time budget"}},
        "targets": [{{"met": true}}, {{"met": false}}, {{"met": null}}]}}' >"$out"
  exit 1
fi
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    r = _run(
        tmp_path,
        WS1_GPU_CHECK_DRY="1",
        WS1_GPU_TASK="bench",
        PYTHON=str(fake),
        WS1_DEADLINE_S="400",
        WS1_BENCH_REPS="3",
    )
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    out = tmp_path / "out"
    assert not (out / "closure.txt").exists() and (out / "bench_triton.json").exists()
    s = json.loads((out / "summary.json").read_text())
    assert s["profiles"] == {} and s["overall"] == "red"
    b = s["benchmarks"]
    assert b["triton"]["complete"] is False and (b["triton"]["met"], b["triton"]["miss"], b["triton"]["absent"]) == (
        1,
        1,
        1,
    )
    assert b["triton"]["errors"] == {"chain": "not run: the time budget"}
    assert b["cuda"]["errors"]["json"].endswith("exit 2, its log ends: bench: no CUDA device on this host")
    args = (tmp_path / "bench_args.txt").read_text().splitlines()
    assert [a.split()[0] for a in args] == [
        "benchmarks/bench_cuda.py",
        "benchmarks/bench_triton.py",
        "benchmarks/bench_rl.py",
    ]
    shares = [int(a.split("--deadline-s ")[1].split()[0]) for a in args]
    assert (
        100 <= shares[0] <= 130 and shares[1] >= shares[0] - 5 and shares[2] >= shares[1]
    )  # ~(400 - 15) / 3, then what is left / 2, / 1
    assert all("--reps 3" in a for a in args) and "--profiles triton_cuda_bf16,cuda_bf16" in args[2]
    assert not {"c11_cuda_bf16", "c11_triton_cuda_bf16", "install"} & {st["step"] for st in s["steps"]}


def test_an_unknown_task_is_one_line_and_exit_2_before_anything_runs(tmp_path):
    r = _run(tmp_path, WS1_GPU_TASK="benchmarks")
    assert (
        r.returncode == 2
        and r.stderr.strip() == "gpu_check: WS1_GPU_TASK=benchmarks: expected closure, c10-8b or bench"
    )
    assert not (tmp_path / "out" / "summary.json").exists()
