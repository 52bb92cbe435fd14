"""ws1_vllm: dense Qwen3 inside vLLM 0.32 on WS1's batch-invariant kernels, so the log-probs a vLLM rollout returns
are, bit for bit, those WS1's teacher forcing recomputes (``ws1_qwen3.teacher_forcing``, same profile, same weights).

A vLLM general plugin (entry point ``vllm.general_plugins: ws1 = ws1_vllm:register``), inert unless
``WS1_VLLM_PROFILE`` names a ws1 profile (``cpu_bf16``, ...). Enabled, it registers :mod:`ws1_vllm.model`'s
``WS1Qwen3ForCausalLM`` for ``Qwen3ForCausalLM`` (every node on the profile's kernels, attention on vLLM's paged KV
cache), makes vLLM's log-probs WS1's ``batch_invariant_logp``, and refuses (:class:`WS1VllmRefused`, one line) every
setting under which part of the chain would not be WS1's: tensor/pipeline/data/context parallel > 1, quantization,
LoRA, speculative decoding, a dtype other than bfloat16, a KV-cache dtype other than auto/bfloat16, a
``logprobs_mode`` other than ``raw_logprobs``, compilation mode ``STOCK_TORCH_COMPILE``, a runner other than
``generate``, an architecture other than ``Qwen3ForCausalLM`` (refused, not handed to vLLM's own model: the variable
says this engine's log-probs are WS1's), a profile whose device is absent or not vLLM's.

``WS1_VLLM_CANDIDATE=<candidate>`` (one of ``ws1_ops.candidate_names()``, e.g. ``variant_m_split_k``) runs that
negative control on the profile's kernel family instead: the gate's proof that its comparison can fail.

:func:`provenance` says, per node, which ws1 kernels the plugin ran in this process since the model was built.

Known limitation (vLLM 0.32 on CPU, not the plugin's): a seeded request (``SamplingParams.seed``) whose prefill is
chunked crashes the engine (``CPU Generator does not use offset``, in vLLM's bookkeeping of discarded samples), and
vLLM's sampling stream depends on the chunking anyway. Sampling stays vLLM's: run seeded requests without chunked
prefill (``max_num_batched_tokens`` >= the longest prompt). Returned log-probs do not depend on sampling.

Nothing here imports vLLM at import time: the package installs and imports without it.
"""

from __future__ import annotations

import ws1_ops

from .errors import WS1VllmRefused
from .rollout import VllmRollout
from .settings import CANDIDATE_ENV, PROFILE_ENV, Settings, check_vllm_config, from_env

# the required nodes the plugin does not run, and why; every other one runs inside vLLM (NODES)
NOT_RUN = {
    "silu": "the MLP runs the fused swiglu",
    "logprob": "the trainer's log-prob; vLLM's log-probs are batch_invariant_logp's",
}
# the nodes vLLM runs through the plugin, from the manifest's node table (ws1_ops.REQUIRED_NODES), in its order
NODES = tuple(node for node in ws1_ops.REQUIRED_NODES if node not in NOT_RUN)

__all__ = [
    "CANDIDATE_ENV",
    "NODES",
    "NOT_RUN",
    "PROFILE_ENV",
    "Settings",
    "VllmRollout",
    "WS1VllmRefused",
    "check_vllm_config",
    "enabled",
    "from_env",
    "provenance",
    "register",
]


def provenance() -> dict[str, dict]:
    """Per node, what the plugin ran in this process since the model was built: the ``ws1_ops.record()`` summary
    (op -> ``kernel_ids`` such as ``ws1_cpu::det_gemm``, ``families``, ``devices``, call counts, the kernel package's
    own count) of the plugin's calls only (:mod:`ws1_vllm.recording`). ``{}`` before a model exists here. vLLM
    builds the model in its Worker: read this in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) or through
    ``LLM.collective_rpc``."""
    from . import recording

    return recording.summary()


def enabled() -> Settings | None:
    """The settings the plugin runs with in this process (None: inert)."""
    from . import hooks

    return hooks.installed()


def register() -> None:
    """vLLM's plugin hook, called once per vLLM process (main, EngineCore, Worker). Inert (returns at once) unless
    ``WS1_VLLM_PROFILE`` is set; then patches vLLM for the profile (:mod:`ws1_vllm.hooks`). Idempotent, cheap (no
    model, no device probe); an unknown profile or candidate raises :class:`WS1VllmRefused`."""
    settings = from_env()
    if settings is None:
        return
    from . import hooks

    hooks.install(settings)
