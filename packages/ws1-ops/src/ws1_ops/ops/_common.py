"""Shared pieces of the op modules."""

from __future__ import annotations

import torch

from .. import registry
from ..errors import check


def exec_dtype(t: torch.Tensor) -> torch.Tensor:
    """Parameters execute in BF16 (an FP32 master copy is rounded once, here, to nearest-even)."""
    return t if t.dtype == torch.bfloat16 else t.to(torch.bfloat16)


def start(op: str, *tensors: torch.Tensor) -> registry.Kernel:
    """The active family's kernel for ``op``, recorded as a forward call on the tensors' device."""
    k = registry.kernel(op)
    devs = {t.device.type for t in tensors if isinstance(t, torch.Tensor)}
    check(len(devs) <= 1, op, f"all tensors must be on one device, got {sorted(devs)}")
    registry.note(k, "forward", devs.pop() if devs else "cpu")
    return k


def backward(k: registry.Kernel, *args):
    dev = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
    return registry.call_bwd(k, *args, device_type=dev)


def param_grad(k: registry.Kernel, *args):
    """The parameter gradient over rows in canonical order (the last argument is the row order)."""
    dev = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
    registry.note(k, "backward", dev)
    return k.param_grad(*args)
