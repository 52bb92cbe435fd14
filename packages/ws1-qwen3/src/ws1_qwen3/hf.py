"""WS1 in the trainer: a transformers ``Qwen3ForCausalLM`` run on WS1's kernels, in place.

    model = transformers.Qwen3ForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    ws1_qwen3.apply_ws1(model, "cpu_bf16")                     # same object, same parameters
    out = model(input_ids, attention_mask=mask, labels=labels)   # CausalLMOutputWithPast: FP32 logits [B, S, V], loss
    logp = ws1_qwen3.token_logprobs(model, input_ids, mask, labels=labels)   # [B, S] FP32, the rollout's bits
    with ws1_ops.canonical_grads():                              # parameter gradients in canonical row order
        loss.backward()

How (in the manner of Liger-Kernel's ``apply_liger_kernel_to_qwen3``): the ``forward`` of the HF model and of
each of its ``Qwen3Model``, ``Qwen3DecoderLayer``, ``Qwen3Attention`` and ``Qwen3MLP`` instances is replaced by
WS1's forward of the module of the same name (:mod:`ws1_qwen3.model`: one implementation of the chain). WS1's
forward runs with an :class:`_Adapter` as ``self``: the HF module's attributes — its submodules, hence its
parameters — looked up on every access, plus the few shape attributes WS1 keeps and HF does not (from the
config). No tensor is copied or cached: a parameter swapped in later (``module.to``, FSDP2's ``fully_shard``) is
the one the next forward reads, and every module is still entered through its own ``__call__``, so hooks fire.
The HF model keeps a WS1 ``Qwen3ForCausalLM`` whose ``model`` and ``lm_head`` *are* the HF modules (not
registered as a submodule: the state dict is unchanged); its ``hidden`` / ``logits_of`` run the batch.

Numerics (WS1's, not stock HF's): BF16 parameters and op outputs, the residual stream FP32, logits FP32
([B, S, V] float32 where stock HF returns BF16); the bits are WS1's (equal to ``ws1_qwen3.from_pretrained(dir,
profile)`` on the same weights, and to the rollout's), not stock transformers' BF16 bits. A padded batch is
packed: only real tokens run, so padding never changes a real token's bits.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import ws1_accel
import ws1_ops

from .config import Qwen3Config
from .model import REFERENCE, ModelInputError, Qwen3ForCausalLM, Rows, check_profile
from .model import Qwen3Attention as _Ws1Attention
from .model import Qwen3DecoderLayer as _Ws1DecoderLayer
from .model import Qwen3MLP as _Ws1MLP
from .model import Qwen3Model as _Ws1Model
from .teacher import selected_logprobs
from .weights import check_tensors

IGNORE_INDEX = -100  # transformers' label to leave out (its loss_function's ignore_index)
_STATE = "_ws1_patch"  # the attribute of a patched HF model that holds its _Patch
# the patched model's method behind token_logprobs(): the chain entered without forward(), which a wrapper hooks too
LOGPROBS_METHOD = "ws1_token_logprobs"


class PatchError(ValueError):
    """A model apply_ws1 cannot run (not a transformers Qwen3ForCausalLM, a parameter dtype, patched for another
    profile), or a patched model's forward given what it does not run: one line naming it."""


@dataclass(frozen=True)
class _Patch:
    """What apply_ws1 leaves on the HF model: the profile and the WS1 chain whose ``model`` and ``lm_head`` are the
    HF model's own modules."""

    profile: str
    chain: Qwen3ForCausalLM


class _Adapter:
    """``self`` for one of WS1's module forwards, over one HF module: the names in ``extra`` (WS1's shape
    attributes that HF keeps in its config), anything else looked up on the HF module at each access."""

    __slots__ = ("_module", "_extra")

    def __init__(self, module: nn.Module, extra: Mapping[str, Any]):
        self._module, self._extra = module, dict(extra)

    def __getattr__(self, name: str) -> Any:  # only for names that are not the slots above
        if name in self._extra:
            return self._extra[name]
        return getattr(self._module, name)


def _patch_forward(module: nn.Module, ws1_forward, **extra) -> None:
    """``module.forward = ws1_forward`` run over ``module`` (an instance attribute: this module only)."""
    module.forward = functools.partial(ws1_forward, _Adapter(module, extra))


def _chain_config(model: nn.Module) -> Qwen3Config:
    from transformers import Qwen3ForCausalLM as HFQwen3ForCausalLM

    if not isinstance(model, HFQwen3ForCausalLM):
        raise PatchError(f"apply_ws1 takes a transformers Qwen3ForCausalLM, got {type(model).__name__}")
    hf = model.config.to_dict()
    # the dense-Qwen3 refusals (attention bias, sliding window, rope scaling, another activation) are the
    # checkpoint loader's, field named. Tied embeddings are taken: transformers' lm_head.weight is embed_tokens'
    # Parameter, which both ops read, so canonical_grads() combines the two contributions (ws1_ops.combine)
    config = Qwen3Config.from_hf(hf, name=hf.get("_name_or_path") or "transformers")
    if hf.get("attention_dropout", 0.0):
        raise PatchError(f"config.attention_dropout={hf['attention_dropout']!r}: the WS1 chain has no dropout")
    # the parameters' names and shapes are the ones WS1's modules read (none missing, none extra)
    check_tensors(config, dict(model.named_parameters()))
    return config


def _check_profile_here(profile: str, device: torch.device) -> None:
    """The profile's device and kernels are here (fail closed: ws1_accel's reason), and the parameters on it."""
    check_profile(profile)
    if profile == REFERENCE:
        raise PatchError(
            "apply_ws1 runs a ws1 profile or candidate on BF16 parameters; the FP32 reference is "
            "ws1_qwen3.from_pretrained(dir, 'reference')"
        )
    if profile in ws1_accel.PROFILE_FAMILY:
        ws1_accel.resolve_device(profile)  # absent device: AcceleratorUnavailable, with the vendor's reason
        ws1_ops.use_profile(profile, device)  # parameters on another device type, a missing kernel package
    else:
        ws1_ops.use_candidate(profile)  # a negative control on its own (cpu) kernels
        if device.type != "cpu":
            raise PatchError(f"candidate {profile} runs on the cpu kernels; the parameters are on {device}")


def apply_ws1(model: nn.Module, profile: str = "cpu_bf16", *, k_chunks: int | None = None) -> nn.Module:
    """Make a transformers ``Qwen3ForCausalLM``'s forward and backward run on WS1's kernels, in place; returns it.

    The parameters stay what they are (same names, same tensors; nothing copied); each forward reads them from
    the modules. ``profile``: a ws1 profile (``cpu_bf16``, ``cuda_bf16``, ...) or a candidate of
    ``ws1_ops.candidate_names()`` (a negative control). Refused, one line naming the field: not a transformers
    ``Qwen3ForCausalLM``; not the dense architecture (``Qwen3Config.from_hf``: attention bias, sliding window,
    RoPE scaling; and attention dropout; tied embeddings are taken); a parameter that is
    not BF16; parameters on several devices; the profile's device absent (``ws1_accel``'s reason) or of another
    type than the parameters'. Applying the same profile again is a no-op; another profile is refused.

    After it, ``model(input_ids, attention_mask=None, position_ids=None, labels=None, ...)`` takes HF's
    arguments and returns ``CausalLMOutputWithPast`` (see :func:`_forward`); run backward inside
    ``ws1_ops.canonical_grads()``: the scope reduces every parameter's rows once, in canonical order (by logical
    key: sequence rank, then position), when it exits — around one backward, or around all the micro-batches'
    backward calls of one optimizer step, whose gradient is then the same bits however the batch was cut (give
    each micro-batch's sequences distinct ``sample_ranks``: two rows with one key are refused).

    ``k_chunks``: the K order of o_proj and down_proj (``Qwen3ForCausalLM.k_chunks``): None, the default; 8, the
    parallel-invariant order a tensor-parallel rollout computes (vLLM at TP > 1 with the plugin, ws1_dist.tp_model),
    so this trainer's log-probs are that rollout's bits (docs/parallel.md). Applying again may change it."""
    patch = model.__dict__.get(_STATE)
    if patch is not None:
        if patch.profile == profile:
            patch.chain.k_chunks = k_chunks
            return model
        raise PatchError(f"apply_ws1: the model already runs {patch.profile}; load it again to run {profile}")
    config = _chain_config(model)
    named = dict(model.named_parameters())
    for name, p in named.items():
        if p.dtype != torch.bfloat16:
            raise PatchError(
                f"apply_ws1({profile}): parameter {name} is {p.dtype}; a ws1 profile runs BF16 parameters "
                "(load with dtype=torch.bfloat16)"
            )
    devices = sorted({str(p.device) for p in named.values()})
    if len(devices) != 1:
        raise PatchError(f"apply_ws1: the parameters are on several devices {devices}; WS1 runs one")
    _check_profile_here(profile, next(iter(named.values())).device)

    # the chain: a WS1 model built on the meta device (no storage), whose model and lm_head become the HF ones
    chain = Qwen3ForCausalLM(config, profile, device="meta")
    chain.model, chain.lm_head = model.model, model.lm_head
    chain.k_chunks = k_chunks
    heads = dict(
        head_dim=config.head_dim,
        num_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        rope_theta=config.rope_theta,
    )
    _patch_forward(model.model, _Ws1Model.forward)
    for layer_idx, layer in enumerate(model.model.layers):
        _patch_forward(layer, _Ws1DecoderLayer.forward, layer_idx=layer_idx)
        _patch_forward(layer.self_attn, _Ws1Attention.forward, layer_idx=layer_idx, **heads)
        _patch_forward(layer.mlp, _Ws1MLP.forward, layer_idx=layer_idx)
    model.forward = types.MethodType(_forward, model)
    setattr(model, LOGPROBS_METHOD, types.MethodType(_token_logprobs, model))
    model.__dict__[_STATE] = _Patch(profile, chain)  # a plain attribute: not a submodule, not in the state dict
    return model


def is_patched(model: nn.Module) -> bool:
    """True when :func:`apply_ws1` has patched ``model``."""
    return isinstance(model, nn.Module) and _STATE in model.__dict__


def _patch_of(model: nn.Module) -> _Patch:
    patch = model.__dict__.get(_STATE) if isinstance(model, nn.Module) else None
    if patch is None:
        raise PatchError(f"{type(model).__name__} is not patched: call ws1_qwen3.apply_ws1(model, profile) first")
    return patch


# ---- batches --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Packed:
    """A [B, S] batch's real tokens as packed rows. ``rows``: WS1's rows (ids, positions, logical keys
    ``rank << 32 | position`` with rank = the sequence's index in the batch, row-major; one attention segment
    per sequence); ``cell`` [T] int64: each row's index in the flattened [B*S] grid; ``row_of`` [B*S] int64:
    each cell's row (-1: padding). All on the host."""

    rows: Rows
    cell: torch.Tensor
    row_of: torch.Tensor
    shape: tuple[int, int]


def _int_grid(t: Any, what: str, shape: tuple[int, ...] | None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.is_floating_point() or t.is_complex():
        raise ModelInputError(f"{what} must be an integer [B, S] tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if shape is not None and t.shape[1] != shape[1] or shape is not None and t.shape[0] not in (1, shape[0]):
        raise ModelInputError(f"{what} is {tuple(t.shape)}, input_ids {tuple(shape)}")
    return t.detach().cpu()  # row metadata is built on the host (on a device: one copy per batch)


def _pack(input_ids: Any, attention_mask: Any, position_ids: Any, sample_ranks: Any = None) -> _Packed:
    """Pack the real tokens of ``input_ids`` [B, S]: those where ``attention_mask`` [B, S] (0/1; None: all) is 1,
    one contiguous run per batch row (left or right padding). Positions count from 0 at each sequence's first
    token; with ``position_ids`` [B, S] or [1, S], the given ones (at the real tokens), which must count 0, 1,
    2, ... within each sequence — a reset to 0 starts the next sequence of a packed row. ``sample_ranks`` [G]:
    each sequence's rank, in batch order (None: 0..G−1); see :func:`apply_ws1` on micro-batches."""
    ids = _int_grid(input_ids, "input_ids", None)
    batch, seq_len = ids.shape
    if attention_mask is None:
        mask = torch.ones(batch, seq_len, dtype=torch.bool, device="cpu")
    else:
        mask = _int_grid(attention_mask, "attention_mask", (batch, seq_len))
        if mask.shape[0] != batch or bool(((mask != 0) & (mask != 1)).any()):
            raise ModelInputError(f"attention_mask must be a [{batch}, {seq_len}] mask of 0 and 1 (a 2-D padding mask)")
        mask = mask.bool()
    given = None if position_ids is None else _int_grid(position_ids, "position_ids", (batch, seq_len))
    if given is not None:
        given = given.to(torch.int64).expand(batch, seq_len)
    cells, positions, lengths = [], [], []
    for b in range(batch):
        real = torch.nonzero(mask[b]).flatten()
        if not real.numel():
            continue
        lo, hi = int(real[0]), int(real[-1]) + 1
        if hi - lo != real.numel():
            raise ModelInputError(
                f"attention_mask row {b}: its tokens are not one contiguous run (pad on the left or right; "
                "pack several sequences in a row with position_ids restarting at 0)"
            )
        cells.append(torch.arange(b * seq_len + lo, b * seq_len + hi, device="cpu"))
        if given is None:
            positions.append(torch.arange(hi - lo, device="cpu"))
            lengths.append(hi - lo)
            continue
        pos = given[b, lo:hi]
        starts = torch.nonzero(pos == 0).flatten()
        # the position each token must have: its distance from the last sequence start at or before it
        start_of = starts[torch.cumsum(pos == 0, 0) - 1] if starts.numel() and int(starts[0]) == 0 else None
        if start_of is None or not torch.equal(pos, torch.arange(hi - lo, device="cpu") - start_of):
            raise ModelInputError(
                f"position_ids row {b}: positions must count 0, 1, 2, ... from each sequence's first real token "
                f"(got {pos[:8].tolist()}...)"
            )
        positions.append(pos)
        lengths += torch.diff(torch.cat([starts, torch.tensor([hi - lo], device="cpu")])).tolist()
    if not cells:
        raise ModelInputError("the batch has no real token (attention_mask is all 0)")
    cell, pos = torch.cat(cells), torch.cat(positions)
    lengths_t = torch.tensor(lengths, dtype=torch.int64, device="cpu")
    n_seq = len(lengths)
    ranks = (
        torch.arange(n_seq, dtype=torch.int64, device="cpu") if sample_ranks is None else _ranks(sample_ranks, n_seq)
    )
    rank = torch.repeat_interleave(ranks, lengths_t)
    row_of = torch.full((batch * seq_len,), -1, dtype=torch.int64, device="cpu")
    row_of[cell] = torch.arange(cell.numel(), device="cpu")
    rows = Rows(
        ids.reshape(-1).to(torch.int64).index_select(0, cell),
        pos,
        ws1_ops.logical_keys(rank, pos),
        ws1_ops.cu_seqlens_from_lengths(lengths_t),
    )
    return _Packed(rows, cell, row_of, (batch, seq_len))


def _ranks(sample_ranks: Any, n_sequences: int) -> torch.Tensor:
    ranks = torch.as_tensor(sample_ranks, device="cpu").detach()
    if ranks.dtype not in (torch.int32, torch.int64) or ranks.shape != (n_sequences,):
        raise ModelInputError(
            f"sample_ranks must be {n_sequences} ints (one per sequence, in batch order), got {tuple(ranks.shape)}"
        )
    ranks = ranks.to(torch.int64)
    if n_sequences and (int(ranks.min()) < 0 or int(ranks.max()) >= 1 << 31 or ranks.unique().numel() != n_sequences):
        raise ModelInputError(f"sample_ranks must be distinct ints in [0, 2**31), got {ranks.tolist()[:8]}...")
    return ranks


def _predicted(packed: _Packed, labels: Any, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The labels to score, as transformers' causal-LM loss counts them: ``labels`` [B, S] aligned with
    input_ids, ``labels[b, t]`` predicted by the logits of token (b, t − 1); IGNORE_INDEX (-100) left out.

    Returns (rows [n], cells [n], targets [n]) int64 on the host, in row-major order of the labels: the packed
    row that predicts each counted label, the label's cell in the [B*S] grid, the label. A counted label that no
    real token of its sequence predicts — at t = 0, after a pad, or on the first token of a sequence — is refused
    (transformers would score it against a pad position's logits, or across two packed sequences)."""
    batch, seq_len = packed.shape
    labels = _int_grid(labels, "labels", packed.shape)
    if labels.shape[0] != batch:
        raise ModelInputError(f"labels is {tuple(labels.shape)}, input_ids ({batch}, {seq_len})")
    labels = labels.to(torch.int64).reshape(-1)
    cells = torch.nonzero(labels != IGNORE_INDEX).flatten()
    targets = labels.index_select(0, cells)
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab_size):
        bad = int(targets.min()) if int(targets.min()) < 0 else int(targets.max())
        raise ModelInputError(f"label {bad} is neither -100 nor in the vocabulary [0, {vocab_size})")
    has_prev = cells % seq_len != 0
    rows = torch.where(has_prev, packed.row_of.index_select(0, (cells - 1).clamp(min=0)), -1)
    own = packed.row_of.index_select(0, cells)  # the label's own token, if real, must continue the sequence
    continues = (own < 0) | (packed.rows.pos.index_select(0, own.clamp(min=0)) > 0)
    orphan = torch.nonzero((rows < 0) | ~continues).flatten()
    if orphan.numel():
        cell = int(cells[orphan[0]])
        raise ModelInputError(
            f"labels[{cell // seq_len}, {cell % seq_len}] = {int(targets[orphan[0]])} has no predicting token "
            "(position 0, after padding, or a sequence's first token): set it to -100"
        )
    return rows, cells, targets


# ---- the patched model's forward ----------------------------------------------------------------------

_REFUSED = {
    "past_key_values": "a KV cache (WS1's forward keeps none: decode with ws1_qwen3.generate)",
    "inputs_embeds": "inputs_embeds (WS1's chain starts at its embedding node: pass input_ids)",
    "cache_position": "cache_position (WS1's forward keeps no cache)",
}
_FALSE_ONLY = ("use_cache", "output_attentions", "output_hidden_states")


def _forward(
    self: nn.Module,
    input_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    past_key_values: Any = None,
    inputs_embeds: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    use_cache: bool | None = None,
    logits_to_keep: int | torch.Tensor = 0,
    return_dict: bool | None = None,
    **kwargs: Any,
):
    """transformers' ``Qwen3ForCausalLM.forward``, on WS1's chain.

    ``input_ids`` [B, S] int64; ``attention_mask`` [B, S] 0/1 (left or right padding; None: no padding);
    ``position_ids`` [B, S] or [1, S] (None: each sequence from 0; given, they must count 0, 1, ... per
    sequence, and a reset to 0 packs the next sequence into the same row, as HF's padding-free collators do);
    ``sample_ranks`` [G] (WS1's keyword): each sequence's rank, in batch order — the first half of its rows'
    logical keys, which order every parameter-gradient reduction (default 0..G−1; give distinct ranks across the
    micro-batches that share one ``canonical_grads()`` scope).

    Returns ``CausalLMOutputWithPast`` (a tuple with ``return_dict=False``):

    * ``logits`` FP32 [B, S, V] (``logits_to_keep`` N > 0: the last N positions, [B, N, V]; an index tensor:
      those positions): WS1's ``lm_head`` of each real token; **pad positions hold zeros**. Only real tokens run
      (packed), so a real token's logits are the same bits in any batch, padded or not.
    * ``loss`` when ``labels`` [B, S] are given: transformers' causal-LM convention — the logits at t predict
      ``labels[:, t + 1]``, -100 left out, the mean over the counted labels (``num_items_in_batch``, if given,
      divides the sum instead). **FP32**: ``−Σ logp / n``, each logp WS1's ``logprob`` node on the FP32 logits
      (the rollout's log-prob bits), the sum torch's over the counted labels in row-major order. A counted label
      with no real token before it in its sequence is refused (see :func:`_predicted`).

    Refused, one line: ``past_key_values``, ``inputs_embeds``, ``cache_position``, ``use_cache=True``,
    ``output_attentions`` / ``output_hidden_states=True``, any other keyword; ``labels`` with ``logits_to_keep``;
    gradient checkpointing (not supported yet)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    chain = _patch_of(self).chain
    given = {"past_key_values": past_key_values, "inputs_embeds": inputs_embeds, **kwargs, "use_cache": use_cache}
    num_items, sample_ranks = given.pop("num_items_in_batch", None), given.pop("sample_ranks", None)
    for name, value in given.items():
        if value is None:
            continue
        if name in _REFUSED:
            raise PatchError(f"forward: {_REFUSED[name]} is not supported by apply_ws1")
        if name in _FALSE_ONLY:
            if value:
                raise PatchError(f"forward: {name}=True is not supported by apply_ws1")
            continue
        raise PatchError(f"forward: argument {name!r} is not supported by apply_ws1")
    if input_ids is None:
        raise PatchError("forward: input_ids are required")
    if self.training and getattr(self, "is_gradient_checkpointing", False):
        raise PatchError("forward: gradient checkpointing is not supported by apply_ws1 yet")
    packed = _pack(input_ids, attention_mask, position_ids, sample_ranks)
    batch, seq_len = packed.shape
    vocab = chain.config.vocab_size
    keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep.detach().cpu()
    kept = torch.arange(seq_len, device="cpu")[keep]
    if labels is not None and kept.numel() != seq_len:
        raise PatchError("forward: labels with logits_to_keep (the loss needs every position's logits)")
    # the real tokens whose position is kept, and where their logits go in the [B, K, V] output
    column = torch.full((seq_len,), -1, dtype=torch.int64, device="cpu")
    column[kept.to(torch.int64).cpu()] = torch.arange(kept.numel(), device="cpu")
    col = column.index_select(0, packed.cell % seq_len)
    rows = torch.nonzero(col >= 0).flatten()
    out_cells = (packed.cell.index_select(0, rows) // seq_len) * kept.numel() + col.index_select(0, rows)
    with chain.activate():
        hidden = chain.hidden(packed.rows)  # [T, hidden] final-norm states of the real tokens
        dev = hidden.device
        scored = chain.logits_of(hidden.index_select(0, rows.to(dev)), packed.rows.keys.index_select(0, rows))
        # pad positions: zeros (out of place, so autograd takes the real rows' gradient back to lm_head); built as
        # [B, K, V] itself, not a view of [B * K, V]: a wrapper's output hook (FSDP2's) must not land on a view
        cells_dev = out_cells.to(dev)
        full = scored.new_zeros(batch, kept.numel(), vocab).index_put(
            (cells_dev // kept.numel(), cells_dev % kept.numel()), scored
        )
        logits = full.view(batch * kept.numel(), vocab)
        loss = None
        if labels is not None:
            _, cells, targets = _predicted(packed, labels, vocab)
            with ws1_ops.trusted_inputs():  # the targets are validated above
                logp = chain.ops().logprob(logits.index_select(0, (cells - 1).to(dev)), targets.to(dev))
            loss = -logp.sum() / (num_items if num_items is not None else cells.numel())
    out = CausalLMOutputWithPast(loss=loss, logits=full)
    if return_dict is None:
        return_dict = getattr(self.config, "return_dict", True)
    return out if return_dict else out.to_tuple()


def left_padded(samples, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ws1_qwen3.Sample``s as the left-padded batch a rollout hands a trainer: ``input_ids`` [B, S] (``pad_id`` on
    the left), ``attention_mask`` [B, S] (1 on real tokens), ``completion_mask`` [B, S] (1 on each completion token),
    int64 on the host; S the longest sample, row b sample b."""
    width = max(s.length for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.int64, device="cpu")
    mask = torch.zeros_like(ids)
    completion = torch.zeros_like(ids)
    for b, s in enumerate(samples):
        pad = width - s.length
        ids[b, pad:] = torch.tensor(s.tokens, dtype=torch.int64, device="cpu")
        mask[b, pad:] = 1
        completion[b, pad + s.n_prompt :] = 1
    return ids, mask, completion


def token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    labels: torch.Tensor | None = None,
    completion_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    sample_ranks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token log-probs of a patched model: FP32 [B, S], ``out[b, t] = log P(labels[b, t] | the tokens of its
    sequence before t)`` — what verl's ``logprobs_from_logits`` and TRL's ``selective_log_softmax`` compute
    (TRL's [B, S − 1] is ``out[:, 1:]``), here through WS1's ``lm_head`` and ``logprob`` nodes only on the rows
    that predict a counted label, so each value has the bits the rollout records (``batch_invariant_logp`` of
    the same logits, at the sampled token) and the bits of ``ws1_qwen3.teacher_forcing`` on the same weights.

    ``input_ids``, ``attention_mask``, ``position_ids``, ``sample_ranks``: as the patched forward takes them.
    What is scored:
    ``labels`` [B, S] (HF-aligned with input_ids, -100 left out), or ``completion_mask`` [B, S] (the tokens to
    score: ``labels = input_ids`` there, -100 elsewhere), or neither: every real token but each sequence's
    first. ``out`` is 0 where nothing is scored (padding, -100, a sequence's first token). Differentiable:
    ``-(out * mask).sum() / n`` backpropagates through WS1's backward (run it inside ``ws1_ops.canonical_grads()``).
    """
    _patch_of(model)
    return getattr(model, LOGPROBS_METHOD)(
        input_ids,
        attention_mask,
        labels=labels,
        completion_mask=completion_mask,
        position_ids=position_ids,
        sample_ranks=sample_ranks,
    )


def _token_logprobs(
    self: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    labels: torch.Tensor | None = None,
    completion_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    sample_ranks: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`token_logprobs`, a method of the patched model (:data:`LOGPROBS_METHOD`): an entry into the chain
    other than ``forward`` that a wrapper can hook (FSDP2's ``register_fsdp_forward_method``, ws1_dist)."""
    model = self
    chain = _patch_of(model).chain
    packed = _pack(input_ids, attention_mask, position_ids, sample_ranks)
    batch, seq_len = packed.shape
    if labels is not None and completion_mask is not None:
        raise PatchError("token_logprobs: give labels or completion_mask, not both")
    ids = input_ids.detach().cpu().to(torch.int64)
    if completion_mask is not None:
        scored = _int_grid(completion_mask, "completion_mask", packed.shape).expand(batch, seq_len).bool()
        labels = ids.masked_fill(~scored, IGNORE_INDEX)
    elif labels is None:
        # every real token that continues its sequence
        continues = torch.zeros(batch * seq_len, dtype=torch.bool, device="cpu")
        continues[packed.cell] = packed.rows.pos > 0
        labels = ids.masked_fill(~continues.view(batch, seq_len), IGNORE_INDEX)
    rows, cells, targets = _predicted(packed, labels, chain.config.vocab_size)
    with chain.activate():
        hidden = chain.hidden(packed.rows)
        logp = selected_logprobs(chain, hidden, rows, packed.rows.keys.index_select(0, rows), targets)
        cells = cells.to(logp.device)  # [B, S] itself, not a view (see _forward)
        return logp.new_zeros(batch, seq_len).index_put((cells // seq_len, cells % seq_len), logp)
