"""The one exception of ws1_vllm."""

from __future__ import annotations


class WS1VllmRefused(ValueError):
    """A setting, checkpoint or input the plugin will not run: one line, starting ``ws1_vllm: ``, naming it.

    Raised instead of any fallback: with ``WS1_VLLM_PROFILE`` set, vLLM either runs the whole chain on WS1's
    kernels or does not run."""
