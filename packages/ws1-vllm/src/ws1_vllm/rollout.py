"""vLLM as the rollout engine of ``ws1_qwen3.rl.run_on_engines`` (a ``RolloutEngine``).

    rollout = ws1_vllm.VllmRollout(checkpoint_dir)        # in a process where WS1_VLLM_PROFILE is set: WS1's kernels
    completions = rollout.generate(requests)              # ws1_qwen3.Request -> ws1_qwen3.Completion, request order
    rollout.load_weights(trainer.weights())               # reload_weights + reset_prefix_cache()

One in-process ``vllm.LLM`` (set ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` to keep it in this process). Each request is
sampled by vLLM with its own seed at its temperature, stopping at its stop ids or its length; the log-prob of each
sampled token is what vLLM returns (``raw_logprobs``: the T = 1 log-softmax; with the plugin, WS1's
``batch_invariant_logp``). Without ``WS1_VLLM_PROFILE`` it is stock vLLM (the control a user has without WS1).
A weight update writes the weights as a safetensors checkpoint beside the original's config, has every worker
``reload_weights`` it in place, and resets the prefix cache (docs/vllm.md: without the reset, cached blocks of the
old weights are reused).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from .errors import WS1VllmRefused


class VllmRollout:
    def __init__(self, checkpoint: str, *, seed: int = 0, **llm_kwargs):
        from vllm import LLM

        src = Path(checkpoint)
        if not (src / "config.json").is_file():
            raise WS1VllmRefused(f"ws1_vllm: {checkpoint} has no config.json (a transformers checkpoint directory)")
        self._updates = Path(tempfile.mkdtemp(prefix="ws1-vllm-weights-"))
        shutil.copy(src / "config.json", self._updates / "config.json")
        self.llm = LLM(model=str(src), skip_tokenizer_init=True, dtype="bfloat16", seed=seed, **llm_kwargs)

    def generate(self, requests):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from ws1_qwen3 import Completion

        params = [
            SamplingParams(
                max_tokens=r.max_new_tokens,
                temperature=r.temperature,
                seed=r.seed,
                stop_token_ids=list(r.stop_token_ids),
                logprobs=1,
                detokenize=False,
            )
            for r in requests
        ]
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt)) for r in requests]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        done = []
        for r, o in zip(requests, outs):
            c = o.outputs[0]
            tokens = list(c.token_ids)
            logprobs = [d[t].logprob for t, d in zip(tokens, c.logprobs or [])]
            done.append(Completion(r.request_id, tuple(r.prompt), tokens, logprobs, str(c.finish_reason or "")))
        return done

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        save_file(
            {n: t.detach().contiguous().cpu() for n, t in weights.items()}, str(self._updates / "model.safetensors")
        )
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self._updates)})
        if not self.llm.reset_prefix_cache():
            raise WS1VllmRefused("ws1_vllm: reset_prefix_cache() returned False after a weight update")

    def close(self) -> None:
        shutil.rmtree(self._updates, ignore_errors=True)
