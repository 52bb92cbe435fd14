"""Shared pieces of the op modules."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from .. import registry
from ..errors import check

_casts = threading.local()


@contextlib.contextmanager
def cast_once() -> Iterator[None]:
    """Within the scope an FP32 master's BF16 execution copy is made once and reused by every call
    that executes it — as torch.autocast caches its weight casts. A step that runs a parameter in
    several calls (micro-batches, the B1 and chunked transforms, a vocabulary-sized weight: 2.5 GB
    read and 1.2 GB written per cast) then pays one cast. The copy is keyed by the tensor's identity
    and version counter, so an in-place update inside the scope (an optimizer step) makes a new one;
    the bits are those of a fresh cast either way (RNE of the same values)."""
    outer = getattr(_casts, "cache", None)
    _casts.cache = {} if outer is None else outer
    try:
        yield
    finally:
        if outer is None:
            _casts.cache = None


def exec_dtype(t: torch.Tensor) -> torch.Tensor:
    """Parameters execute in BF16 (an FP32 master copy is rounded once, here, to nearest-even)."""
    if t.dtype == torch.bfloat16:
        return t
    cache = getattr(_casts, "cache", None)
    if cache is None or t.is_inference():  # an inference tensor has no version counter to key on
        return t.to(torch.bfloat16)
    # one entry per tensor: it holds t itself (so the id is not reused while cached) and is replaced,
    # old copy freed, when an in-place update has moved the version counter on
    hit = cache.get(id(t))
    if hit is None or hit[1] != t._version:
        hit = cache[id(t)] = (t, t._version, t.to(torch.bfloat16))
    return hit[2]


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
