"""benchmarks/report.py: issue 24's table and the targets from a GPU run's benchmark JSON, and the generated
"Measured on a GPU" blocks of docs/cuda.md and docs/triton.md. CPU only: the first H200 run's committed JSON and
synthetic runs."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import report  # noqa: E402

FIRST = ROOT / "evidence" / "devices" / "2026-12-04-h200"


def _cells(table, label, prof):
    return next(r for r in table if r["case"] == label)[prof]["now"]["text"]


def test_the_first_runs_json_gives_the_issues_table():
    """The numbers issue 24 was filed with come back out of the committed evidence (graph mode; cuda_bf16's logprob
    row is eager, marked e; cuda_bf16's attention group crashed in that run: '-' and its error named)."""
    now = report.load_run(FIRST)
    table = report.issue_table(now, {})
    assert _cells(table, report.ISSUE_ROWS[0][0], "cuda_bf16") == "0.21 / 0.17 / 0.16 / 0.20"
    assert _cells(table, report.ISSUE_ROWS[0][0], "triton_cuda_bf16") == "0.51 / 0.48 / 0.68 / 0.57"
    assert _cells(table, "the same at N 12288", "triton_cuda_bf16") == "0.84 / 0.80 / 0.52 / 0.58"
    assert _cells(table, "attention decode B32 Skv2048 vs SDPA", "triton_cuda_bf16") == "0.075"
    assert _cells(table, "attention prefill B1 S2048 vs SDPA", "cuda_bf16") == "-"
    assert _cells(table, "logprob T2048 V151936 vs log_softmax + gather", "cuda_bf16") == "1.97e"
    assert _cells(table, "batch_invariant_logp T2048", "triton_cuda_bf16") == "1.00"
    # the triton chain was rerun in a third file: merged, the later row kept
    assert any(f.startswith("run3") for f in now["triton_cuda_bf16"]["files"])
    text = report.render(table, report.targets(now), "now", "before", {"cuda_bf16": now["cuda_bf16"]["errors"]})
    assert "benchmark group 'attention' failed" in text and "MISS" in text


def _row(case, mode, ws1, torch_ms, roof=None, **extra):
    r = {"case": case, "mode": mode, "ws1_ms": ws1, "torch_ms": torch_ms, "speed": torch_ms / ws1, **extra}
    if roof is not None:
        r["roofline_ms"] = roof
    return r


def _run(folder: Path, speed_m1: float) -> Path:
    folder.mkdir()
    cases = [
        _row("det_gemm M1 K4096 N4096", "graph", 0.010, 0.010 * speed_m1, 0.0078, vs="cuBLAS BF16"),
        _row("det_gemm M1 K4096 N4096", "eager", 0.020, 0.010, 0.0078, vs="cuBLAS BF16"),
        _row("attention decode B32 Skv2048 vs SDPA flash", "graph", 0.080, 0.064, 0.0625, vs="SDPA flash"),
        _row("attention backward B1 S2048 vs SDPA flash", "graph", 0.400, 0.280, 0.1088, vs="SDPA flash"),
        _row("attention backward B1 S2048 vs SDPA flash", "eager", 0.500, 0.290, 0.1088, vs="SDPA flash"),
    ]
    tg = [
        {
            "target": "det_gemm M1 K4096 N4096: speed >= 0.8 vs cuBLAS BF16 (graph)",
            "value": speed_m1,
            "met": speed_m1 >= 0.8,
            "roofline_ms": 0.0078,
            "ws1_ms": 0.010,
            "torch_ms": 0.010 * speed_m1,
        },
        {
            "target": "attention backward B1 S2048 vs SDPA flash: speed >= 0.6 (graph)",
            "value": 0.7,
            "met": True,
            "roofline_ms": 0.1088,
            "ws1_ms": 0.400,
            "torch_ms": 0.280,
        },
    ]
    (folder / "bench_cuda.json").write_text(
        json.dumps({"host": {"device": "NVIDIA H200", "torch": "2.11"}, "cases": cases, "targets": tg, "errors": {}})
    )
    return folder


def test_before_and_now_side_by_side_and_json(tmp_path):
    before, now = _run(tmp_path / "a", 0.2), _run(tmp_path / "b", 0.9)
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), str(now), "--before", str(before), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out)
    row = data["issue_table"][0]["cuda_bf16"]
    assert row["before"]["speeds"][0] == pytest.approx(0.2) and row["now"]["speeds"][0] == pytest.approx(0.9)
    assert row["now"]["modes"][0] == "graph"  # the graph row, not the eager one
    assert data["targets"][0]["met"] is True
    text = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), str(now), "--before", str(before)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "0.20 / - / - / - -> 0.90 / - / - / -" in text and "MET" in text


def test_docs_block_is_rewritten_and_nothing_else(tmp_path, monkeypatch):
    run = _run(tmp_path / "run", 0.5)
    doc = tmp_path / "cuda.md"
    doc.write_text(f"# head\n\ntext before\n{report.BEGIN}\nold block\n{report.END}\ntext after\n")
    monkeypatch.setattr(report, "DOCS", {"cuda_bf16": doc, "triton_cuda_bf16": tmp_path / "absent.md"})
    monkeypatch.setattr(report, "ROOT", tmp_path)
    assert report.main([str(run), "--before", str(tmp_path / "none"), "--docs"]) == 0
    text = doc.read_text()
    assert text.startswith("# head\n\ntext before\n" + report.BEGIN) and text.endswith(report.END + "\ntext after\n")
    assert "old block" not in text
    assert (
        "| det_gemm M1 K4096 N4096 | graph | 0.0100 | cuBLAS BF16 | 0.0050 | 0.500 | 0.0078 | 0.78 | MISS (>= 0.8) |"
        in text
    )
    assert "| det_gemm M1 K4096 N4096 | eager |" in text and "NVIDIA H200" in text
    # a verdict sits on the row of the mode its target judges, never on the same case's other mode
    assert (
        "| attention backward B1 S2048 vs SDPA flash | graph | 0.4000 | SDPA flash | 0.2800 | 0.700 | 0.1088 | 0.27 "
        "| MET (>= 0.6) |" in text
    )
    assert (
        "| attention backward B1 S2048 vs SDPA flash | eager | 0.5000 | SDPA flash | 0.2900 | 0.580 | 0.1088 | 0.22 "
        "|  |" in text
    )
    # the real docs each hold exactly one block the tool can replace
    for path in (ROOT / "docs" / "cuda.md", ROOT / "docs" / "triton.md"):
        report.replace_block(path.read_text(), "x", path)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report.main([str(empty)]) == 2
    assert "no benchmark JSON" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "bench_triton.json").write_text(json.dumps({"host": {}}))
    assert report.main([str(bad)]) == 2
    assert "not a benchmark's JSON" in capsys.readouterr().err
    (bad / "bench_triton.json").write_text("{")
    assert report.main([str(bad)]) == 2
    assert "not readable JSON" in capsys.readouterr().err
    assert report.main([str(tmp_path / "missing")]) == 2
    # a doc without its block: refused, the doc untouched
    doc = tmp_path / "cuda.md"
    shutil.copy(ROOT / "README.md", doc)
    before = doc.read_text()
    with pytest.raises(report.ReportError, match="needs exactly one"):
        report.replace_block(before, "x", doc)
    assert doc.read_text() == before


def test_a_row_that_could_not_be_timed_has_no_verdict_and_is_an_error(tmp_path):
    """bench_cuda / bench_triton: a backward row whose capture failed is kept as a failed row — its target ABSENT
    with the reason, the run's errors name it — and report.py reads the eager row of that case instead."""
    import bench_cuda
    import bench_triton

    failed = bench_triton.failed_row(
        "attention backward B1 S2048 vs SDPA flash",
        "graph",
        "attention_backward",
        RuntimeError("operation not permitted when stream is capturing\ndetail"),
    )
    eager = _row("attention backward B1 S2048 vs SDPA flash", "eager", 0.5, 0.3, 0.1088, kind="attention_backward")
    for tg in (bench_cuda.attention_targets([failed, eager]), bench_triton.targets([failed, eager])):
        assert (
            len(tg) == 1 and tg[0]["met"] is None and "FAILED RuntimeError: operation not permitted" in tg[0]["absent"]
        )
    assert bench_triton.row_errors([failed, eager]) == {
        "attention backward B1 S2048 vs SDPA flash (graph)": (
            "RuntimeError: operation not permitted when stream is capturing"
        )
    }
    assert report.find([failed, eager], "attention backward B1 S2048")["mode"] == "eager"


def test_candidates_are_listed_with_their_speed_and_bits(tmp_path):
    """The candidate rows of both benchmarks come out with the two facts an adoption needs (graph row preferred):
    faster with the same bits, bits that differ (never adoptable, whatever the speed), not faster; a candidate of
    other numerics (no bit comparison) says n/a. No candidate is a target."""
    folder = tmp_path / "run"
    folder.mkdir()
    cuda = [
        _row(
            "det_gemm n32 candidate M1 K4096 N1024 vs narrow",
            "graph",
            0.004,
            0.010,
            0.002,
            kind="candidate",
            candidate_bits_equal_narrow=True,
            speed_vs_cublas=0.9,
        ),
        _row(
            "det_gemm n32 candidate M1 K4096 N1024 vs narrow",
            "eager",
            0.020,
            0.020,
            0.002,
            kind="candidate",
            candidate_bits_equal_narrow=True,
            speed_vs_cublas=0.5,
        ),
        _row(
            "det_gemm n32 candidate M59 K4096 N4096 vs narrow",
            "graph",
            0.008,
            0.010,
            0.008,
            kind="candidate",
            candidate_bits_equal_narrow=False,
            speed_vs_cublas=1.0,
        ),
    ]
    triton = [
        _row(
            "det_gemm candidate 64x32 M1 K4096 N4096 vs the fixed tier",
            "graph",
            0.02,
            0.01,
            0.008,
            kind="candidate",
            candidate_bits_equal_fixed=True,
        ),
        _row("lm_head backward dx M256 candidate 3 x BF16 GEMM vs SPLIT_A", "graph", 1.0, 2.0, 0.5, kind="candidate"),
    ]
    for name, cases in (("bench_cuda.json", cuda), ("bench_triton.json", triton)):
        (folder / name).write_text(json.dumps({"host": {}, "cases": cases, "targets": [], "errors": {}}))
    cands = report.candidates(report.load_run(folder))
    got = {(c["benchmark"], c["case"].split(" vs")[0]): (c["mode"], c["evidence"]) for c in cands}
    assert got == {
        ("cuda_bf16", "det_gemm n32 candidate M1 K4096 N1024"): ("graph", "faster, same bits"),
        ("cuda_bf16", "det_gemm n32 candidate M59 K4096 N4096"): ("graph", "not adoptable"),
        ("triton_cuda_bf16", "det_gemm candidate 64x32 M1 K4096 N4096"): ("graph", "not faster"),
        ("triton_cuda_bf16", "lm_head backward dx M256 candidate 3 x BF16 GEMM"): ("graph", "faster"),
    }
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), str(folder), "--before", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "speed 2.50, 0.90x cuBLAS, bits equal: faster, same bits" in out
    assert "bits DIFFER: not adoptable" in out and "bits n/a: faster" in out
    js = json.loads(
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "report.py"),
                str(folder),
                "--json",
                "--before",
                str(tmp_path / "none"),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert len(js["candidates"]) == 4 and js["targets"] == []


def test_rooflines_are_read_with_the_runs_own_ceilings_and_cards_and_cuts_are_named(tmp_path, monkeypatch):
    """A run on another card (the H100 the device tool lends first): the Measured block states the ceilings that run
    measured, not the H200's; before/now on different cards is said beside the table; a run cut short by its time
    limit (harness.Run: complete false) is named. A run without recorded ceilings (the first one) says whose it used."""
    before = _run(tmp_path / "a", 0.2)
    now = _run(tmp_path / "b", 0.9)
    f = now / "bench_cuda.json"
    data = json.loads(f.read_text())
    data["host"] = {
        "device": "NVIDIA H100 80GB HBM3",
        "ceilings": {"bf16_tflops": 798.0, "hbm_tbs": 3.0, "l2_bytes": 50 * 2**20, "source": "measured"},
    }
    data["complete"] = False
    f.write_text(json.dumps(data))
    js = json.loads(
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "report.py"), str(now), "--before", str(before), "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert any("before ran on NVIDIA H200, now on NVIDIA H100 80GB HBM3" in n for n in js["notes"])
    assert any("incomplete run (bench_cuda.json" in n for n in js["notes"])
    assert js["ceilings"]["cuda_bf16"]["hbm_tbs"] == 3.0
    block = report.measured_block(report.load_run(now)["cuda_bf16"], "run", [])
    assert (
        "max(FLOPs / 798 TFLOP/s, bytes / 3.00 TB/s) (measured)" in block and "**Incomplete**: bench_cuda.json" in block
    )
    old = report.measured_block(report.load_run(before)["cuda_bf16"], "run", [])
    assert "790 TFLOP/s, bytes / 4.3 TB/s) (the first H200 run's ceilings; this run recorded none)" in old
    assert "Incomplete" not in old
