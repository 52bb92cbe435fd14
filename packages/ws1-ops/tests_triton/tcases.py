"""Small-shape cases for the interpreter: the cpu tests' inputs (cases.make) with fewer rows, and
layouts that cross the kernels' tile edges (GEMM BM = 64, attention BM = BN = 64)."""

import torch

from ws1_ops import invariance
from ws1_ops.invariance import Layout

N_ROWS = 70
MS = (1, 2, 3, 7, 16, 33, 64, 65)


def layouts(n: int = N_ROWS, ms=MS) -> list[Layout]:
    """The cpu harness's transforms minus the thread-count ones (torch threads do not reach a
    Triton kernel): batch sizes M, rows alone, permuted, random positions, left/right padding."""
    return [lay for lay in invariance.standard_layouts(n, ms=ms) if lay.threads is None]


def grad_layouts(n: int = N_ROWS) -> list[Layout]:
    return [lay for lay in layouts(n) if not lay.name.startswith("M")] + [Layout("M7", torch.arange(7))]
