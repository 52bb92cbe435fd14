"""transformers' own Qwen3 as an independent reference (tests and benchmarks only).

``hf_checkpoint`` saves a random-config ``Qwen3ForCausalLM`` with ``save_pretrained`` (the real
HF format our loader must read). ``hf_teacher_forcing`` / ``hf_rollout`` compute the completion
log-probs the same two ways ws1_qwen3 does (teacher_forcing, rollout.rollout_logp) — one full forward, and
prompt prefill + forced decode through transformers' own KV cache — so the same judgment can run on both models.
"""

from __future__ import annotations

import torch

from ws1_qwen3 import Sample


def hf_config(**over):
    from transformers import Qwen3Config

    kw = dict(
        vocab_size=700,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    kw.update(over)
    return Qwen3Config(**kw)


def hf_checkpoint(path, seed=0, dtype=torch.float32, **over):
    """A random transformers Qwen3 saved at ``path`` (norm weights perturbed off 1); returns the model."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(hf_config(**over)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    model.to(dtype).save_pretrained(str(path))
    return model


@torch.no_grad()
def hf_teacher_forcing(model, samples: list[Sample]) -> torch.Tensor:
    """Completion log-probs [n_active] in (rank, position) order, one forward per sample."""
    out = {}
    for s in samples:
        lp = torch.log_softmax(model(torch.tensor([s.tokens])).logits[0].float(), -1)
        for p in range(s.n_prompt, s.length):
            out[(s.rank, p)] = lp[p - 1, s.tokens[p]]
    return torch.stack([out[k] for k in sorted(out)])


@torch.no_grad()
def hf_rollout(model, samples: list[Sample]) -> torch.Tensor:
    """The same log-probs from prompt prefill + one-token decode steps through transformers' cache."""
    from transformers import DynamicCache

    out = {}
    for s in samples:
        cache = DynamicCache()
        r = model(torch.tensor([s.tokens[: s.n_prompt]]), past_key_values=cache, use_cache=True)
        for p in range(s.n_prompt, s.length):
            lp = torch.log_softmax(r.logits[0, -1].float(), -1)
            out[(s.rank, p)] = lp[s.tokens[p]]
            if p + 1 < s.length:
                r = model(torch.tensor([[s.tokens[p]]]), past_key_values=r.past_key_values, use_cache=True)
    return torch.stack([out[k] for k in sorted(out)])
