"""A negative control built on the triton family (interpreter): variant_attn_decode_order wraps the family's own
attention, so a GPU host's C10 runs its control on its profile's kernels (a cpu-built control cannot take CUDA
tensors). The base kernel's decode step equals its prefill row bitwise; the control's differs."""

import pytest
import torch
from tdev import DEV

import ws1_ops
from ws1_ops.backends import controls


def _decode_vs_prefill():
    g = torch.Generator(device="cpu").manual_seed(0)
    S, Hq, Hkv, D = 40, 4, 2, 16
    # on the kernels' device (DEV: the CPU in the interpreter, CUDA in device mode), as a gate would call them
    q, k, v = (torch.randn(S, h, D, generator=g, device="cpu").to(torch.bfloat16).to(DEV) for h in (Hq, Hkv, Hkv))
    cu = torch.tensor([0, S], device=DEV)
    pre = ws1_ops.attention(q, k, v, cu, cu, torch.arange(S, device=DEV))
    dec = ws1_ops.attention(q[S - 1 :], k, v, torch.tensor([0, 1], device=DEV), cu, torch.tensor([S - 1], device=DEV))
    return pre[S - 1 :].cpu(), dec.cpu()


def test_decode_control_on_the_triton_family(tri):
    a, b = _decode_vs_prefill()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))  # the family's own kernel: decode == prefill
    with ws1_ops.use_candidate("variant_attn_decode_order", "triton"):
        a, b = _decode_vs_prefill()
    assert not torch.equal(a.view(torch.int16), b.view(torch.int16))  # the control: a decode step differs


def test_a_cpu_only_control_refuses_another_family():
    assert "triton" in controls.CONTROLS["variant_attn_decode_order"].families
    with pytest.raises(ws1_ops.KernelUnavailable, match="built on the cpu kernels only, not on the triton family"):
        ws1_ops.use_candidate("variant_m_split_k", "triton")
