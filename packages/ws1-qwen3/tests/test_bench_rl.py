"""benchmarks/bench_rl.py's plumbing on the CPU: --cpu-logic runs the trainer step, the rollout (through the static
decode step the GPU captures) and the chain against plain PyTorch at tiny sizes, in the stray-device mode (every
tensor it makes names its device), and writes its ratios marked meaningless; without a GPU the real run exits 2."""

import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BENCH = os.path.join(ROOT, "benchmarks", "bench_rl.py")


def test_cpu_logic_runs_every_phase(tmp_path, monkeypatch, capsys):
    from ws1_matrix.stray import stray_default_device

    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import bench_rl

    out = tmp_path / "rl.json"
    with stray_default_device():
        rc = bench_rl.main(["--cpu-logic", "--reps", "1", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    res = json.loads(out.read_text())
    assert res["errors"] == {}
    cases = {c["case"]: c for c in res["cases"]}
    assert set(cases) == {"train", "decode", "chain"}
    assert all(c["logic_check_only"] for c in cases.values())
    assert cases["decode"]["graphs"] and cases["decode"]["host_syncs"] < cases["decode"]["decode_steps"] + 1
    assert cases["train"]["ws1_s"] > 0 and cases["train"]["plain_s"] > 0
    assert [t["met"] for t in res["targets"]] == [None, None]  # no MET/MISS from a logic check
    assert "CPU logic check: ratio meaningless" in text and "MISS" not in text and "MET " not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the real run would start")
def test_without_a_gpu_it_exits_2_with_one_line():
    p = subprocess.run([sys.executable, BENCH], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "no CUDA device" in p.stderr
