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


_graph_safe: contextvars.ContextVar[bool] = contextvars.ContextVar("ws1_graph_safe", default=False)


@contextlib.contextmanager
def graph_safe() -> Iterator[None]:
    """Inside, the ops take the path they take while a CUDA graph is being captured, eagerly: no device ->
    host copy at all — no value checks (as :func:`trusted_inputs`), and the kernel packages that plan their
    launches from input values on the host plan them on the device instead (the Triton attention). A rollout
    engine warms a graph's step up inside it, so every kernel of the captured path is compiled before the
    capture; on a CPU the same path runs (and is tested) without a GPU. The bits are those of the eager path:
    the plan decides which program computes a row, never how."""
    token = _graph_safe.set(True)
    try:
        with trusted_inputs():
            yield
    finally:
        _graph_safe.reset(token)


def graph_safe_now(*tensors) -> bool:
    """Whether an op must not copy device -> host now: inside :func:`graph_safe`, or while the current CUDA
    stream is being captured into a graph (``tensors``: the op's inputs; only a CUDA one can be captured)."""
    if _graph_safe.get():
        return True
    import torch

    return any(getattr(t, "is_cuda", False) for t in tensors) and torch.cuda.is_current_stream_capturing()


def value_checks(*tensors) -> bool:
    """Whether an op checks its inputs' values now: not inside :func:`trusted_inputs` or :func:`graph_safe`,
    and not while the current CUDA stream is being captured into a graph (a device -> host copy cannot be
    captured; the kernels guard themselves there, see kernels-cuda's capturing())."""
    if _trusted.get():
        return False
    import torch

    if any(getattr(t, "is_cuda", False) for t in tensors) and torch.cuda.is_current_stream_capturing():
        return False
    return True
