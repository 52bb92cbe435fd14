"""The test suites (noxfile.SUITES): every test file of the repo runs in CI's full run (`nox -s tests`) exactly once,
C11's CPU test step (`nox -s tests_cpu`) runs cpu_bf16's suites and none of another profile's, and the step is judged
by the record of the suites it ran, bound to its run (a step that leaves no record of this run is red)."""

import functools
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))

import c11  # noqa: E402

nox = pytest.importorskip("nox")


@functools.cache
def _noxfile():
    """noxfile.py loaded once (a second load would register its sessions again)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ws1_noxfile", ROOT / "noxfile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _files(paths: list[str], ignore: list[str] = ()) -> set[str]:
    out = set()
    for p in paths:
        q = ROOT / p
        found = [q] if q.is_file() else q.rglob("test_*.py")
        out |= {str(f.relative_to(ROOT)) for f in found}
    # an ignored path is a file or a folder (pytest's --ignore takes both)
    return {f for f in out if not any(f == i or f.startswith(i.rstrip("/") + "/") for i in ignore)}


def _coverage(suites: dict, device_tests: dict) -> tuple[dict, list[str]]:
    """(files in two suites, test files no suite runs) of a SUITES table."""
    device = {str(f.relative_to(ROOT)) for pats in device_tests.values() for pat in pats for f in ROOT.glob(pat)}
    device |= _files([p for pats in device_tests.values() for p in pats if (ROOT / p).is_dir()])
    every = {
        str(f.relative_to(ROOT))
        for f in ROOT.rglob("test_*.py")
        if not any(part.startswith(".") or part in ("build", "node_modules") for part in f.relative_to(ROOT).parts)
    }
    seen: dict[str, list[str]] = {}
    for name, s in suites.items():
        for f in _files(s["paths"], s.get("ignore", [])):
            seen.setdefault(f, []).append(name)
    twice = {f: n for f, n in seen.items() if len(n) > 1}
    # the GPU-only test files of kernels-cuda sit in its suite's folder and skip without a GPU; tests_device runs them
    return twice, sorted(every - set(seen) - device)


def test_every_test_file_runs_in_cis_full_run_exactly_once():
    nf = _noxfile()
    twice, dropped = _coverage(nf.SUITES, nf.DEVICE_TESTS)
    assert not twice, f"test files in two suites (they would run twice in CI): {twice}"
    assert not dropped, f"test files no suite runs (CI would never run them): {dropped}"


def test_the_coverage_check_can_fail():
    """Negative control: a suite table that forgets a file, or lists one twice, is caught."""
    nf = _noxfile()
    forgot = {**nf.SUITES, "ascend_emu": {**nf.SUITES["ascend_emu"], "paths": ["kernels-ascend/tests"]}}
    assert _coverage(forgot, nf.DEVICE_TESTS)[1] == ["ci/tests/test_asc_compile_check.py"]
    doubled = {**nf.SUITES, "cpu": {**nf.SUITES["cpu"], "ignore": nf.SUITES["cpu"]["ignore"][1:]}}
    assert list(_coverage(doubled, nf.DEVICE_TESTS)[0]) == [nf.SUITES["cpu"]["ignore"][0]]


def test_the_cpu_step_runs_cpu_bf16s_suites_and_no_other_profiles():
    nf = _noxfile()
    assert nf.step_suites("cpu_bf16") == ["cpu"]
    # the vLLM suite bears on cpu_bf16 but runs in .venv-vllm: CI's (nox -s tests), not C11's step
    assert [n for n, s in nf.SUITES.items() if "cpu_bf16" in s["profiles"]] == ["cpu", "vllm"]
    assert nf.SUITES["vllm"]["python"] == ".venv-vllm/bin/python"
    files = _files(nf.SUITES["cpu"]["paths"], nf.SUITES["cpu"]["ignore"])
    others = set().union(*(_files(s["paths"]) for n, s in nf.SUITES.items() if n != "cpu"))
    assert files and not files & others
    # every profile's CPU-side checks are some suite's
    assert {p for s in nf.SUITES.values() for p in s["profiles"]} == {
        "cpu_bf16",
        "cuda_bf16",
        "ascend_bf16",
        "triton_cuda_bf16",
    }


class _Args:
    run_id = "this-run"


def _step(tmp_path, record: dict | None, rc: int):
    step = c11.Step("tests", "tests", ["true"], suites_record="tests_cpu.json")
    path = tmp_path / "cpu_bf16" / "tests_cpu.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if record is not None:
        path.write_text(json.dumps(record))
    return c11._suites_outcome(step, rc, 1.0, {"exit_code": rc, "log": "x.log"}, path, _Args.run_id)


def _rec(**over):
    return {
        "suites": ["cpu"],
        "passed": True,
        "record_id": "this-run",
        "processes": [
            {"suites": ["cpu"], "exit_code": 0, "counts": {"tests": 700, "failures": 0, "errors": 0, "skipped": 3}}
        ],
        **over,
    }


def test_the_cpu_test_step_names_its_suites_and_is_bound_to_this_runs_record(tmp_path):
    o = _step(tmp_path, _rec(), 0)
    assert (
        o.status == "green"
        and o.extra["suites"] == ["cpu"]
        and "suites cpu — 700 tests, 0 failed, 3 skipped" in o.detail
    )
    assert _step(tmp_path, None, 0).status == "red"  # exit 0 but no record: red
    assert _step(tmp_path, _rec(record_id="an-older-run"), 0).status == "red"  # another run's record never stands in
    assert _step(tmp_path, _rec(passed=False), 1).status == "red"
