"""Input errors: one line that names the op, the argument and the problem; and when value checks run."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator


class OpInputError(ValueError):
    pass


def check(cond: bool, op: str, msg: str) -> None:
    if not cond:
        raise OpInputError(f"{op}: {msg}")


def check_float(t, op: str, name: str, allowed=("bfloat16", "float32")) -> None:
    import torch

    check(isinstance(t, torch.Tensor), op, f"{name} must be a tensor, got {type(t).__name__}")
    dt = str(t.dtype).replace("torch.", "")
    check(dt in allowed, op, f"{name} must be {' or '.join(allowed)}, got {dt}")


def check_rank(t, rank: int, op: str, name: str, shape_doc: str) -> None:
    check(t.dim() == rank, op, f"{name} must be {shape_doc}, got shape {tuple(t.shape)}")


_trusted: contextvars.ContextVar[bool] = contextvars.ContextVar("ws1_trusted_inputs", default=False)


@contextlib.contextmanager
def trusted_inputs() -> Iterator[None]:
    """Inside, the ops skip the checks that read input VALUES — token ids and targets in range, positions
    >= 0, cu_seqlens ending at the row counts. On a GPU each such check is a device -> host copy, i.e. a
    host sync per op call; the model validates these values where it builds them (on the host, once per
    step) and runs its ops inside this scope. Shape, dtype and device checks always run, and so do the
    kernel packages' own checks (ws1_cpu always; ws1_cuda outside graph capture)."""
    token = _trusted.set(True)
    try:
        yield
    finally:
        _trusted.reset(token)


def value_checks(*tensors) -> bool:
    """Whether an op checks its inputs' values now: not inside :func:`trusted_inputs`, and not while the
    current CUDA stream is being captured into a graph (a device -> host copy cannot be captured; the
    kernels guard themselves there, see kernels-cuda's capturing())."""
    if _trusted.get():
        return False
    import torch

    if any(getattr(t, "is_cuda", False) for t in tensors) and torch.cuda.is_current_stream_capturing():
        return False
    return True
