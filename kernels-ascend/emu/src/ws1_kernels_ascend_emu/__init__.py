"""The WS1 Ascend C kernels (kernels-ascend/csrc/*.asc) compiled by g++ against WS1's emulator of the Ascend C
API subset they use. Importing this module registers ``torch.ops.ws1_ascend_emu.*`` on CPU tensors.

What it proves: the kernels' ORDER logic — which values each instruction combines, in which order, with which
fixed tiles — run through the same invariance transforms and accuracy judgments as the cpu family. What it
does not: the NPU's bits (its Exp/Ln/Sqrt/Sin/Cos and the Cube's internal order are assumptions, listed in
docs/ascend.md). Emulated runs record their own family, ``ascend_emu``; they are never ascend_bf16 evidence.
"""

import json

import torch  # noqa: F401  (the extension links against libtorch)

from . import _C  # noqa: F401  registers torch.ops.ws1_ascend_emu

FAMILY = "ascend_emu"
NAMESPACE = "ws1_ascend_emu"


def calls() -> dict[str, dict[str, int]]:
    """What the emulated kernels counted of their own calls: {"ws1_ascend_emu::<op>": {"emulator": n}}."""
    return json.loads(torch.ops.ws1_ascend_emu.calls())


def set_soc_cores(aic: int = 0, aiv: int = 0) -> None:
    """The SoC core counts later launches are sized from (0, 0 = the emulator's 20 AIC / 40 AIV): vector kernels get
    ``aiv`` blocks, Cube kernels ``aic``, mixed Cube + Vector kernels ``aic`` AI cores. For tests only."""
    torch.ops.ws1_ascend_emu.set_soc_cores(aic, aiv)


def op_counts(reset: bool = False) -> dict[str, dict]:
    """The emulator's operation counts per kernel since the last reset: launches, blocks, Cube MACs as issued
    (m * n * k per Mmad), vector element-operations, cross-core flags, and per pipe instructions, GM bytes read and
    written and on-chip bytes written. ``reset`` clears them after reading."""
    return json.loads(torch.ops.ws1_ascend_emu.op_counts(reset))


def legacy_gemm(a: torch.Tensor, b: torch.Tensor, kind: int) -> torch.Tensor:
    """The single-buffered Cube GEMM that cube_gemm.h replaced (emu/csrc/legacy_gemm.h): kind 0 det_gemm, 1 lm_head,
    2 gemm_fp32. For the bit-for-bit comparison tests only."""
    return torch.ops.ws1_ascend_emu.legacy_gemm(a, b, kind)


def set_gemm_k_panel(kp: int = 0) -> None:
    """The K panel width of later Cube GEMM launches (0 = kWs1KPanel = 65472). For tests only."""
    torch.ops.ws1_ascend_emu.set_gemm_k_panel(kp)


def hazard_probes() -> dict[str, str]:
    """The hazard checker's probe kernels: {name: expected failure message part, or "" for a clean run}."""
    lines = torch.ops.ws1_ascend_emu.hazard_probes().splitlines()
    return dict(line.split("\t", 1) for line in lines if line)


def hazard_probe(name: str) -> torch.Tensor:
    """Run one probe kernel on one block (raises RuntimeError with the checker's message when it fails)."""
    return torch.ops.ws1_ascend_emu.hazard_probe(name)
