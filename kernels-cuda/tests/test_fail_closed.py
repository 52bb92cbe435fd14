"""Fail closed: building against a CPU-only torch is one line and a non-zero exit; importing the package
without its compiled library is a clear ImportError, never a fallback; on a host without a CUDA device
the cuda_bf16 profile is refused (its cells red "not executed on this host") and c3_forward exits 2."""

import os
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws1_cuda_testpaths import PKG, ROOT  # noqa: E402


@pytest.mark.skipif(torch.version.cuda is not None, reason="this torch is a CUDA build")
def test_build_with_cpu_only_torch_is_one_line_exit_2():
    r = subprocess.run([sys.executable, "setup.py", "build_ext"], cwd=PKG, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ws1-kernels-cuda: cannot build: torch ") and "CPU-only build" in err[0]


def test_import_without_the_built_library_is_a_clear_error(tmp_path):
    # a copy of the package source without any compiled _C (a build in the tree must not mask the check)
    pkg = tmp_path / "ws1_kernels_cuda"
    pkg.mkdir()
    (pkg / "__init__.py").write_text((PKG / "src" / "ws1_kernels_cuda" / "__init__.py").read_text())
    code = "import ws1_kernels_cuda"
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ws1_kernels_cuda: the compiled library ws1_kernels_cuda._C is not built"), (
        r.stderr
    )
    assert "pip install --no-build-isolation" in last


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA device")
def test_cuda_profile_is_refused_without_a_device():
    import ws1_accel
    import ws1_ops

    with pytest.raises(ws1_accel.AcceleratorUnavailable):
        with ws1_ops.use_profile("cuda_bf16"):
            pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA device")
def test_c3_forward_cuda_bf16_exits_2_with_one_line():
    r = subprocess.run(
        [sys.executable, "-m", "ws1_matrix", "c3", "cuda_bf16"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1 and "cuda_bf16 needs a cuda device" in lines[0]
