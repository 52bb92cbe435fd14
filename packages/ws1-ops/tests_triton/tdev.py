"""Mode helpers shared by the tests_triton modules (conftest.py decides the mode; see its docstring).

A module of its own: ``from conftest import ...`` would find packages/ws1-ops/tests/conftest.py
first (this directory puts the cpu tests on sys.path for their cases.py)."""

import os

import torch

MODE = (
    "device"
    if (
        os.environ.get("WS1_TRITON_TEST_DEVICE", "") == "cuda"
        or os.environ.get("WS1_DEVICE_PROFILE", "") == "triton_cuda_bf16"
    )
    else "interpreter"
)
# where the kernels' tensors live: CPU tensors in the interpreter, the CUDA device otherwise
DEV = torch.device("cpu") if MODE == "interpreter" else torch.device("cuda")


def to_dev(x):
    """Tensors (in nested tuples/lists) to DEV; anything else as it is."""
    if isinstance(x, torch.Tensor):
        return x.to(DEV)
    if isinstance(x, (tuple, list)):
        return type(x)(to_dev(v) for v in x)
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (tuple, list)):
        return type(x)(to_cpu(v) for v in x)
    return x


def swapped(op: str, make):
    """Context: the active triton kernel of ``op`` replaced by ``make(real)`` (a control), in either
    mode (the registry's table in the interpreter, the ``tri`` overlay in device mode)."""
    import contextlib

    from ws1_ops import registry

    @contextlib.contextmanager
    def ctx():
        ov = registry._overlay.get()
        table, key = (ov, op) if ov is not None and op in ov else (registry._KERNELS, (op, "triton"))
        real = table[key]
        table[key] = make(real)
        try:
            yield real
        finally:
            table[key] = real

    return ctx()
