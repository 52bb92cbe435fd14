"""WS1 Qwen3 dense model on batch-invariant ops, and a small rollout engine.

    import ws1_qwen3
    model = ws1_qwen3.from_pretrained("path/to/Qwen3-dir", profile="cpu_bf16")   # or profile="reference" (FP32)
    logits = model(input_ids)                              # [B, S] int64 -> FP32 [B, S, V]

    samples = ws1_qwen3.fixture_samples()                  # the manifest's 4 samples
    tf = ws1_qwen3.teacher_forcing(model, samples, layout="packed", grad=True)
    with ws1_ops.canonical_grads():                         # parameter grads in canonical row order
        tf.loss.backward()

    outs = ws1_qwen3.generate(model, [ws1_qwen3.Request(prompt=(1, 2, 3), max_new_tokens=8, seed=7)])

A transformers ``Qwen3ForCausalLM`` (BF16) can run the same chain in place, for a trainer built on HF::

    ws1_qwen3.apply_ws1(hf_model, "cpu_bf16")               # HF forward signature; FP32 logits and loss
    logp = ws1_qwen3.token_logprobs(hf_model, input_ids, attention_mask, labels=labels)   # [B, S] FP32

Without a checkpoint, ``ws1_qwen3.synthetic("tiny" | "qwen3-8b-L2" | "qwen3-8b")`` builds seeded
random weights (marked synthetic).
"""

from .config import PRESETS, ConfigError, Qwen3Config, preset
from .generate import Completion, Request, generate, sample_token
from .hf import PatchError, apply_ws1, left_padded, token_logprobs
from .model import REFERENCE, ModelInputError, Qwen3ForCausalLM, Rows
from .teacher import LAYOUTS, Sample, TeacherForcing, fixture_samples, teacher_forcing
from .weights import WeightsError, content_sha256, from_pretrained, read_checkpoint, save_pretrained, synthetic

__all__ = [
    "LAYOUTS",
    "PRESETS",
    "REFERENCE",
    "Completion",
    "ConfigError",
    "ModelInputError",
    "PatchError",
    "Qwen3Config",
    "Qwen3ForCausalLM",
    "Request",
    "Rows",
    "Sample",
    "TeacherForcing",
    "WeightsError",
    "apply_ws1",
    "left_padded",
    "content_sha256",
    "fixture_samples",
    "from_pretrained",
    "generate",
    "preset",
    "read_checkpoint",
    "sample_token",
    "save_pretrained",
    "synthetic",
    "teacher_forcing",
    "token_logprobs",
]
