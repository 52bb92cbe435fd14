"""rope on Ascend refuses positions beyond the vector unit's Sin/Cos input range (asc-devkit Sin.md / Cos.md: inputs
in [-65504, 65504] on A2/A3; the angle is position * inv_freq_i with inv_freq_0 = 1): one line naming the range,
never an undefined rotation. Qwen3's context (40960) is inside it."""

import pytest
import torch
from emu_cases import E


def test_positions_beyond_the_sin_cos_range_are_refused():
    x = torch.randn(2, 2, 8).bfloat16()
    E.rope(x, torch.tensor([40959, 65504]), 1e6, False)
    with pytest.raises(RuntimeError, match=r"positions must be <= 65504 \(the Ascend Sin/Cos input range\)"):
        E.rope(x, torch.tensor([0, 65505]), 1e6, False)
