"""The stray-device probe: catch, on a CPU host, the tensors that would land on the wrong device on a GPU.

A tensor made without ``device=`` lands on torch's default device. On a GPU host that is the CPU, while
the inputs live on the GPU, and the first mixed op fails ("Expected all tensors to be on the same
device") — the first H200 run died that way in the FP32 reference's rope (``inv_freq`` built on the CPU).
On a CPU host the two coincide and nothing can show it. This mode makes them differ: the default device
becomes ``meta`` (no data, no kernels), so every tensor a library, a gate or a benchmark's setup creates
without naming its device is a meta tensor, and the first op that meets it with a real input raises, or
the first read of its values does (``Cannot copy out of meta tensor``).

The rule it enforces: every factory call says where its tensor lives — ``device=x.device`` for data
that meets the inputs, ``device="cpu"`` for host-side metadata (row keys, cu_seqlens built from Python
lists) that is moved on purpose.

    WS1_STRAY_DEVICE=meta python -m ws1_matrix c10 cpu_bf16     # any gate, in this mode
    with stray_default_device(): ...                            # tests (packages/ws1-matrix/tests/test_stray_device.py)
"""

from __future__ import annotations

import contextlib
import os

import torch

ENV = "WS1_STRAY_DEVICE"


@contextlib.contextmanager
def stray_default_device(device: str = "meta"):
    """torch's default device set to ``device`` (a device no input lives on) for the block; afterwards exactly the
    state before: no default device context if there was none. (``set_default_device("cpu")`` would leave a
    DeviceContext function mode on the stack, through which every later torch call — ``Tensor.tolist`` included —
    is routed: a test that wraps such a method then sees each call twice.)"""
    ctx = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    before = None if ctx is None else ctx.device
    torch.set_default_device(device)
    try:
        yield torch.device(device)
    finally:
        torch.set_default_device(before)


def from_env() -> contextlib.AbstractContextManager:
    """The mode if ``$WS1_STRAY_DEVICE`` names a device (``meta``), else a no-op."""
    dev = os.environ.get(ENV, "").strip()
    return stray_default_device(dev) if dev else contextlib.nullcontext()
