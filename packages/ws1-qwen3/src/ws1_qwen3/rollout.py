"""The rollout's log-probs of given completions: :func:`rollout_logp`.

What inference computes for the completion tokens of each sample: prefill the prompt through a KV
cache (whole or chunked), then decode the completion one forced token per step, the batch
shrinking as samples finish; each token's log-prob is read from the rollout's full log-softmax
(``batch_invariant_logp``). Compare it with :func:`ws1_qwen3.teacher_forcing`'s log-probs of the
same tokens: on WS1's kernels the two are bitwise equal (the harness' C10 train/infer parity).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .model import Qwen3ForCausalLM
from .teacher import Sample


def rollout_logp(
    model: Qwen3ForCausalLM,
    samples: Sequence[Sample],
    *,
    cache: str = "contiguous",
    chunk: int | None = None,
    together: bool = True,
    block_size: int = 16,
) -> torch.Tensor:
    """Completion-token log-probs [n_active] FP32 in logical-key order (rank, then position).

    ``together``: all samples share each step (sequences leave as they finish); else one at a time."""
    groups = [list(samples)] if together else [[s] for s in samples]
    got: dict[tuple[int, int], torch.Tensor] = {}
    for group in groups:
        longest = max(s.length for s in group)
        kv = model.new_cache(cache, max_seqs=len(group), max_len=longest, block_size=block_size)
        for s in group:
            kv.begin(s.rank)
        ranks = {s.rank: s.rank for s in group}
        logits = model.prefill(kv, {s.rank: s.tokens[: s.n_prompt] for s in group}, chunk=chunk, ranks=ranks)
        by_rank = {s.rank: s for s in group}
        while logits:
            lp = model.rollout_logp(torch.stack(list(logits.values())))
            feed, sel, row_keys = {}, [], []
            for (r, _), row in zip(logits.items(), lp):
                s = by_rank[r]
                p = kv.length(r)  # the position this step predicts
                got[(r, p)] = row[s.tokens[p]]
                sel.append(got[(r, p)])
                row_keys.append((r << 32) | (p - 1))  # the lm_head row's key, as teacher forcing traces it
                if p + 1 < s.length:
                    feed[r] = s.tokens[p]
                else:
                    kv.finish(r)
            # the selected log-prob, the chain point teacher forcing traces as "logprob" (ws1_qwen3.model.SAME_POINT)
            model.trace(
                model.config.num_hidden_layers,
                "batch_invariant_logp",
                torch.stack(sel)[:, None],
                torch.tensor(row_keys, dtype=torch.int64, device="cpu"),
            )
            logits = model.decode(kv, feed, ranks) if feed else {}
    return torch.stack([got[k] for k in sorted(got)])
