"""benchmarks/harness.py: the rooflines' ceilings and a benchmark run that keeps what it measured when its time runs
out. CPU only: the GPU measurement itself runs on a device host (bench_cuda / bench_triton record it)."""

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import harness  # noqa: E402


def test_roofline_is_the_slower_of_the_two_ceilings():
    c = harness.Ceilings(800.0, 3.0, 50 * 2**20, "test")
    # 2 GFLOP at 800 TFLOP/s = 2.5 us; 30 MB at 3 TB/s = 10 us: bandwidth-bound
    assert c.roofline_ms(2e9, 30e6) == pytest.approx(0.010)
    # three BF16 GEMMs per product (the FP32 split): 3 x 8 GFLOP = 30 us > 10 us
    assert c.roofline_ms(8e9, 30e6, gemms=3) == pytest.approx(0.030)
    assert c.basis(3) == "800 TFLOP/s / 3 (3 BF16 GEMMs), 3.00 TB/s"


def test_without_a_gpu_the_ceilings_are_the_nominal_ones_and_say_so():
    c = harness.measure(torch.device("cpu"))
    assert c is harness.NOMINAL and "not measured here" in c.source


def _payload(rows, errors):
    return {"cases": rows, "errors": dict(errors)}


def test_the_file_is_rewritten_after_every_group_and_a_spent_deadline_starts_nothing(tmp_path):
    path = tmp_path / "b.json"
    run = harness.Run(str(path), _payload, deadline_s=3600)
    seen = []

    def second():
        seen.append(json.loads(path.read_text()))  # the first group is on disk before the second starts
        raise ValueError("boom")

    run.group("first", lambda: [{"case": "a"}])
    run.group("second", second)
    assert seen[0]["cases"] == [{"case": "a"}] and seen[0]["complete"] is False
    run.t_end = 0.0  # the deadline has passed
    run.group("third", lambda: pytest.fail("started after its deadline"))
    assert run.finish() is False
    data = json.loads(path.read_text())
    assert data["complete"] is False and data["cases"] == [{"case": "a"}]
    assert data["errors"]["second"] == "ValueError: boom"
    assert data["errors"]["third"].startswith("not run: the time budget")


def test_sigterm_stops_the_group_in_flight_through_a_rows_except_and_keeps_the_rest(tmp_path):
    """timeout's SIGTERM inside a case: the per-row ``except Exception`` of the cases does not swallow it, the group
    is named cut short, later groups are not run, the earlier group's rows stay on disk, the handler is restored."""
    path = tmp_path / "b.json"
    before = signal.getsignal(signal.SIGTERM)
    run = harness.Run(str(path), _payload)

    def cases():
        rows = []
        for i in range(3):
            try:
                if i == 1:
                    os.kill(os.getpid(), signal.SIGTERM)
                rows.append({"case": f"row {i}"})
            except Exception:  # noqa: BLE001  (what the benchmarks' failed_row does)
                rows.append({"case": f"row {i}", "failed": True})
        return rows

    run.group("kept", lambda: [{"case": "k"}])
    run.group("cut", cases)
    run.group("after", lambda: pytest.fail("ran after SIGTERM"))
    assert run.finish() is False
    data = json.loads(path.read_text())
    assert data["cases"] == [{"case": "k"}]
    assert data["errors"]["cut"].startswith("cut short: stopped by SIGTERM")
    assert data["errors"]["after"].startswith("not run: the run was stopped by SIGTERM")
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_run_that_finishes_is_complete(tmp_path):
    path = tmp_path / "b.json"
    run = harness.Run(str(path), _payload, deadline_s=3600)
    run.group("one", lambda: [{"case": "a"}])
    run.group("two", lambda: (_ for _ in ()).throw(RuntimeError("x")))  # a failed group still ran to its end
    assert run.finish() is True and json.loads(path.read_text())["complete"] is True


def test_an_unknown_group_is_one_line_and_exit_2():
    import subprocess

    for script, what in (("bench_rl.py", "phase"), ("bench_cuda.py", "group"), ("bench_triton.py", "group")):
        r = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / script), "--only", "chain,nope"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"{script[:-3]}: unknown {what}(s) nope in --only (expected " + r.stderr.split("(expected ")[1].strip()
        ]
