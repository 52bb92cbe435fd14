"""What the plugin runs (from the environment) and the vLLM settings it refuses.

Nothing here imports vLLM: :func:`check_vllm_config` reads a ``VllmConfig`` by attribute, so the refusals are
unit-tested on small fake configs, and the package imports where vLLM is absent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .errors import WS1VllmRefused

PROFILE_ENV = "WS1_VLLM_PROFILE"
CANDIDATE_ENV = "WS1_VLLM_CANDIDATE"
ARCHITECTURE = "Qwen3ForCausalLM"  # the one architecture the plugin claims
LOGPROBS_MODE = "raw_logprobs"
KV_CACHE_DTYPES = ("auto", "bfloat16")  # auto = the model dtype, bfloat16 (checked below)
TP_SIZES = (1, 2, 4, 8)  # the degrees dividing ws1_dist.CHUNKS (not imported here: this module imports light)


@dataclass(frozen=True)
class Settings:
    """``profile``: the ws1 profile (``WS1_VLLM_PROFILE``); ``candidate``: a negative-control candidate of
    ``ws1_ops.candidate_names()`` run on the profile's family instead of the profile (``WS1_VLLM_CANDIDATE``), or
    None."""

    profile: str
    candidate: str | None = None

    @property
    def family(self) -> str:
        import ws1_accel

        return ws1_accel.family_of(self.profile)

    @property
    def model_profile(self) -> str:
        """What ``ws1_qwen3.Qwen3ForCausalLM(config, profile=...)`` is given: the candidate, else the profile."""
        return self.candidate or self.profile

    def activate(self, device: torch.device | str | None = None):
        """The kernels the plugin runs (a context manager): the model's own ``activate()`` for the same settings."""
        import ws1_ops

        if self.candidate:
            return ws1_ops.use_candidate(self.candidate, self.family)
        return ws1_ops.use_profile(self.profile, device)

    def describe(self) -> str:
        return f"{self.candidate} on the {self.family} kernels" if self.candidate else self.profile


def from_env(environ: Mapping[str, str] | None = None) -> Settings | None:
    """The settings ``WS1_VLLM_PROFILE`` / ``WS1_VLLM_CANDIDATE`` ask for; None when the profile is unset (the plugin
    is then inert). Unknown names are refused, naming the variable and the choices."""
    environ = os.environ if environ is None else environ
    profile = environ.get(PROFILE_ENV, "")
    candidate = environ.get(CANDIDATE_ENV, "")
    if not profile:
        if candidate:
            raise WS1VllmRefused(
                f"ws1_vllm: {CANDIDATE_ENV}={candidate} is set but {PROFILE_ENV} is not "
                "(a candidate runs on a profile's kernel family; unset both to run vLLM's own model)"
            )
        return None
    import ws1_accel

    if profile not in ws1_accel.PROFILE_FAMILY:
        choices = sorted(ws1_accel.PROFILE_FAMILY)
        raise WS1VllmRefused(f"ws1_vllm: {PROFILE_ENV}={profile!r} is not a ws1 profile; expected one of {choices}")
    if candidate:
        import ws1_ops

        names = ws1_ops.candidate_names()
        if candidate not in names:
            raise WS1VllmRefused(
                f"ws1_vllm: {CANDIDATE_ENV}={candidate!r} is not a ws1 candidate; expected one of {list(names)}"
            )
    return Settings(profile, candidate or None)


def _name(value) -> str:
    """An enum's name (vLLM's CompilationMode is an IntEnum), else str()."""
    return getattr(value, "name", None) or str(value)


def check_vllm_config(vllm_config, settings: Settings) -> None:
    """Refuse (:class:`WS1VllmRefused`, one line naming the setting) every vLLM setting under which the plugin's
    model would not run WS1's whole chain, or vLLM would compute part of it (or of the log-probs) itself.

    Read by attribute from a ``vllm.config.VllmConfig``: ``model_config`` (architecture, runner_type, dtype,
    quantization, logprobs_mode), ``parallel_config``, ``cache_config.cache_dtype``, ``compilation_config.mode``,
    ``quant_config``, ``lora_config``, ``speculative_config``. The device is checked where the model is built
    (:func:`resolve_device`: probing a GPU in vLLM's main process is vLLM's to do, not ours)."""
    model, parallel = vllm_config.model_config, vllm_config.parallel_config
    on = f"({PROFILE_ENV}={settings.profile})"
    architecture = getattr(model, "architecture", None)
    if architecture != ARCHITECTURE:
        raise WS1VllmRefused(
            f"ws1_vllm: architecture {architecture} is refused {on}: the plugin runs only dense {ARCHITECTURE} "
            f"(unset {PROFILE_ENV} to run it on vLLM's own kernels)"
        )
    runner = getattr(model, "runner_type", "generate")
    if runner != "generate":
        raise WS1VllmRefused(f"ws1_vllm: runner {runner!r} is refused {on}: the plugin serves text generation only")
    tp = getattr(parallel, "tensor_parallel_size", 1)
    if tp not in TP_SIZES:
        raise WS1VllmRefused(
            f"ws1_vllm: tensor_parallel_size={tp} is refused {on}: the parallel-invariant order splits K in 8 chunks, "
            f"so the degree must be one of {list(TP_SIZES)}"
        )
    for field, what in (
        ("pipeline_parallel_size", "WS1's chain runs whole on one device"),
        ("data_parallel_size", "one engine per device is the rollout's layout; run several engines instead"),
        ("prefill_context_parallel_size", "WS1's attention reads every key on one device"),
        ("decode_context_parallel_size", "WS1's attention reads every key on one device"),
    ):
        size = getattr(parallel, field, 1)
        if size != 1:
            raise WS1VllmRefused(f"ws1_vllm: {field}={size} is refused {on}: {what}")
    quantization = getattr(model, "quantization", None) or getattr(vllm_config, "quant_config", None)
    if quantization:
        raise WS1VllmRefused(
            f"ws1_vllm: quantization {_name(quantization)} is refused {on}: WS1's kernels run BF16 weights"
        )
    if getattr(vllm_config, "lora_config", None) is not None:
        raise WS1VllmRefused(f"ws1_vllm: LoRA (enable_lora) is refused {on}: vLLM's LoRA kernels are not WS1's")
    if getattr(vllm_config, "speculative_config", None) is not None:
        raise WS1VllmRefused(
            f"ws1_vllm: speculative decoding (speculative_config) is refused {on}: "
            "its draft model and rejection sampler are not WS1's"
        )
    if model.dtype != torch.bfloat16:
        raise WS1VllmRefused(f"ws1_vllm: dtype {model.dtype} is refused {on}: WS1's profiles execute in bfloat16")
    cache_dtype = vllm_config.cache_config.cache_dtype
    if cache_dtype not in KV_CACHE_DTYPES:
        raise WS1VllmRefused(
            f"ws1_vllm: kv_cache_dtype {cache_dtype} is refused {on}: WS1's attention reads the BF16 K/V it wrote; "
            f"expected one of {list(KV_CACHE_DTYPES)}"
        )
    mode = getattr(model, "logprobs_mode", LOGPROBS_MODE)
    if mode != LOGPROBS_MODE:
        # processed_* modes take a log-softmax (or logits) inside vLLM's own sampler after temperature/top-k/top-p
        raise WS1VllmRefused(
            f"ws1_vllm: logprobs_mode {mode} is refused {on}: only {LOGPROBS_MODE} returns WS1's log-probs "
            "(the processed modes are computed by vLLM's sampler)"
        )
    compilation = _name(vllm_config.compilation_config.mode)
    if compilation == "STOCK_TORCH_COMPILE":
        # the runner would model.compile() the whole model: inductor would fuse and re-emit WS1's ops
        raise WS1VllmRefused(
            f"ws1_vllm: compilation mode STOCK_TORCH_COMPILE is refused {on}: torch.compile would rewrite WS1's "
            "chain (use enforce_eager=True, or any other mode: the plugin's model is not compiled)"
        )


def check_model_len(max_model_len: int | None, max_position_embeddings: int) -> None:
    """vLLM's ``max_model_len`` must fit the checkpoint's positions: the model does not re-check positions per
    step (that would be a host sync on a GPU)."""
    if max_model_len is not None and max_model_len > max_position_embeddings:
        raise WS1VllmRefused(
            f"ws1_vllm: max_model_len {max_model_len} exceeds the checkpoint's max_position_embeddings "
            f"{max_position_embeddings}"
        )


def resolve_device(settings: Settings, vllm_device) -> torch.device:
    """The device the model runs on: the profile's (``ws1_accel.resolve_device``), which must be vLLM's. An absent
    device (``AcceleratorUnavailable``) or one of another type than the profile's (``ProfileDeviceMismatch``) is
    refused with ws1_accel's message."""
    import ws1_accel

    try:
        return ws1_accel.resolve_device(settings.profile, vllm_device)
    except ws1_accel.AcceleratorError as exc:
        raise WS1VllmRefused(f"ws1_vllm: {PROFILE_ENV}={settings.profile}: {exc}") from None
