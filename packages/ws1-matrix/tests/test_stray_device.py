"""The stray-device probe (ws1_matrix.stray): torch's default device set to ``meta`` while every input lives
on the CPU, so a tensor that a library, a gate or a benchmark's setup makes without naming its device fails
here as it fails on a GPU host (the first H200 run: the FP32 reference's rope built ``inv_freq`` on the CPU).

Each test runs the real code in the mode and compares with the same code outside it, bit for bit: the mode
must change nothing but where a stray tensor lands. The first test is the H200 bug itself; it fails on the
reference.py of commit ad4538c (``Tensor on device meta is not on the expected device cpu!``)."""

import os
import subprocess
import sys

import pytest
import torch

import ws1_ops
import ws1_qwen3
from ws1_matrix.__main__ import main
from ws1_matrix.stray import stray_default_device
from ws1_ops import reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def same_bits(a, b):
    assert a.device == b.device and a.dtype == b.dtype and a.shape == b.shape, (a.device, b.device, a.dtype, b.dtype)
    assert torch.equal(
        a.contiguous().view(torch.int32 if a.dtype == torch.float32 else torch.int16),
        b.contiguous().view(torch.int32 if b.dtype == torch.float32 else torch.int16),
    )


def test_the_mode_makes_an_unplaced_tensor_fail():
    """The probe itself: an op mixing an input with a tensor made without a device raises in the mode."""
    x = torch.ones(3, device="cpu")
    with stray_default_device():
        assert torch.arange(3).device.type == "meta" and torch.arange(3, device="cpu").device.type == "cpu"
        with pytest.raises(RuntimeError):
            _ = x * torch.arange(3)
    assert torch.get_default_device().type == "cpu"  # restored
    # and no device context left behind (it would route every later torch call through a function mode)
    assert getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None) is None


def test_fp32_reference_rope_and_attention_place_their_tensors():
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(7, 4, 16, generator=g, device="cpu").to(torch.bfloat16)
    pos = torch.tensor([0, 1, 2, 3, 0, 1, 2], device="cpu")
    cu = torch.tensor([0, 4, 7], device="cpu")
    want_rope = reference.rope(x, pos, 1e6)
    want_attn = reference.attention(x, x[:, :2], x[:, :2], cu, cu, pos)
    with stray_default_device():
        same_bits(reference.rope(x, pos, 1e6), want_rope)
        same_bits(reference.attention(x, x[:, :2], x[:, :2], cu, cu, pos), want_attn)


def test_the_chain_gate_runs_whole_in_the_mode(tmp_path):
    """C10 on tiny: every layout cell, the FP32 reference cell, train/infer parity through the engine's
    prefill and decode, the decode sweep — green, as outside the mode."""
    with stray_default_device():
        assert main(["c10", "cpu_bf16", "--evidence-dir", str(tmp_path)]) == 0


def test_generate_and_teacher_forcing_in_the_mode(tiny, samples):
    reqs = [
        ws1_qwen3.Request(prompt=(5, 6, 7), max_new_tokens=4, seed=3),
        ws1_qwen3.Request(prompt=(9, 10), max_new_tokens=3, seed=4, temperature=0.0),
    ]
    want = ws1_qwen3.generate(tiny, reqs)
    want_tf = ws1_qwen3.teacher_forcing(tiny, samples, layout="packed")
    with stray_default_device():
        got = ws1_qwen3.generate(tiny, reqs)
        got_tf = ws1_qwen3.teacher_forcing(tiny, samples, layout="packed")
        new = ws1_qwen3.synthetic("tiny", "cpu_bf16")  # weights made where the model lives
    assert [(c.tokens, c.logprobs) for c in got] == [(c.tokens, c.logprobs) for c in want]
    same_bits(got_tf.logp, want_tf.logp)
    for (n, a), (_, b) in zip(new.named_parameters(), tiny.named_parameters()):
        assert a.device.type == "cpu", n
        same_bits(a.detach(), b.detach())


def test_the_chain_benchmark_setup_in_the_mode(tiny, samples, monkeypatch):
    """benchmarks/bench_triton.chain_phases and plain_qwen3 (the chain benchmark of both GPU profiles),
    set up and run once on the CPU."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    from bench_triton import chain_phases
    from plain_qwen3 import PlainQwen3

    dev = torch.device("cpu")
    with stray_default_device():
        plain = PlainQwen3(tiny, device=dev)
        for _name, fn, ref in chain_phases(tiny, plain, samples, dev):
            with ws1_ops.use_profile("cpu_bf16"):
                fn()
            ref()


def test_the_environment_switch_reaches_a_gate_process(tmp_path):
    """WS1_STRAY_DEVICE=meta python -m ws1_matrix ...: the mode for any gate, in its own process."""
    code = "import torch, sys; from ws1_matrix.stray import from_env\nwith from_env(): print(torch.empty(1).device)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "WS1_STRAY_DEVICE": "meta"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "meta"
