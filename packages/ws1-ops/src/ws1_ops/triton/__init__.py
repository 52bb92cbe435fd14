"""Triton kernels of the ``triton_cuda_bf16`` profile: one module per chain node.

Each ``<node>.py`` holds the ``@triton.jit`` kernel ``<node>_fwd_kernel`` that the manifest
declares, its backward kernel(s), and a launcher with fixed tile constants (shapes in the
docstrings, numerics in the comments). ``ws1_ops.backends.triton`` registers the launchers as
family ``triton``; nothing here is imported until that family is requested.

How they are batch-invariant (docs/design.md §7b) and what an interpreter run (``TRITON_INTERPRET=1``)
does and does not prove: ``docs/triton.md``.
"""
