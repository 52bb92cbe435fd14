"""The three places the enabled plugin changes vLLM 0.32 (installed once per process by ``ws1_vllm.register``):

1. ``ModelRegistry``: ``Qwen3ForCausalLM`` -> ``ws1_vllm.model:WS1Qwen3ForCausalLM`` (the lazy string form: the
   class is imported only where vLLM builds the model, the Worker process).
2. ``vllm.v1.sample.sampler.Sampler.compute_logprobs`` (a staticmethod): WS1's ``batch_invariant_logp``. It is the one
   log-softmax behind every returned log-prob in ``raw_logprobs`` mode — the sampled tokens' (``Sampler.forward``,
   before temperature, penalties or logits processors touch the logits) and the prompt's
   (``GPUModelRunner._get_prompt_logprobs_dict``); ``gather_logprobs`` after it only selects.
3. ``EngineArgs.create_engine_config``: the refusals of ``check_vllm_config`` run on the finished ``VllmConfig`` in
   the main process, before any engine process starts — the architecture among them: another architecture's
   model is vLLM's own, which would never reach the model's own checks.
"""

from __future__ import annotations

import functools

import torch

import ws1_ops

from . import recording
from .errors import WS1VllmRefused
from .settings import ARCHITECTURE, Settings, check_vllm_config

MODEL_CLASS = "ws1_vllm.model:WS1Qwen3ForCausalLM"

_settings: Settings | None = None  # what install() was given: the log-prob hook runs on the same kernels


def compute_logprobs(logits: torch.Tensor) -> torch.Tensor:
    """vLLM's ``Sampler.compute_logprobs``, on WS1: logits [n, V] FP32 -> full log-softmax [n, V] FP32, row i from
    row i alone (``ws1_ops.batch_invariant_logp``, the rollout's log-prob, on the plugin's kernels)."""
    if _settings is None:
        raise WS1VllmRefused("ws1_vllm: Sampler.compute_logprobs was replaced but the plugin has no settings")
    if logits.dtype != torch.float32:
        # WS1's lm_head returns FP32: other logits come from a model that is not the plugin's
        raise WS1VllmRefused(f"ws1_vllm: log-probs of {logits.dtype} logits; WS1's lm_head gives float32")
    with _settings.activate(logits.device), recording.calls():
        return ws1_ops.batch_invariant_logp(logits.contiguous())


def installed() -> Settings | None:
    """The settings install() patched vLLM for in this process (None: not installed)."""
    return _settings


def install(settings: Settings) -> None:
    """Patch vLLM (module docstring) for ``settings``; a second call changes nothing."""
    global _settings
    if _settings is not None:
        if settings != _settings:
            raise WS1VllmRefused(f"ws1_vllm: already enabled for {_settings.describe()}, not {settings.describe()}")
        return
    from vllm import ModelRegistry
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.sample.sampler import Sampler

    ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)
    Sampler.compute_logprobs = staticmethod(compute_logprobs)
    create_engine_config = EngineArgs.create_engine_config

    @functools.wraps(create_engine_config)
    def checked_engine_config(self, *args, **kwargs):
        vllm_config = create_engine_config(self, *args, **kwargs)
        check_vllm_config(vllm_config, settings)
        return vllm_config

    EngineArgs.create_engine_config = checked_engine_config
    _settings = settings
