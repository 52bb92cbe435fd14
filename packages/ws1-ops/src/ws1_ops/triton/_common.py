"""Shared pieces of the Triton kernels: interpreter detection, BF16 rounding, launch checks.

Interpreter vs GPU is decided once, when this module is imported: ``triton.jit`` returns an
``InterpretedFunction`` when ``TRITON_INTERPRET=1`` was set before the kernels were defined, and
then every kernel runs on CPU tensors in numpy. Two things differ there and are handled here:

* ``tl.dot`` on BF16 operands is wrong in the interpreter (it multiplies the raw uint16 bit
  patterns), so every kernel takes ``DOT_F32`` and, when it is set, upcasts its dot operands to
  FP32 before ``tl.dot`` (exact: BF16 -> FP32 is a 16-bit shift). On the GPU ``DOT_F32`` is False:
  the tensor cores multiply BF16 and accumulate in FP32 (an FP32 operand is split into BF16 parts).
* The interpreter's FP32 -> BF16 cast truncates. Every BF16 result is therefore rounded by
  :func:`rne_bf16`, round-to-nearest-even written with integer bit operations, which gives the
  same bits in the interpreter, on the GPU and in the cpu kernels (``f32_to_bf16_bits``).

So an interpreter run checks the kernels' logic, masking, tiling and invariance, and their
accuracy with the GPU's rounding points; it does not check the GPU's dot numerics (numpy sums
each FP32 dot block in its own order, the tensor cores in theirs). Evidence comes from the GPU.
"""

from __future__ import annotations

import functools
from collections import Counter

import torch
import triton
import triton.language as tl


@triton.jit
def _probe():
    pass


# True when triton.jit produced interpreter functions (TRITON_INTERPRET=1 before import).
INTERPRET = type(_probe).__name__ == "InterpretedFunction"
_INTERP = tl.constexpr(INTERPRET)


@triton.jit
def _dot_interp(a, b, acc):
    return acc + tl.sum(a[:, :, None] * b[None, :, :], axis=1)


@triton.jit
def dot(a, b, acc):
    """``acc + a @ b`` for a [BM, BK] and b [BK, BN] FP32/BF16 tiles, FP32 result.

    GPU: ``tl.dot`` on BF16 operands (the tensor cores, FP32 accumulation). Interpreter: ``tl.dot``
    is numpy's matmul there, i.e. the host's BLAS, whose reduction order follows M on some CPUs
    (measured on an AMD Zen 3 host with numpy's OpenBLAS 0.3.31: det_gemm's padded and permuted
    layouts differed from the canonical batch in single FP32 ulps; on other hosts they did not), which
    made the interpreter's invariance verdicts depend on the machine. So the interpreter forms the
    [BM, BK, BN] products and sums them over k with numpy's reduction along a non-innermost axis:
    k ascending for every output element, whatever BM is. Same values up to FP32 rounding; it checks
    logic and invariance, not GPU numerics."""
    if _INTERP:
        if a.shape[0] * a.shape[1] * b.shape[1] > 1 << 20:
            # the [BM, BK, BN] products would exceed Triton's largest tensor (2^20 elements, e.g. a
            # 128 x 64 x 256 tile): the even and odd columns separately, each element's sum unchanged
            b0, b1 = tl.split(tl.reshape(b, (b.shape[0], b.shape[1] // 2, 2)))
            c0, c1 = tl.split(tl.reshape(acc, (acc.shape[0], acc.shape[1] // 2, 2)))
            out = tl.reshape(tl.join(_dot_interp(a, b0, c0), _dot_interp(a, b1, c1)), (acc.shape[0], acc.shape[1]))
        else:
            out = _dot_interp(a, b, acc)
    else:
        out = tl.dot(a, b, acc, input_precision="ieee")
    return out


# The kernels' self-report (the registry's counter for the triton family): launches per kernel id
# ("ws1_ops.triton.<module>:<kernel>") and path ("interpreter", or the GPU's "sm<major><minor>").
LAUNCHES: Counter = Counter()


@functools.lru_cache(maxsize=None)
def _gpu_path(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm{major}{minor}"


# FMA contraction (docs/triton.md, "FMA contraction"): every kernel is compiled with
# ``enable_fp_fusion=False``, so the GPU rounds after every +, - and * exactly as the source (and the
# interpreter, which never fuses) writes them: rope's FP64 sincos stays "+, -, x only", and the
# cross-kernel identities (silu(x) == swiglu(x, 1), logprob == batch_invariant_logp[target]) do not
# depend on which products ptxas or LLVM would have contracted in one kernel and not in the other.
# An FMA appears only where it is written: ``tl.fma`` (the norms' dx, swiglu's and silu's
# backward) and inside libdevice's ``logf`` behind ``tl.log`` (fixed library code, its
# ``fma.rn.ftz``); the dots are tensor-core MMAs. Checked on the compiled PTX by
# ``python -m ws1_matrix triton-aot``. Triton 3.9 still defaults to fusion on.
FP_FUSION = False
# kernels whose source writes an FMA itself (tl.fma)
EXPLICIT_FMA = frozenset({"rms_norm_bwd_kernel", "qk_norm_bwd_kernel", "swiglu_bwd_kernel", "silu_bwd_kernel"})


class counted:
    """A launched kernel that counts its own launches (``kernel[grid](...)`` as before), so what ran
    is known from the launch itself, not from the Python label that chose the launcher. Every launch
    carries the family's compile options (:data:`FP_FUSION`): the option the GPU compiles with at
    run time is the one the ahead-of-time check compiles with."""

    def __init__(self, fn):
        self.fn = fn
        inner = getattr(fn, "fn", fn)
        self.kernel_id = f"{inner.__module__}:{inner.__name__}"

    @staticmethod
    def options(kwargs: dict) -> dict:
        """The launch's keyword arguments with the family's compile options added."""
        return {"enable_fp_fusion": FP_FUSION, **kwargs}

    def __getitem__(self, grid):
        launch = self.fn[grid]

        def run(*args, **kwargs):
            out = launch(*args, **self.options(kwargs))
            LAUNCHES[(self.kernel_id, "interpreter" if INTERPRET else _gpu_path(torch.cuda.current_device()))] += 1
            return out

        return run

    def __getattr__(self, name):
        return getattr(self.fn, name)


def launches() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (kid, path), n in LAUNCHES.items():
        out.setdefault(kid, {})[path] = n
    return out


# ---- which configuration table a launch uses --------------------------------------------------
# Tile constants are fixed per arch, dtype and weight shape (docs/triton.md, "Configurations"): a
# device of compute capability 9.x (H100/H200) runs the Hopper table (wgmma-sized tiles, TMA
# descriptors); every other device runs the sm_80 table (mma.sync tiles, pointer loads). The
# interpreter has no device: it runs the logic of INTERPRET_ARCH's table ("sm90" unless a test or
# triton-aot's recording switches it to "sm80"), so CI checks both tables' tiling and masking.
ARCHS = ("sm90", "sm80")
INTERPRET_ARCH = "sm90"


@functools.lru_cache(maxsize=None)
def _device_arch(index: int) -> str:
    major, _ = torch.cuda.get_device_capability(index)
    return "sm90" if major == 9 else "sm80"


def arch(t: torch.Tensor) -> str:
    """The configuration table for a launch on ``t``'s device: ``"sm90"`` or ``"sm80"`` (no host sync)."""
    if INTERPRET:
        if INTERPRET_ARCH not in ARCHS:
            raise ValueError(f"triton: INTERPRET_ARCH must be one of {ARCHS}, got {INTERPRET_ARCH!r}")
        return INTERPRET_ARCH
    return _device_arch(t.device.index if t.device.index is not None else torch.cuda.current_device())


def dot_f32(*tensors: torch.Tensor) -> bool:
    """Whether a kernel's dot operands are upcast to FP32: in the interpreter only. On the GPU every
    dot is a BF16 tensor-core MMA with FP32 accumulation; an FP32 operand (lm_head's backward) is
    split into three BF16 parts first (``_gemm``, ``SPLIT_A``), never a TF32 or CUDA-core FP32 dot."""
    del tensors
    return INTERPRET


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def check_device(op: str, *tensors: torch.Tensor) -> None:
    """Triton kernels run on CUDA tensors; CPU tensors only under the interpreter (tests)."""
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        if t.device.type == "cuda":
            continue
        if t.device.type == "cpu" and INTERPRET:
            continue
        raise ValueError(
            f"triton {op}: tensors must be on a CUDA device, got {t.device}"
            + ("" if INTERPRET else " (CPU tensors run only under TRITON_INTERPRET=1)")
        )


def index_on(data: torch.Tensor, *index: torch.Tensor) -> list[torch.Tensor]:
    """Index tensors (ids, positions, cu_seqlens, row orders) moved to the data's device, contiguous.
    A row order built on the host (``canonical_order`` without keys) is a valid input on a GPU."""
    return [t.to(data.device).contiguous() for t in index]


@triton.jit
def rne_bf16(x):
    """FP32 -> BF16, round to nearest even, with integer ops (identical in the interpreter and on
    the GPU). NaN stays a quiet NaN with its sign and high payload bits; overflow rounds to Inf."""
    u = x.to(tl.uint32, bitcast=True)
    lsb = (u >> 16) & 1
    r = (u + 0x7FFF + lsb) >> 16
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = tl.where(is_nan, (u >> 16) | 0x40, r)
    return r.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def bf16_operand(x):
    """A finite FP32 tile rounded to BF16 (RNE) for a tensor-core operand (attention's P and dS).

    GPU: the hardware conversion (``cvt.rn.bf16.f32``, one instruction; :func:`rne_bf16` is ~8 integer
    operations per element, which the attention inner loop pays on every [BM, BN] tile). Interpreter:
    :func:`rne_bf16` (its own cast truncates). The two give the same bits for every finite value; they
    differ only in a NaN's payload, and a NaN operand makes the row NaN either way."""
    if _INTERP:
        out = rne_bf16(x)
    else:
        out = x.to(tl.bfloat16, fp_downcast_rounding="rtne")
    return out


@triton.jit
def bf16_round_f32(x):
    """x rounded to BF16 (RNE) and back to FP32: the value a BF16 dot operand carries."""
    return rne_bf16(x).to(tl.float32)
