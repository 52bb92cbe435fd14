"""Shared helpers for the non-GEMM op tests (test_activation, test_rms_norm, test_embedding, test_rope,
test_logprob, test_attention): bitwise comparison, ISA / thread-count switching, batch sizes."""

import contextlib
import os

import torch

import ws1_kernels_cpu  # noqa: F401  registers torch.ops.ws1_cpu

OPS = torch.ops.ws1_cpu
BATCH_SIZES = (1, 2, 3, 7, 16, 59, 128, 257)


def bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of a float tensor's bits (bf16 -> int16, fp32 -> int32)."""
    t = t.detach().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16)
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    if t.dtype == torch.float64:
        return t.view(torch.int64)
    return t


def compare(a: torch.Tensor, b: torch.Tensor) -> str:
    """'same' iff a and b have the same dtype, shape and bits (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return "different"
    return "same" if torch.equal(bits(a), bits(b)) else "different"


def assert_same(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    res = compare(a, b)
    if res != "same":
        n = "?"
        if a.shape == b.shape and a.dtype == b.dtype:
            n = int((bits(a) != bits(b)).sum())
        raise AssertionError(f"not bitwise identical ({what}): {n} elements differ, shapes {a.shape} {b.shape}")


def available_isas():
    """ISA paths this host can run (scalar always; avx2 / avx512 / avx512bf16 where the CPU has them)."""
    old = os.environ.pop("WS1_CPU_ISA", None)
    out = []
    try:
        for name in ("scalar", "avx2", "avx512", "avx512bf16"):
            os.environ["WS1_CPU_ISA"] = name
            try:
                ws1_kernels_cpu.isa()
                out.append(name)
            except RuntimeError:
                pass
    finally:
        os.environ.pop("WS1_CPU_ISA", None)
        if old is not None:
            os.environ["WS1_CPU_ISA"] = old
    return out


@contextlib.contextmanager
def isa(name):
    old = os.environ.get("WS1_CPU_ISA")
    os.environ["WS1_CPU_ISA"] = name
    try:
        assert ws1_kernels_cpu.isa() == name
        yield
    finally:
        if old is None:
            os.environ.pop("WS1_CPU_ISA", None)
        else:
            os.environ["WS1_CPU_ISA"] = old


@contextlib.contextmanager
def threads(n):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def settings():
    """(isa, threads) combinations every invariance test sweeps."""
    out = []
    for name in available_isas():
        for nt in (1, 2):
            out.append((name, nt))
    return out


@contextlib.contextmanager
def setting(isa_name, nt):
    with isa(isa_name), threads(nt):
        yield


def bf16(t):
    return t.to(torch.bfloat16)


def assert_close(actual, expected, atol, rtol, what=""):
    torch.testing.assert_close(actual.double(), expected.double(), atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def row_invariance(fn, inputs, n_pool=None, sizes=BATCH_SIZES, seed=0, what=""):
    """Bitwise row invariance of fn: each output row computed alone (M=1, default ISA, 1 thread) must
    equal the same row inside batches of M rows drawn at random positions in random order, for every
    (ISA, thread count). `inputs` are tensors whose dim 0 indexes rows (all the same length N);
    fn(*batch) returns a tensor or a tuple of tensors whose dim 0 indexes the same rows."""
    n = inputs[0].shape[0]
    gen = torch.Generator().manual_seed(seed)
    with threads(1):
        alone = [_as_tuple(fn(*(x[i : i + 1] for x in inputs))) for i in range(n)]
    ref = [torch.cat([a[j] for a in alone]) for j in range(len(alone[0]))]
    for isa_name, nt in settings():
        with setting(isa_name, nt):
            for m in sizes:
                idx = torch.randperm(n, generator=gen)[: min(m, n)]
                if m > n:  # rows may repeat when M exceeds the pool
                    idx = torch.randint(0, n, (m,), generator=gen)
                outs = _as_tuple(fn(*(x[idx].contiguous() for x in inputs)))
                for j, o in enumerate(outs):
                    assert_same(o, ref[j][idx], f"{what} output {j}, M={m}, isa={isa_name}, threads={nt}")
