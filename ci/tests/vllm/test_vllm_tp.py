"""vLLM + the ws1-vllm plugin at tensor parallel 4 (four worker processes, o_proj/down_proj finished across them by
the 8-chunk K tree): every sampled token's log-prob equals the one-device model's in the same order
(``Qwen3ForCausalLM.k_chunks = 8``), bit for bit; the same tokens scored by our variant kernels differ (the proof the
comparison can fail), and so do they in the default order (the plugin ran the TP order: on this checkpoint's widths
the two orders differ). TP 2 runs in the GRPO test beside this one. ~60 s on 2 cores (vLLM starts four workers)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="the vllm suite runs in .venv-vllm (bash ci/setup_vllm.sh)")

PROBE = r"""
import json, sys, tempfile
if __name__ == "__main__":
    import torch, ws1_qwen3
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    d = tempfile.mkdtemp() + "/tiny-tp"
    # wide enough that the TP order's log-probs differ from the default order's (tiny's widths: they do not)
    cfg = ws1_qwen3.preset("tiny").replace(
        hidden_size=1024, num_attention_heads=8, num_key_value_heads=8, head_dim=128, intermediate_size=4096,
        num_hidden_layers=2, name="wide",
    )
    ws1_qwen3.save_pretrained(ws1_qwen3.synthetic(cfg, "cpu_bf16"), d)
    llm = LLM(model=d, skip_tokenizer_init=True, dtype="bfloat16", seed=0, tensor_parallel_size=4,
              distributed_executor_backend="mp", block_size=32, max_model_len=256, enforce_eager=True)
    prompts = [[1, 2, 3, 4], [7, 8, 9], [100, 200, 300, 400, 500], [11, 12]]
    params = [SamplingParams(max_tokens=16, logprobs=0, temperature=1.0, seed=i, detokenize=False) for i in range(4)]
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    samples, got = [], []
    for i, (p, o) in enumerate(zip(prompts, outs)):
        toks = list(o.outputs[0].token_ids)
        samples.append(ws1_qwen3.Sample(i, tuple(p + toks), len(p), f"s{i}"))
        got += [lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, toks)]
    got = torch.tensor(got, dtype=torch.float32)
    differ = {}
    for name, profile, k_chunks in (
        ("tp_order", "cpu_bf16", 8), ("default_order", "cpu_bf16", None), ("variant", "variant_m_split_k", 8)
    ):
        model = ws1_qwen3.from_pretrained(d, profile)
        model.k_chunks = k_chunks
        want = ws1_qwen3.teacher_forcing(model, samples, layout="packed").logp
        differ[name] = int((want.view(torch.int32) != got.view(torch.int32)).sum())
    print("RESULT " + json.dumps({"n": got.numel(), "differ": differ}))
"""


def test_vllm_at_tp_4_equals_the_one_device_model_in_the_tp_order(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("WS1_VLLM_PROFILE", "WS1_VLLM_CANDIDATE")}
    env.update(WS1_VLLM_PROFILE="cpu_bf16", VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # vLLM refuses its default binding with fewer NUMA nodes
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["n"] == 64
    assert result["differ"]["tp_order"] == 0, result
    # the controls: the same tokens scored in the default order (the plugin did run the TP order) and by our variant
    # kernels (the comparison can fail) differ
    assert result["differ"]["default_order"] > 0 and result["differ"]["variant"] > 0, result
