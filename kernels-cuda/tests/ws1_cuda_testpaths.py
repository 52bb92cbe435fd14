"""kernels-cuda's tests run on any host: the compile-only check needs nvcc (skipped with the reason
without one, unless WS1_REQUIRE_NVCC=1 makes that a failure), the rest needs neither a GPU nor a
CUDA torch. Nothing here executes a CUDA kernel."""

import importlib.util
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]
ROOT = PKG.parent


def load_compile_check():
    name = "ws1_cuda_compile_check"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PKG / "tools" / "compile_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def gpu_unavailable() -> str | None:
    """Why the GPU tests (test_gpu_*.py) cannot run on this host, or None when they can: they need a CUDA device
    and the built ws1_kernels_cuda, and are skipped with this reason on every CPU host."""
    import torch

    try:
        import ws1_kernels_cuda  # noqa: F401
    except ImportError as exc:
        return f"ws1_kernels_cuda is not built here ({str(exc).splitlines()[0][:120]})"
    return None if torch.cuda.is_available() else "no CUDA device on this host"
