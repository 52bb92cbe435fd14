"""Teacher forcing: the trainer's view — selected log-probs keyed by logical key, and the loss.

A :class:`Sample` is one sequence (prompt + completion) with its *rank* (the logical sample id).
The same samples can be laid out as a right- or left-padded [B, S] batch, a packed varlen batch,
in any sample order, all at once or one sample per call, with attention run as chunked prefill —
and the log-probs come back keyed by ``(rank, position)`` of the predicted token, sorted, so any
two layouts compare directly. Position p's log-prob is log P(token[p] | tokens[:p]), read from the
logits of row p − 1. Active tokens are the completion tokens; the loss is
``−Σ logp(active) / n_active`` with ``n_active`` the *global* count (27 for the fixtures), so the
four B=1 losses of the B1 cell sum to the BN loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

import ws1_ops

from .model import ModelInputError, Qwen3ForCausalLM, Rows

LAYOUTS = ("padded_right", "padded_left", "packed")


@dataclass(frozen=True)
class Sample:
    rank: int
    tokens: tuple[int, ...]
    n_prompt: int
    sample_id: str = ""

    def __post_init__(self):
        if not 1 <= self.n_prompt <= len(self.tokens):
            raise ModelInputError(f"sample {self.sample_id or self.rank}: n_prompt {self.n_prompt} must be in [1, {len(self.tokens)}]")

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def completion(self) -> tuple[int, ...]:
        return self.tokens[self.n_prompt:]


def fixture_samples(manifest=None, which: str = "primary") -> list[Sample]:
    """The manifest's fixtures as samples (ranks 0..3 for s0..s3; the short/long fixture as rank 0)."""
    if manifest is None:
        from ws1_contract import load_manifest

        manifest = load_manifest()
    fx = manifest.fixtures
    items = fx.primary if which == "primary" else [getattr(fx, which)]
    return [Sample(rank=i, tokens=tuple(s.tokens), n_prompt=len(s.prompt), sample_id=s.sample_id) for i, s in enumerate(items)]


@dataclass
class TeacherForcing:
    """Selected log-probs of one layout. ``keys`` [N] int64 ascending (logical keys of the predicted
    tokens), ``logp`` [N] FP32, ``active`` [N] bool; ``loss`` = −Σ logp[active] / n_active (a graph
    when run with grad)."""

    keys: torch.Tensor
    logp: torch.Tensor
    active: torch.Tensor
    loss: torch.Tensor
    layout: str
    rows: int


def _rows(model: Qwen3ForCausalLM, samples: Sequence[Sample], layout: str, padded_length: int | None) -> tuple[Rows, list[int]]:
    """Rows of the batch and, per sample in batch order, the row index of its position 0."""
    if layout not in LAYOUTS:
        raise ModelInputError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    longest = max(s.length for s in samples)
    if longest > model.config.max_position_embeddings:
        raise ModelInputError(f"a sample of {longest} tokens exceeds max_position_embeddings {model.config.max_position_embeddings}")
    ids, pos, keys, attn, lens, first = [], [], [], [], [], []
    if layout == "packed":
        for s in samples:
            first.append(len(ids))
            attn += range(len(ids), len(ids) + s.length)
            ids += s.tokens
            pos += range(s.length)
            keys += [(s.rank << 32) | p for p in range(s.length)]
            lens.append(s.length)
    else:
        S = padded_length or longest
        if S < longest:
            raise ModelInputError(f"padded_length {S} is shorter than the longest sample ({longest} tokens)")
        pad = model.config.pad_id
        for s in samples:
            n_pad = S - s.length
            base = len(ids)
            lead = n_pad if layout == "padded_left" else 0
            first.append(base + lead)
            row_ids = [pad] * S
            row_ids[lead:lead + s.length] = s.tokens
            ids += row_ids
            for j in range(S):
                p = j - lead
                valid = 0 <= p < s.length
                pos.append(p if valid else 0)
                keys.append((s.rank << 32) | p if valid else -1)
            attn += range(base + lead, base + lead + s.length)
            lens.append(s.length)
    t = lambda x: torch.tensor(x, dtype=torch.int64)  # noqa: E731
    return Rows(t(ids), t(pos), t(keys), t(attn), ws1_ops.cu_seqlens_from_lengths(t(lens))), first


def teacher_forcing(model: Qwen3ForCausalLM, samples: Sequence[Sample], *, layout: str = "padded_right",
                    padded_length: int | None = None, chunk: int | None = None, n_active: int | None = None,
                    all_tokens: bool = False, grad: bool = False) -> TeacherForcing:
    """Selected log-probs of ``samples`` laid out as ``layout`` (batch order = the order given).

    ``chunk``: attention as chunked prefill (chunks of ``chunk`` absolute positions) with the
    canonical backward. ``all_tokens``: also the prompt tokens' log-probs (default: completion
    tokens only — the lm_head then runs on just those rows). ``n_active``: the loss normalizer
    (default: this call's active count). ``grad``: keep the graph for ``loss.backward()`` (run it
    inside ``ws1_ops.canonical_grads()``)."""
    if not samples:
        raise ModelInputError("teacher forcing needs at least one sample")
    ranks = [s.rank for s in samples]
    if len(set(ranks)) != len(ranks):
        raise ModelInputError(f"sample ranks must be distinct, got {ranks}")
    rows, first = _rows(model, samples, layout, padded_length)
    sel, tgt, keys, act, row_keys = [], [], [], [], []
    for s, r0 in zip(samples, first):
        for p in range(1 if all_tokens else s.n_prompt, s.length):
            sel.append(r0 + p - 1)          # the row that predicts position p
            tgt.append(s.tokens[p])
            keys.append((s.rank << 32) | p)
            row_keys.append((s.rank << 32) | (p - 1))
            act.append(p >= s.n_prompt)
    sel_t, tgt_t, keys_t = (torch.tensor(x, dtype=torch.int64) for x in (sel, tgt, keys))
    act_t = torch.tensor(act, dtype=torch.bool)
    dev = model.device
    with torch.set_grad_enabled(grad), model.activate():
        x = model.hidden(rows, chunk=chunk)
        # the lm_head row is position p − 1 (its own logical key, as in a decode step)
        logits = model.logits_of(x.index_select(0, sel_t.to(dev)), torch.tensor(row_keys, dtype=torch.int64))
        logp = model.ops().logprob(logits, tgt_t.to(dev))
        order = torch.argsort(keys_t)
        logp = logp.index_select(0, order.to(dev))
        keys_t, act_t = keys_t.index_select(0, order), act_t.index_select(0, order)
        n = n_active if n_active is not None else int(act_t.sum())
        if n <= 0:
            raise ModelInputError("no active (completion) tokens: the loss would be empty")
        loss = -logp[act_t.to(dev)].sum() / n
    return TeacherForcing(keys_t, logp if grad else logp.detach(), act_t, loss, layout, rows.ids.numel())
