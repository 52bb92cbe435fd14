"""The plugin's switches and refusals, without an engine: env parsing, every refusal of check_vllm_config on a small
fake VllmConfig, the KV-cache layout check, the paged gather against a plain per-request loop, the provenance merge.
Runs without vLLM installed except the one subprocess test that loads vLLM's plugin machinery."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import ws1_ops
import ws1_vllm
from ws1_vllm import WS1VllmRefused, check_vllm_config, from_env
from ws1_vllm.attention import PagedStep, kv_rows

CPU = ws1_vllm.Settings("cpu_bf16")


def fake_config(**changes) -> SimpleNamespace:
    """A VllmConfig as check_vllm_config reads it, every setting accepted; ``changes``: ``"section.field": value``."""
    config = SimpleNamespace(
        model_config=SimpleNamespace(
            architecture="Qwen3ForCausalLM",
            runner_type="generate",
            dtype=torch.bfloat16,
            quantization=None,
            logprobs_mode="raw_logprobs",
        ),
        parallel_config=SimpleNamespace(
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            data_parallel_size=1,
            prefill_context_parallel_size=1,
            decode_context_parallel_size=1,
        ),
        cache_config=SimpleNamespace(cache_dtype="auto"),
        compilation_config=SimpleNamespace(mode=SimpleNamespace(name="NONE")),
        quant_config=None,
        lora_config=None,
        speculative_config=None,
    )
    for path, value in changes.items():
        *sections, field = path.split(".")
        target = config
        for section in sections:
            target = getattr(target, section)
        setattr(target, field, value)
    return config


def test_the_accepted_settings_pass():
    check_vllm_config(fake_config(), CPU)
    check_vllm_config(fake_config(**{"cache_config.cache_dtype": "bfloat16"}), CPU)
    for tp in (2, 4, 8):  # the parallel-invariant order's degrees (the model checks the heads and vocabulary)
        check_vllm_config(fake_config(**{"parallel_config.tensor_parallel_size": tp}), CPU)
    for mode in ("NONE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE"):  # the plugin's model is not compiled in these
        check_vllm_config(fake_config(**{"compilation_config.mode": SimpleNamespace(name=mode)}), CPU)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"model_config.architecture": "LlamaForCausalLM"}, "architecture LlamaForCausalLM"),
        ({"model_config.runner_type": "pooling"}, "runner 'pooling'"),
        ({"parallel_config.tensor_parallel_size": 3}, "tensor_parallel_size=3"),
        ({"parallel_config.tensor_parallel_size": 16}, "tensor_parallel_size=16"),
        ({"parallel_config.pipeline_parallel_size": 2}, "pipeline_parallel_size=2"),
        ({"parallel_config.data_parallel_size": 2}, "data_parallel_size=2"),
        ({"parallel_config.decode_context_parallel_size": 2}, "decode_context_parallel_size=2"),
        ({"model_config.quantization": "fp8"}, "quantization fp8"),
        ({"quant_config": SimpleNamespace(name="AWQConfig")}, "quantization AWQConfig"),
        ({"lora_config": object()}, "LoRA (enable_lora)"),
        ({"speculative_config": object()}, "speculative decoding (speculative_config)"),
        ({"model_config.dtype": torch.float16}, "dtype torch.float16"),
        ({"cache_config.cache_dtype": "fp8"}, "kv_cache_dtype fp8"),
        ({"model_config.logprobs_mode": "processed_logprobs"}, "logprobs_mode processed_logprobs"),
        ({"compilation_config.mode": SimpleNamespace(name="STOCK_TORCH_COMPILE")}, "STOCK_TORCH_COMPILE"),
    ],
)
def test_each_refusal_is_one_line_naming_the_setting(change, named):
    with pytest.raises(WS1VllmRefused) as caught:
        check_vllm_config(fake_config(**change), CPU)
    message = str(caught.value)
    assert message.startswith("ws1_vllm: ") and "\n" not in message, message
    assert named in message and "WS1_VLLM_PROFILE=cpu_bf16" in message, message


def test_env_switches():
    assert from_env({}) is None  # inert
    assert from_env({"WS1_VLLM_PROFILE": ""}) is None
    assert from_env({"WS1_VLLM_PROFILE": "cpu_bf16"}) == CPU
    control = from_env({"WS1_VLLM_PROFILE": "cpu_bf16", "WS1_VLLM_CANDIDATE": "variant_m_split_k"})
    assert control.model_profile == "variant_m_split_k" and control.family == "cpu"
    for env, named in (
        ({"WS1_VLLM_PROFILE": "cpu_fp16"}, "WS1_VLLM_PROFILE='cpu_fp16' is not a ws1 profile; expected one of"),
        ({"WS1_VLLM_PROFILE": "cpu_bf16", "WS1_VLLM_CANDIDATE": "nope"}, "WS1_VLLM_CANDIDATE='nope' is not a ws1"),
        ({"WS1_VLLM_CANDIDATE": "variant_m_split_k"}, "WS1_VLLM_PROFILE is not"),
    ):
        with pytest.raises(WS1VllmRefused, match=named):
            from_env(env)


def test_an_absent_device_is_refused_with_ws1_accels_reason():
    import ws1_accel

    if ws1_accel.is_available("cuda_bf16"):
        pytest.skip("a CUDA device is present")
    with pytest.raises(WS1VllmRefused, match=r"^ws1_vllm: WS1_VLLM_PROFILE=cuda_bf16: cuda_bf16 needs a cuda device"):
        ws1_vllm.settings.resolve_device(ws1_vllm.Settings("cuda_bf16"), "cuda:0")
    with pytest.raises(WS1VllmRefused, match="runs on cpu devices"):
        ws1_vllm.settings.resolve_device(CPU, "cuda:0")


def test_a_kv_cache_of_another_layout_is_refused():
    ok = torch.zeros(4, 2, 32, 2 * 16, dtype=torch.bfloat16)
    assert kv_rows(ok, "CPU_ATTN", 2, 16).shape == (4, 2, 64, 16)
    flash = torch.zeros(2, 4, 32, 2, 16, dtype=torch.bfloat16)  # FLASH_ATTN's [2, blocks, block_size, Hkv, D]
    for cache, backend in ((flash, "FLASH_ATTN"), (ok, "FLASH_ATTN"), (ok.float(), "CPU_ATTN")):
        with pytest.raises(WS1VllmRefused, match=f"^ws1_vllm: KV cache of backend {backend} with shape"):
            kv_rows(cache, backend, 2, 16)


def test_the_paged_gather_reads_each_requests_keys_in_order():
    """PagedStep's vectorized write + gather against a per-request loop over the block table."""
    heads, dim, block_size = 2, 4, 4
    kv = kv_rows(torch.zeros(8, heads, block_size, 2 * dim, dtype=torch.bfloat16), "CPU_ATTN", heads, dim)
    old = torch.randn(8, heads, 2 * block_size, dim).to(torch.bfloat16)
    kv.copy_(old)
    block_table = torch.tensor([[3, 5, 0], [6, 1, 2]], dtype=torch.int32)
    seq_lens = torch.tensor([6, 9])  # request 0: 5 cached + 1 new (decode); request 1: 6 cached + 3 new (a chunk)
    new_pos = [5, 6, 7, 8]
    requests = [0, 1, 1, 1]
    slots = torch.tensor(
        [int(block_table[r, p // block_size]) * block_size + p % block_size for r, p in zip(requests, new_pos)]
    )
    metadata = SimpleNamespace(
        num_actual_tokens=4,
        query_start_loc=torch.tensor([0, 1, 4], dtype=torch.int32),
        seq_lens=seq_lens,
        block_table=block_table,
        slot_mapping=slots,
    )
    step = PagedStep.of(metadata, 4, block_size)
    k, v = torch.randn(2, 4, heads, dim).to(torch.bfloat16)
    seen = {}

    def attention(q, keys, values, cu_q, cu_k, positions):
        seen.update(keys=keys, values=values, cu_k=cu_k)
        return q

    original = ws1_vllm.attention.ws1_ops.attention
    ws1_vllm.attention.ws1_ops.attention = attention
    try:
        step.attend(kv, torch.zeros(4, 4, dim), k, v, torch.tensor(new_pos))
    finally:
        ws1_vllm.attention.ws1_ops.attention = original
    expect_k, expect_v = [], []
    for r in range(2):
        for p in range(int(seq_lens[r])):
            block, row = int(block_table[r, p // block_size]), p % block_size
            expect_k.append(kv[block, :, row])
            expect_v.append(kv[block, :, block_size + row])
    assert torch.equal(seen["keys"], torch.stack(expect_k)) and torch.equal(seen["values"], torch.stack(expect_v))
    assert seen["cu_k"].tolist() == [0, 6, 15]
    for i, (r, p) in enumerate(zip(requests, new_pos)):  # the new rows landed at their slots
        block, row = int(block_table[r, p // block_size]), p % block_size
        assert torch.equal(kv[block, :, row], k[i]) and torch.equal(kv[block, :, block_size + row], v[i])


def test_a_padded_step_is_refused():
    metadata = SimpleNamespace(
        num_actual_tokens=3,
        query_start_loc=torch.tensor([0, 3]),
        seq_lens=torch.tensor([3]),
        block_table=torch.tensor([[1]]),
        slot_mapping=torch.arange(4),
    )
    with pytest.raises(WS1VllmRefused, match="^ws1_vllm: a step of 4 token rows has 3 real tokens"):
        PagedStep.of(metadata, 4, 32)


def test_provenance_merges_every_block():
    total = ws1_ops.Recorder()
    x = torch.randn(3, 8).to(torch.bfloat16)
    with ws1_ops.use_profile("cpu_bf16"):
        for _ in range(2):
            with ws1_ops.record() as part:
                ws1_ops.rms_norm(x, torch.ones(8, dtype=torch.bfloat16), 1e-6)
            total.merge(part)
    entry = total.summary()["rms_norm"]
    assert entry["forward"] == 2 and entry["kernel_ids"] == ["ws1_cpu::rms_norm"] and entry["package_problems"] == []


INERT = """
import json, os
os.environ.pop("WS1_VLLM_PROFILE", None)
from vllm import ModelRegistry
from vllm.plugins import load_general_plugins
from vllm.v1.sample.sampler import Sampler
import ws1_vllm
stock_logprobs = Sampler.compute_logprobs
load_general_plugins()  # finds the entry point, calls ws1_vllm.register: inert
inert = [ModelRegistry.models["Qwen3ForCausalLM"].module_name, Sampler.compute_logprobs is stock_logprobs]
os.environ["WS1_VLLM_PROFILE"] = "cpu_bf16"
ws1_vllm.register(); ws1_vllm.register()  # idempotent
entry = ModelRegistry.models["Qwen3ForCausalLM"]
enabled = [entry.module_name, entry.class_name, Sampler.compute_logprobs.__module__]
print(json.dumps({"inert": inert, "enabled": enabled}))
"""


def test_inert_without_the_profile_and_enabled_with_it():
    pytest.importorskip("vllm")
    env = {k: v for k, v in os.environ.items() if k != "WS1_VLLM_PROFILE"}
    out = subprocess.run([sys.executable, "-c", INERT], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    report = json.loads(out.stdout.splitlines()[-1])
    assert report["inert"] == ["vllm.model_executor.models.qwen3", True]
    assert report["enabled"] == ["ws1_vllm.model", "WS1Qwen3ForCausalLM", "ws1_vllm.hooks"]
