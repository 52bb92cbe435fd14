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

from .model import REFERENCE, ModelInputError, Qwen3ForCausalLM, Rows

LAYOUTS = ("padded_right", "padded_left", "packed")


@dataclass(frozen=True)
class Sample:
    rank: int
    tokens: tuple[int, ...]
    n_prompt: int
    sample_id: str = ""

    def __post_init__(self):
        if not 1 <= self.n_prompt <= len(self.tokens):
            raise ModelInputError(
                f"sample {self.sample_id or self.rank}: n_prompt {self.n_prompt} must be in [1, {len(self.tokens)}]"
            )

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def completion(self) -> tuple[int, ...]:
        return self.tokens[self.n_prompt :]


PAD_GRAD_SEED = 20260812


class PadGarbage(torch.autograd.Function):
    """Identity on the log-probs [n] FP32; in backward the pad rows (``pad`` [n] bool) get a seeded
    garbage gradient (N(0, 1) × 5) where a trainer's loss would give them 0 — a leak of pad rows
    into a parameter gradient or a real row then shows in the bits, instead of adding exact zeros."""

    @staticmethod
    def forward(ctx, logp, pad):
        ctx.save_for_backward(pad)
        return logp.clone()

    @staticmethod
    def backward(ctx, g):
        (pad,) = ctx.saved_tensors
        garbage = (torch.randn(g.shape, generator=torch.Generator().manual_seed(PAD_GRAD_SEED), device="cpu") * 5).to(g)
        return torch.where(pad, garbage, g), None


def fixture_samples(manifest=None, which: str = "primary") -> list[Sample]:
    """The manifest's fixtures as samples (ranks 0..3 for s0..s3; the short/long fixture as rank 0)."""
    if manifest is None:
        from ws1_contract import load_manifest

        manifest = load_manifest()
    fx = manifest.fixtures
    items = fx.primary if which == "primary" else [getattr(fx, which)]
    return [
        Sample(rank=i, tokens=tuple(s.tokens), n_prompt=len(s.prompt), sample_id=s.sample_id)
        for i, s in enumerate(items)
    ]


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


def _rows(
    model: Qwen3ForCausalLM, samples: Sequence[Sample], layout: str, padded_length: int | None
) -> tuple[Rows, list[int]]:
    """Rows of the batch and, per sample in batch order, the row index of its position 0."""
    if layout not in LAYOUTS:
        raise ModelInputError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    longest = max(s.length for s in samples)
    if longest > model.config.max_position_embeddings:
        raise ModelInputError(
            f"a sample of {longest} tokens exceeds max_position_embeddings {model.config.max_position_embeddings}"
        )
    ids, lens, first = [], [], []
    t = lambda x: torch.tensor(x, dtype=torch.int64, device="cpu")  # noqa: E731  (row metadata lives on the host)
    # positions and keys as tensor ops per sample, not Python per token (8 x 2048 tokens: milliseconds the
    # host spends before the first launch of a trainer step)
    ar = lambda n: torch.arange(n, dtype=torch.int64, device="cpu")  # noqa: E731
    if layout == "packed":
        for s in samples:
            first.append(len(ids))
            ids += s.tokens
            lens.append(s.length)
        pos = torch.cat([ar(s.length) for s in samples])
        keys = torch.cat([(s.rank << 32) | ar(s.length) for s in samples])
        return Rows(t(ids), pos, keys, ws1_ops.cu_seqlens_from_lengths(t(lens))), first
    S = padded_length or longest
    if S < longest:
        raise ModelInputError(f"padded_length {S} is shorter than the longest sample ({longest} tokens)")
    # pad rows carry seeded garbage token ids, not the pad id: a run of identical pad rows would
    # attend to identical values, which hands them dq = dk = 0 exactly and hides a leak through q/k
    garbage = torch.randint(
        model.config.vocab_size, (len(samples), S), generator=torch.Generator().manual_seed(PAD_GRAD_SEED), device="cpu"
    )
    valid = torch.zeros(len(samples), S, dtype=torch.bool, device="cpu")
    keys = torch.full((len(samples), S), -1, dtype=torch.int64, device="cpu")
    for b, s in enumerate(samples):
        lead = S - s.length if layout == "padded_left" else 0
        first.append(b * S + lead)
        row_ids = garbage[b].tolist()
        row_ids[lead : lead + s.length] = s.tokens
        ids += row_ids
        valid[b, lead : lead + s.length] = True
        keys[b, lead : lead + s.length] = (s.rank << 32) | ar(s.length)
    keys = keys.reshape(-1)
    # every row goes through the kernels: the pad rows are attention segments of their own (a
    # sequence's position = its row's place in its segment); their results are never read
    cu, pos_t = ws1_ops.padded_segments(valid)
    return Rows(t(ids), pos_t, keys, cu), first


def selected_logprobs(
    model: Qwen3ForCausalLM, hidden: torch.Tensor, rows: torch.Tensor, keys: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """The trainer's head: ``lm_head`` on rows ``rows`` [n] (host int64) of ``hidden`` [N, hidden] (final-norm
    states, ``model.hidden``'s), then the ``logprob`` node of ``targets`` [n] int64 -> FP32 log-probs [n].

    ``keys`` [n]: those rows' logical keys, on the host (lm_head's parameter gradient reduces in their
    order). The targets must be ids the caller has validated (in the vocabulary): the node's own value
    check is skipped (``ws1_ops.trusted_inputs``), as it would be a host sync on a device. Runs inside
    ``model.activate()``. Each row's bits are its own: the same rows in any batch give the same log-probs."""
    dev = model.device
    logits = model.logits_of(hidden.index_select(0, rows.to(dev)), keys)
    with ws1_ops.trusted_inputs():
        return model.ops().logprob(logits, targets.to(dev))


def teacher_forcing(
    model: Qwen3ForCausalLM,
    samples: Sequence[Sample],
    *,
    layout: str = "padded_right",
    padded_length: int | None = None,
    chunk: int | None = None,
    n_active: int | None = None,
    all_tokens: bool = False,
    grad: bool = False,
) -> TeacherForcing:
    """Selected log-probs of ``samples`` laid out as ``layout`` (batch order = the order given).

    ``chunk``: attention as chunked prefill (chunks of ``chunk`` absolute positions) with the
    canonical backward. ``all_tokens``: also the prompt tokens' log-probs (default: completion
    tokens only — lm_head and logprob then run on those rows and the pad rows). ``n_active``: the
    loss normalizer (default: this call's active count). ``grad``: keep the graph for
    ``loss.backward()`` (run it inside ``ws1_ops.canonical_grads()``).

    Padding reaches every kernel: the pad rows (garbage token ids) run the whole chain (lm_head and
    logprob too, the pad id as target) and, in backward, get a garbage log-prob gradient (:class:`PadGarbage`)
    instead of a real trainer's zero, so any kernel that lets a pad row into a parameter gradient
    (or into a real row) changes bits the gates compare. Not on the FP32 reference path, whose
    plain autograd ops reduce over every row by design (its pad rows get a zero gradient)."""
    if not samples:
        raise ModelInputError("teacher forcing needs at least one sample")
    ranks = [s.rank for s in samples]
    if len(set(ranks)) != len(ranks):
        raise ModelInputError(f"sample ranks must be distinct, got {ranks}")
    rows, first = _rows(model, samples, layout, padded_length)
    sel, tgt, keys, act, row_keys = [], [], [], [], []
    for s, r0 in zip(samples, first):
        lo = 1 if all_tokens else s.n_prompt
        p = torch.arange(lo, s.length, dtype=torch.int64, device="cpu")  # the predicted positions
        sel.append(r0 + p - 1)  # the row that predicts position p
        tgt.append(torch.tensor(s.tokens[lo:], dtype=torch.int64, device="cpu"))
        keys.append((s.rank << 32) | p)
        row_keys.append((s.rank << 32) | (p - 1))
        act.append(p >= s.n_prompt)
    sel_t, tgt_t, keys_t, row_keys_t, act_t = (torch.cat(x) for x in (sel, tgt, keys, row_keys, act))
    # lm_head and logprob rows: the selected rows and every pad row, in batch-row order
    pad_rows = torch.nonzero(rows.keys < 0).flatten()
    lm_rows, lm_order = torch.sort(torch.cat([sel_t, pad_rows]))
    where = torch.empty_like(lm_order).index_copy_(0, lm_order, torch.arange(lm_order.numel(), device="cpu"))
    lm_keys = rows.keys.index_select(0, lm_rows)  # a selected row's key: position p − 1, as in a decode step
    lm_tgt = torch.cat([tgt_t, torch.full_like(pad_rows, model.config.pad_id)]).index_select(0, lm_order)
    dev = model.device
    with torch.set_grad_enabled(grad), model.activate():
        x = model.hidden(rows, chunk=chunk)
        logp = selected_logprobs(model, x, lm_rows, lm_keys, lm_tgt)  # the targets: the rows' own ids and the pad id
        if grad and model.profile != REFERENCE:
            logp = PadGarbage.apply(logp, (lm_keys < 0).to(dev))
        logp = logp.index_select(0, where[: sel_t.numel()].to(dev))  # the selected rows, in ``sel`` order
        model.trace(model.config.num_hidden_layers, "logprob", logp[:, None], row_keys_t)  # keyed like lm_head's row
        order = torch.argsort(keys_t)
        logp = logp.index_select(0, order.to(dev))
        keys_t, act_t = keys_t.index_select(0, order), act_t.index_select(0, order)
        n = n_active if n_active is not None else int(act_t.sum())
        if n <= 0:
            raise ModelInputError("no active (completion) tokens: the loss would be empty")
        # the active rows by an index made on the host (a boolean mask on a device is a nonzero: a sync)
        loss = -logp.index_select(0, torch.nonzero(act_t).flatten().to(dev)).sum() / n
    return TeacherForcing(keys_t, logp if grad else logp.detach(), act_t, loss, layout, rows.ids.numel())
