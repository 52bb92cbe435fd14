"""The Qwen3 dense model, built only from ws1-ops chain nodes.

One layer (n rows; the residual stream ``h`` is FP32, every op output BF16, logits FP32)::

    x = rms_norm(h, input_layernorm)                  [n, H]
    q, k, v = det_gemm(x, q/k/v_proj)                  [n, Hq*D], [n, Hkv*D] x2
    q, k = rope(qk_norm(q), pos), rope(qk_norm(k), pos)
    o = attention(q, k, v)                             all n rows; each sequence and each pad run a segment
    h = h + det_gemm(o, o_proj)                        FP32 residual add (exact per element)
    x = rms_norm(h, post_attention_layernorm)
    h = h + det_gemm(swiglu(det_gemm(x, gate), det_gemm(x, up)), down)

then ``lm_head(rms_norm(h, norm))`` -> FP32 logits, and ``logprob`` (trainer) or
``batch_invariant_logp`` (rollout) -> FP32 log-probs. Every per-token op runs on all n rows of the
batch as laid out — pad rows included — so batch size, padding and row position really reach the
kernels. Attention runs on all n rows too: ``rows.cu`` makes each sequence's tokens one segment and
each run of pad rows another (:func:`ws1_ops.padded_segments`), so pad rows are real queries of the
kernel while no sequence sees a pad key and no pad query sees a real one. In training the pad rows
get a garbage upstream gradient (ws1_qwen3.teacher), so a kernel that let them into a parameter
gradient, or into a real row, is caught.

Modules, as transformers' ``modeling_qwen3`` names them (and so the parameters)::

    Qwen3ForCausalLM          model, lm_head      hidden(): one batch's ForwardContext, then model; logits_of(): lm_head
      Qwen3Model              embed_tokens, layers, norm    embedding -> FP32 residual -> layers -> final norm
        Qwen3DecoderLayer     input_layernorm, self_attn, post_attention_layernorm, mlp   the two residual adds
          Qwen3Attention      q/k/v/o_proj, q_norm, k_norm     projections, qk norms, rope, attention, o_proj
          Qwen3MLP            gate/up/down_proj                swiglu(gate, up) -> down_proj

Each module's forward runs its lines of the diagram above through the ops of the model's profile, given one
batch's :class:`ForwardContext` (ops, row keys, positions, the attention callable, the tracer, eps).

Tied embeddings (``config.tie_word_embeddings``: Qwen3-0.6B / 1.7B / 4B): ``lm_head`` is a :class:`TiedLinearWeight`
whose ``weight`` IS ``model.embed_tokens.weight`` [V, H] — one parameter, registered once. Its gradient, inside
``ws1_ops.canonical_grads()``: ``bf16(fp32 dE_embedding + fp32 dW_lm_head)``, each term the op's canonical
reduction (``ws1_ops.combine``; docs/model.md "Tied embeddings").

Rows carry logical keys ``(sample rank, position)`` (-1 for padding); the ops reduce parameter
gradients over rows in that order, so gradients do not depend on the layout either.

Profiles: a ws1 profile (``cpu_bf16``, ...) runs the profile's kernels with BF16 parameters;
``reference`` runs the FP32 reference ops on FP32 parameters (accuracy judgments); the candidate
``torch_default`` runs plain PyTorch ops (the gates' negative control, not a profile).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import ws1_accel
import ws1_ops
from ws1_kv import KVCache, Step, cached_attention
from ws1_ops import reference

from .config import Qwen3Config

BF16, F32 = torch.bfloat16, torch.float32
REFERENCE = "reference"


class ModelInputError(ValueError):
    """Bad ids, lengths, positions or layouts given to the model: one line naming the problem."""


# ---- the op set a profile runs --------------------------------------------------------------


class _ReferenceOps:
    """FP32 reference ops with the ws1 signatures (row keys and chunking do not change FP32 math)."""

    embedding = staticmethod(reference.embedding)
    rms_norm = staticmethod(reference.rms_norm)
    qk_norm = staticmethod(reference.qk_norm)
    det_gemm = staticmethod(reference.det_gemm)
    lm_head = staticmethod(reference.lm_head)
    rope = staticmethod(reference.rope)
    swiglu = staticmethod(reference.swiglu)
    logprob = staticmethod(reference.logprob)
    batch_invariant_logp = staticmethod(reference.batch_invariant_logp)

    @staticmethod
    def attention(q, k, v, cu_q, cu_k, q_pos, scale=None, chunk=None):
        return reference.attention(q, k, v, cu_q, cu_k, q_pos, scale)


def param_dtype(profile: str) -> torch.dtype:
    return F32 if profile == REFERENCE else BF16


def check_profile(profile: str) -> None:
    """A ws1 profile, the reference, or a candidate (whose list loads the negative controls: asked last)."""
    if profile == REFERENCE or profile in ws1_accel.PROFILE_FAMILY or profile in ws1_ops.candidate_names():
        return
    ws1_accel.family_of(profile)  # UnknownProfile names the choices


# ---- batches as rows ------------------------------------------------------------------------


@dataclass(frozen=True)
class Rows:
    """A batch as n rows. ``ids``, ``pos``, ``keys`` [n] int64 (keys: logical, -1 = padding; pos:
    the token's position, a pad row's its place in its run of padding); ``cu`` [G+1] the attention
    segments over all n rows in row order — one per sequence and one per run of pad rows
    (:func:`ws1_ops.padded_segments`)."""

    ids: torch.Tensor
    pos: torch.Tensor
    keys: torch.Tensor
    cu: torch.Tensor


# ---- the chain's trace points -------------------------------------------------------------------
#
# Every kernel call of the chain, by role, in the order the model computes it; the model hands each
# point's output to its ``tracer`` (a harness digests them per token: ws1-matrix's first_drift).
#
# * layer -1: ``embedding``;
# * each decoder layer: ``input_layernorm``, ``q_proj``, ``q_norm``, ``k_proj``, ``k_norm``, ``v_proj``,
#   ``rope_q``, ``rope_k``, ``attention``, ``o_proj``, ``attn_residual``, ``post_attention_layernorm``,
#   ``gate_proj``, ``up_proj``, ``swiglu``, ``down_proj``, ``mlp_residual`` (the residuals are FP32 adds,
#   not kernels: traced so a drift is seen where it enters the residual stream);
# * layer num_hidden_layers (the head): ``final_norm``, ``lm_head``, then the selected log-prob of the predicted token:
#   ``logprob`` in teacher forcing, ``batch_invariant_logp`` in the rollout (decode path), the same
#   point of the chain under two names (SAME_POINT).
#
# ``silu`` never runs in the dense chain (the MLP uses the fused ``swiglu``); a harness traces it as
# (0, ``silu``) where it checks ``silu(g) == swiglu(g, 1)`` on layer 0's gate activations. Each point's
# kind is a node of the manifest's node table or ``residual_add``; ws1-matrix checks that every
# required node is some point's kind (``python -m ws1_matrix nodes``).
INPUT_NODES = (("embedding", "embedding"),)
LAYER_NODES = (
    ("input_layernorm", "rms_norm"),
    ("q_proj", "det_gemm"),
    ("q_norm", "qk_norm"),
    ("k_proj", "det_gemm"),
    ("k_norm", "qk_norm"),
    ("v_proj", "det_gemm"),
    ("rope_q", "rope"),
    ("rope_k", "rope"),
    ("attention", "attention"),
    ("o_proj", "det_gemm"),
    ("attn_residual", "residual_add"),
    ("post_attention_layernorm", "rms_norm"),
    ("gate_proj", "det_gemm"),
    ("up_proj", "det_gemm"),
    ("swiglu", "swiglu"),
    ("silu", "silu"),
    ("down_proj", "det_gemm"),
    ("mlp_residual", "residual_add"),
)
HEAD_NODES = (
    ("final_norm", "rms_norm"),
    ("lm_head", "lm_head"),
    ("logprob", "logprob"),
    ("batch_invariant_logp", "batch_invariant_logp"),
)
NODE_KIND = dict(INPUT_NODES + LAYER_NODES + HEAD_NODES)
NODE_ORDER = tuple(NODE_KIND)
# nodes that are one point of the chain under two names (teacher forcing vs rollout)
SAME_POINT = {"batch_invariant_logp": "logprob", "logprob": "batch_invariant_logp"}

Tracer = Callable[[int, str, torch.Tensor, torch.Tensor], None]  # (layer, node, output [n_rows, ...], keys [n_rows])
# attend(layer, q, k, v) -> the attention output of all rows (teacher forcing over the segments, or a KV cache's)
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# ---- one forward's context --------------------------------------------------------------------


@dataclass(frozen=True)
class ForwardContext:
    """What each module's forward reads besides its parameters: one batch of rows, one forward.

    ``ops``: the op set of the model's profile (``ws1_ops``, or ``_ReferenceOps``: the FP32 reference ops);
    ``row_keys`` [n_rows]: the rows' logical keys, on the host (the ops reduce parameter gradients in their
    order); ``positions`` [n_rows]: the rows' positions on the model's device (rope); ``attend``: the
    attention of all rows (:data:`Attend`); ``tracer``: the model's tracer when the forward began (None: not
    traced); ``eps``: the RMSNorm epsilon (``config.rms_norm_eps``); ``k_chunks``: the row-parallel GEMMs' K order
    (``Qwen3ForCausalLM.k_chunks``)."""

    ops: Any
    row_keys: torch.Tensor
    positions: torch.Tensor
    attend: Attend
    tracer: Tracer | None
    eps: float
    k_chunks: int | None = None

    def row_parallel_gemm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """o_proj and down_proj, the GEMMs tensor parallel splits along K: det_gemm in the model's K order."""
        if self.k_chunks is None:
            return self.ops.det_gemm(x, weight, self.row_keys)
        return self.ops.det_gemm(x, weight, self.row_keys, k_chunks=self.k_chunks)

    def trace(self, layer: int, node: str, output: torch.Tensor) -> torch.Tensor:
        """Hand trace point ``(layer, node)``'s output to the tracer (the points: NODE_ORDER above); returns it."""
        if self.tracer is not None:
            self.tracer(layer, node, output.detach(), self.row_keys)
        return output


# ---- modules (transformers' modeling_qwen3 names; HF parameter names) ------------------------------
#
# Each module's forward runs its part of the chain through ``context.ops`` and hands every trace point's output
# to ``context.trace``, in NODE_ORDER. The parameter holders have no forward: the module owning one picks its op
# (a Qwen3RMSNorm is run by ``rms_norm``, or by ``qk_norm`` as q_norm / k_norm). Parameters are registered in
# the order of the HF checkpoint's modules (named_parameters' order: digests, optimizers).


class _ParameterHolder(nn.Module):
    """One parameter, ``weight``, allocated uninitialized where it will live (``factory_kwargs``: its dtype and
    device, always both)."""

    def __init__(self, shape: tuple[int, ...], factory_kwargs: dict):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(shape, **factory_kwargs))


class Qwen3RMSNorm(_ParameterHolder):
    """An RMSNorm's ``weight`` [size]; run by ``rms_norm`` (the layer norms) or ``qk_norm`` (per head)."""

    def __init__(self, size: int, factory_kwargs: dict):
        super().__init__((size,), factory_kwargs)


class LinearWeight(_ParameterHolder):
    """A bias-free projection's ``weight`` [out_features, in_features] (nn.Linear's layout); run by ``det_gemm``,
    or ``lm_head`` for the head."""

    def __init__(self, in_features: int, out_features: int, factory_kwargs: dict):
        super().__init__((out_features, in_features), factory_kwargs)


class EmbeddingWeight(_ParameterHolder):
    """The token embedding table ``weight`` [num_embeddings, embedding_dim]; run by ``embedding``."""

    def __init__(self, num_embeddings: int, embedding_dim: int, factory_kwargs: dict):
        super().__init__((num_embeddings, embedding_dim), factory_kwargs)


class TiedLinearWeight(nn.Module):
    """The head of a model with tied embeddings: no parameter of its own; ``weight`` IS the embedding table
    [vocab, hidden] — its owner's parameter, looked up on each access — run by ``lm_head``. Holding none keeps
    the table registered once, in ``named_parameters()`` and ``state_dict()`` (as ``model.embed_tokens.weight``)
    and for anything that replaces a module's own parameters (``.to()``, vLLM's per-module weight reload): the
    head follows the table instead of keeping an old one."""

    def __init__(self, table_owner: EmbeddingWeight):
        super().__init__()
        object.__setattr__(self, "_table_owner", table_owner)  # not a submodule either: registered once, by the model

    @property
    def weight(self) -> nn.Parameter:
        return self._table_owner.weight


class Qwen3Attention(nn.Module):
    """One layer's self-attention: q/k/v projections, per-head q/k norms, rope, the attention of all rows
    (``context.attend``), the output projection. Normed rows [n_rows, hidden] -> o_proj's output [n_rows, hidden]
    (BF16; FP32 on the reference path), which the decoder layer adds to the residual stream."""

    def __init__(self, config: Qwen3Config, layer_idx: int, factory_kwargs: dict):
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads, self.num_key_value_heads = config.num_attention_heads, config.num_key_value_heads
        self.rope_theta = config.rope_theta
        hidden = config.hidden_size
        q_width, kv_width = self.num_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        self.q_proj = LinearWeight(hidden, q_width, factory_kwargs)
        self.k_proj = LinearWeight(hidden, kv_width, factory_kwargs)
        self.v_proj = LinearWeight(hidden, kv_width, factory_kwargs)
        self.o_proj = LinearWeight(q_width, hidden, factory_kwargs)
        self.q_norm = Qwen3RMSNorm(self.head_dim, factory_kwargs)
        self.k_norm = Qwen3RMSNorm(self.head_dim, factory_kwargs)

    def forward(self, hidden_states: torch.Tensor, context: ForwardContext) -> torch.Tensor:
        ops, keys, eps, layer, trace = context.ops, context.row_keys, context.eps, self.layer_idx, context.trace
        n_rows, head_dim = hidden_states.shape[0], self.head_dim
        q_heads = (n_rows, self.num_heads, head_dim)
        kv_heads = (n_rows, self.num_key_value_heads, head_dim)
        query = trace(layer, "q_proj", ops.det_gemm(hidden_states, self.q_proj.weight, keys)).view(q_heads)
        query = trace(layer, "q_norm", ops.qk_norm(query, self.q_norm.weight, eps, keys))
        key = trace(layer, "k_proj", ops.det_gemm(hidden_states, self.k_proj.weight, keys)).view(kv_heads)
        key = trace(layer, "k_norm", ops.qk_norm(key, self.k_norm.weight, eps, keys))
        value = trace(layer, "v_proj", ops.det_gemm(hidden_states, self.v_proj.weight, keys)).view(kv_heads)
        query = trace(layer, "rope_q", ops.rope(query, context.positions, self.rope_theta))
        key = trace(layer, "rope_k", ops.rope(key, context.positions, self.rope_theta))
        attn_output = trace(layer, "attention", context.attend(layer, query, key, value))
        attn_output = attn_output.reshape(n_rows, self.num_heads * head_dim)
        return trace(layer, "o_proj", context.row_parallel_gemm(attn_output, self.o_proj.weight))


class Qwen3MLP(nn.Module):
    """One layer's MLP: ``down_proj(swiglu(gate_proj(x), up_proj(x)))`` (the fused ``swiglu``; ``silu`` never runs).
    Normed rows [n_rows, hidden] -> down_proj's output [n_rows, hidden] (BF16; FP32 on the reference path)."""

    def __init__(self, config: Qwen3Config, layer_idx: int, factory_kwargs: dict):
        super().__init__()
        self.layer_idx = layer_idx
        self.gate_proj = LinearWeight(config.hidden_size, config.intermediate_size, factory_kwargs)
        self.up_proj = LinearWeight(config.hidden_size, config.intermediate_size, factory_kwargs)
        self.down_proj = LinearWeight(config.intermediate_size, config.hidden_size, factory_kwargs)

    def forward(self, hidden_states: torch.Tensor, context: ForwardContext) -> torch.Tensor:
        ops, keys, layer, trace = context.ops, context.row_keys, self.layer_idx, context.trace
        gate = trace(layer, "gate_proj", ops.det_gemm(hidden_states, self.gate_proj.weight, keys))
        up = trace(layer, "up_proj", ops.det_gemm(hidden_states, self.up_proj.weight, keys))
        activated = trace(layer, "swiglu", ops.swiglu(gate, up))
        del gate, up  # without autograd (the rollout) nothing else holds them: freed before down_proj runs
        return trace(layer, "down_proj", context.row_parallel_gemm(activated, self.down_proj.weight))


class Qwen3DecoderLayer(nn.Module):
    """One decoder layer on the FP32 residual stream [n_rows, hidden]: ``h + self_attn(input_layernorm(h))``, then
    ``h + mlp(post_attention_layernorm(h))``."""

    def __init__(self, config: Qwen3Config, layer_idx: int, factory_kwargs: dict):
        super().__init__()
        self.layer_idx = layer_idx
        self.self_attn = Qwen3Attention(config, layer_idx, factory_kwargs)
        self.mlp = Qwen3MLP(config, layer_idx, factory_kwargs)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, factory_kwargs)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, factory_kwargs)

    def forward(self, residual: torch.Tensor, context: ForwardContext) -> torch.Tensor:
        ops, keys, eps, layer, trace = context.ops, context.row_keys, context.eps, self.layer_idx, context.trace
        if residual.dtype != torch.float32:
            # a wrapper cast the stream between layers (FSDP2's MixedPrecisionPolicy(cast_forward_inputs=True), its
            # default): the rest of the layer would run on a rounded residual and every bit after it would change
            raise ModelInputError(
                f"decoder layer {layer}: the residual stream arrived as {residual.dtype}, WS1's is float32 (an "
                "FSDP2 MixedPrecisionPolicy with cast_forward_inputs=True casts it: shard with ws1_dist.shard)"
            )
        normed = trace(layer, "input_layernorm", ops.rms_norm(residual, self.input_layernorm.weight, eps, keys))
        # FP32 residual add of a BF16 output: torch.add promotes (exact BF16 -> FP32, then one FP32 add),
        # the bits of h + y.float() in one kernel instead of two and no FP32 temporary
        residual = trace(layer, "attn_residual", torch.add(residual, self.self_attn(normed, context)))
        normed = trace(
            layer, "post_attention_layernorm", ops.rms_norm(residual, self.post_attention_layernorm.weight, eps, keys)
        )
        return trace(layer, "mlp_residual", torch.add(residual, self.mlp(normed, context)))


class Qwen3Model(nn.Module):
    """The backbone: ``embed_tokens``, the decoder ``layers``, the final ``norm``. Token ids [n_rows] -> final-norm
    hidden rows [n_rows, hidden] (BF16; FP32 on the reference path); the residual stream between is FP32."""

    def __init__(self, config: Qwen3Config, factory_kwargs: dict):
        super().__init__()
        self.embed_tokens = EmbeddingWeight(config.vocab_size, config.hidden_size, factory_kwargs)
        self.layers = nn.ModuleList(
            Qwen3DecoderLayer(config, layer_idx, factory_kwargs) for layer_idx in range(config.num_hidden_layers)
        )
        self.norm = Qwen3RMSNorm(config.hidden_size, factory_kwargs)

    def forward(self, input_ids: torch.Tensor, context: ForwardContext) -> torch.Tensor:
        ops, keys, trace = context.ops, context.row_keys, context.trace
        residual = trace(-1, "embedding", ops.embedding(input_ids, self.embed_tokens.weight, keys)).float()  # FP32
        for decoder_layer in self.layers:
            residual = decoder_layer(residual, context)
        head = len(self.layers)  # the head's trace points are layer num_hidden_layers
        return trace(head, "final_norm", ops.rms_norm(residual, self.norm.weight, context.eps, keys))


class Qwen3ForCausalLM(nn.Module):
    """Qwen3 dense causal LM on ws1 ops. Parameters use the HF names (``model.layers.0.mlp.up_proj.weight``).

    ``profile`` picks the kernels: a ws1 profile, ``"reference"`` (FP32) or the candidate
    ``"torch_default"``. ``synthetic`` is True for seeded random weights (never the formal gate)."""

    def __init__(self, config: Qwen3Config, profile: str = "cpu_bf16", *, device: str | torch.device = "cpu"):
        super().__init__()
        check_profile(profile)
        self.config, self.profile = config, profile
        # parameters are allocated where they will live (uninitialized): an 8B model on a GPU never
        # passes through host memory
        factory_kwargs = {"dtype": param_dtype(profile), "device": torch.device(device)}
        self.model = Qwen3Model(config, factory_kwargs)
        # tied (0.6B, 1.7B, 4B): lm_head.weight IS model.embed_tokens.weight — one Parameter, one storage, listed once
        # by named_parameters() (as model.embed_tokens.weight, as transformers does). Its gradient is the embedding's
        # and the head's contributions, each FP32 in its own canonical row order, added in FP32 and rounded once
        # (ws1_ops.combine; docs/model.md "Tied embeddings")
        if config.tie_word_embeddings:
            self.lm_head = TiedLinearWeight(self.model.embed_tokens)
            ws1_ops.tie(self.lm_head.weight)
        else:
            self.lm_head = LinearWeight(config.hidden_size, config.vocab_size, factory_kwargs)
        self.synthetic = False
        self.weights_sha256: str | None = None
        self.source = "empty"
        self.tracer: Tracer | None = None
        # the kernel family a negative-control candidate (``profile`` in ``ws1_ops.candidate_names()``) runs on:
        # set by the chain gate to its profile's family; None: the control's own (cpu)
        self.candidate_family: str | None = None
        # an op set this model runs instead of its profile's (ws1_ops' names and signatures, wrapping ws1_ops):
        # ws1_dist's tensor-parallel ops, which finish a sharded reduction across ranks. None: the profile's own
        self.op_set: Any = None
        # the K order of the row-parallel GEMMs (o_proj, down_proj): None, the default (one serial chain); 8, the
        # parallel-invariant order (ws1_ops.det_gemm's k_chunks; docs/parallel.md) — what a tensor-parallel rollout
        # (ws1_dist.tp_model, vLLM at TP > 1 with the plugin) computes, so a trainer set to 8 gets its bits
        self.k_chunks: int | None = None

    # ---- execution context ---------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def ops(self):
        if self.op_set is not None:
            return self.op_set
        return _ReferenceOps if self.profile == REFERENCE else ws1_ops

    def activate(self) -> contextlib.AbstractContextManager:
        """The kernels of this model's profile (fails closed: absent device or kernel package raises)."""
        if self.profile == REFERENCE:
            return contextlib.nullcontext()
        if self.profile in ws1_accel.PROFILE_FAMILY:
            return ws1_ops.use_profile(self.profile, self.device)
        # a candidate (check_profile let nothing else in): a control runs on the kernels of candidate_family
        # (None: its own, cpu)
        return ws1_ops.use_candidate(self.profile, self.candidate_family)

    def trace(self, layer: int, node: str, t: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Hand node ``(layer, node)``'s output to the tracer (its trace points: NODE_ORDER above); returns ``t``."""
        if self.tracer is not None:
            self.tracer(layer, node, t.detach(), keys)
        return t

    # ---- the chain ---------------------------------------------------------------------------

    def _check_ids(self, ids: torch.Tensor | Sequence[int]) -> None:
        """Token ids in the vocabulary: a list of ints, or a tensor on the host (reading a device tensor would
        be a sync: the device ids the model sees are the engine's sampled tokens, in range by construction)."""
        if isinstance(ids, torch.Tensor):
            if not ids.numel():
                return
            lowest, highest = int(ids.min()), int(ids.max())
        else:
            if not ids:
                return
            lowest, highest = min(ids), max(ids)
        if lowest < 0 or highest >= self.config.vocab_size:
            outside = highest if highest >= self.config.vocab_size else lowest
            raise ModelInputError(f"token id {outside} is outside the vocabulary [0, {self.config.vocab_size})")

    def _check_positions(self, positions: torch.Tensor) -> None:
        highest = int(positions.max()) if positions.numel() else -1
        if highest >= self.config.max_position_embeddings:
            raise ModelInputError(
                f"position {highest} exceeds max_position_embeddings {self.config.max_position_embeddings}"
            )

    def hidden(
        self, rows: Rows, attend: Attend | None = None, chunk: int | None = None, checked: bool = True
    ) -> torch.Tensor:
        """Final-norm hidden states [n_rows, hidden] (BF16; FP32 on the reference path): ``self.model``'s forward.

        ``attend(layer, q, k, v)`` computes attention of all rows (default: teacher forcing over
        the segments ``rows.cu``); ``chunk`` runs that attention as chunked prefill (see ws1_ops.attention).

        The row metadata is validated here, on the host where it is built (ids in the vocabulary,
        positions below the context), and the ops then run inside ``ws1_ops.trusted_inputs()``: on a GPU
        their own value checks would each be a host sync. ``checked=False``: the caller (the rollout
        engine) has validated them already — its ids may live on the device (sampled tokens, in range
        by construction), where reading them would be a sync. The row keys stay on the host: the ops
        only keep them for the canonical row order of parameter gradients, computed there."""
        if checked:
            self._check_ids(rows.ids)
            self._check_positions(rows.pos)
        ops, device = self.ops(), self.device
        input_ids, positions = rows.ids.to(device), rows.pos.to(device)
        segments = rows.cu.to(device)
        if attend is None:

            def attend(_layer, query, key, value):
                return ops.attention(query, key, value, segments, segments, positions, None, chunk)

        context = ForwardContext(
            ops, rows.keys, positions, attend, self.tracer, self.config.rms_norm_eps, self.k_chunks
        )
        with ws1_ops.trusted_inputs():
            return self.model(input_ids, context)

    def logits_of(self, hidden_states: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """FP32 logits [n, V] of hidden rows [n, hidden] (``keys`` [n]: on the host, as hidden() keeps them)."""
        weight = self.lm_head.weight
        if self.config.tie_word_embeddings:
            # the table is marked read by two ops (a backward outside canonical_grads() refuses it) each forward:
            # the mark follows the tensor object, which a conversion (.to(), a weight reload) may have replaced
            ws1_ops.tie(weight)
        logits = self.ops().lm_head(hidden_states, weight, keys)
        self.trace(self.config.num_hidden_layers, "lm_head", logits, keys)
        return logits

    # ---- the transformers-style entry ----------------------------------------------------------

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [B, S] int64 (no padding; each row one sequence from position 0) -> FP32 logits [B, S, V]."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype != torch.int64 or input_ids.dim() != 2:
            raise ModelInputError(
                f"input_ids must be an int64 [B, S] tensor, got "
                f"{getattr(input_ids, 'dtype', type(input_ids).__name__)} {tuple(getattr(input_ids, 'shape', ()))}"
            )
        batch_size, seq_len = input_ids.shape
        if seq_len > self.config.max_position_embeddings:
            raise ModelInputError(
                f"sequence length {seq_len} exceeds max_position_embeddings {self.config.max_position_embeddings}"
            )
        sample_rank = torch.arange(batch_size, device="cpu").repeat_interleave(seq_len)
        positions = torch.arange(seq_len, device="cpu").repeat(batch_size)
        keys = ws1_ops.logical_keys(sample_rank, positions)
        segments = torch.arange(0, batch_size * seq_len + 1, seq_len, device="cpu")
        rows = Rows(input_ids.reshape(-1).cpu(), positions, keys, segments)
        with self.activate():
            logits = self.logits_of(self.hidden(rows), keys)
        return logits.view(batch_size, seq_len, -1)

    def forward_packed(self, input_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        """Packed varlen batch: input_ids [T] int64, cu_seqlens [B+1] int64 (sequence b is
        input_ids[cu[b]:cu[b+1]], positions from 0) -> FP32 logits [T, V]. Row b's bits are those of
        the same sequence run alone, or padded, or in any other pack."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype != torch.int64 or input_ids.dim() != 1:
            raise ModelInputError("input_ids must be an int64 [T] tensor")
        cu = cu_seqlens.cpu() if isinstance(cu_seqlens, torch.Tensor) else None
        if (
            cu is None
            or cu.dtype != torch.int64
            or cu.dim() != 1
            or cu.numel() < 2
            or int(cu[0]) != 0
            or int(cu[-1]) != input_ids.numel()
            or bool((cu[1:] <= cu[:-1]).any())
        ):
            raise ModelInputError(
                f"cu_seqlens must be int64 [B+1], strictly increasing from 0 to T={input_ids.numel()}"
            )
        lengths = (cu[1:] - cu[:-1]).tolist()
        sample_rank = torch.cat(
            [torch.full((length,), rank, dtype=torch.int64, device="cpu") for rank, length in enumerate(lengths)]
        )
        positions = torch.cat([torch.arange(length, device="cpu") for length in lengths])
        keys = ws1_ops.logical_keys(sample_rank, positions)
        rows = Rows(input_ids.cpu(), positions, keys, cu)
        with self.activate():
            return self.logits_of(self.hidden(rows), keys)

    # ---- KV-cache steps (the rollout engine) -------------------------------------------------

    def new_cache(
        self,
        kind: str = "paged",
        *,
        max_seqs: int = 8,
        max_len: int | None = None,
        block_size: int = 16,
        num_blocks: int | None = None,
        prefix_reuse: bool = True,
    ) -> KVCache:
        """A KV cache for this model (BF16, on the model's device): ``paged`` (B2) or ``contiguous`` (B1)."""
        from ws1_kv import ContiguousKVCache, PagedKVCache

        config = self.config
        max_len = max_len or config.max_position_embeddings
        dims = (config.num_hidden_layers, config.num_key_value_heads, config.head_dim)
        dtype = param_dtype(self.profile)
        if kind == "contiguous":
            return ContiguousKVCache(*dims, max_seqs=max_seqs, max_len=max_len, dtype=dtype, device=self.device)
        if kind == "paged":
            return PagedKVCache(
                *dims,
                num_blocks=num_blocks or max_seqs * -(-max_len // block_size),
                block_size=block_size,
                max_len=max_len,
                dtype=dtype,
                device=self.device,
                prefix_reuse=prefix_reuse,
            )
        raise ModelInputError(f"unknown cache kind {kind!r}; expected 'paged' or 'contiguous'")

    @torch.no_grad()
    def step(
        self,
        cache: KVCache,
        new_tokens: dict[Hashable, Sequence[int]],
        ranks: dict[Hashable, int] | None = None,
        all_logits: bool = False,
        checked: bool = True,
    ) -> dict[Hashable, torch.Tensor]:
        """Append ``new_tokens[seq]`` to each sequence through the cache (prefill, a chunk, or decode).

        Returns FP32 logits per sequence: [V] of its last new token, or [n, V] with ``all_logits``.
        Validation and allocation happen before any write (a bad request changes nothing);
        ``checked=False``: the ids were validated by the caller (the rollout engine)."""
        tokens = {seq: [int(token) for token in seq_tokens] for seq, seq_tokens in new_tokens.items()}
        for seq, seq_tokens in tokens.items():
            if not seq_tokens:
                raise ModelInputError(f"sequence {seq!r}: no new tokens")
            if checked:
                self._check_ids(seq_tokens)
            if cache.length(seq) + len(seq_tokens) > self.config.max_position_embeddings:
                raise ModelInputError(
                    f"sequence {seq!r}: {cache.length(seq) + len(seq_tokens)} tokens exceed max_position_embeddings "
                    f"{self.config.max_position_embeddings}"
                )
        reserved = cache.reserve({seq: len(seq_tokens) for seq, seq_tokens in tokens.items()})
        ids = torch.tensor(
            [token for seq in reserved.seq_ids for token in tokens[seq]], dtype=torch.int64, device="cpu"
        )
        logits = self.run_step(cache, reserved, ids, ranks, all_logits)
        cache.commit(reserved, tokens)
        if all_logits:
            return dict(zip(reserved.seq_ids, logits.split(list(reserved.counts))))
        return dict(zip(reserved.seq_ids, logits))

    @torch.no_grad()
    def run_step(
        self,
        cache: KVCache,
        reserved: Step,
        ids: torch.Tensor,
        ranks: dict[Hashable, int] | None = None,
        all_logits: bool = False,
    ) -> torch.Tensor:
        """The forward of a step the cache has reserved (``reserved = cache.reserve(...)``; the caller commits).

        ``ids`` [T] int64 in ``reserved``'s row order, on the host or on the model's device (the rollout engine's
        sampled tokens never leave it), validated by the caller: nothing here reads a value back. Returns
        FP32 logits: [n_seq, V] of each sequence's last new token (``reserved.seq_ids`` order), or [T, V]."""
        ranks = ranks or {}
        sample_rank = torch.cat(
            [
                torch.full((count,), ranks.get(seq, index), dtype=torch.int64, device="cpu")
                for index, (seq, count) in enumerate(zip(reserved.seq_ids, reserved.counts))
            ]
        )
        keys = ws1_ops.logical_keys(sample_rank, reserved.q_pos)
        rows = Rows(ids, reserved.q_pos, keys, reserved.cu_seqlens_q)

        def attend(layer, query, key, value):
            return cached_attention(cache, layer, reserved, query, key, value)

        with self.activate():
            hidden_states = self.hidden(rows, attend=attend, checked=False)
            if not all_logits:
                last_rows = reserved.cu_seqlens_q[1:] - 1
                if "last" not in reserved.dev:
                    reserved.dev["last"] = last_rows.to(hidden_states.device)
                hidden_states = hidden_states.index_select(0, reserved.dev["last"])
                keys = keys.index_select(0, last_rows)
            return self.logits_of(hidden_states, keys)

    def prefill(
        self,
        cache: KVCache,
        prompts: dict[Hashable, Sequence[int]],
        chunk: int | None = None,
        ranks: dict[Hashable, int] | None = None,
        all_logits: bool = False,
        checked: bool = True,
    ) -> dict[Hashable, torch.Tensor]:
        """Feed each sequence's ``prompts[seq]`` (appended at its cursor) through the cache, in one step
        or in chunks whose boundaries are absolute positions (multiples of ``chunk``).

        Returns each sequence's logits of its last prompt token ([V]), or all of them ([n, V])."""
        if chunk is None:
            return self.step(cache, prompts, ranks, all_logits, checked)
        if not isinstance(chunk, int) or chunk <= 0:
            raise ModelInputError(f"chunk must be a positive int, got {chunk!r}")
        remaining = {seq: list(prompt) for seq, prompt in prompts.items()}
        outputs: dict[Hashable, list[torch.Tensor]] = {seq: [] for seq in prompts}
        while any(remaining.values()):
            this_chunk = {}
            for seq, rest in remaining.items():
                if rest:
                    to_boundary = (cache.length(seq) // chunk + 1) * chunk - cache.length(seq)  # the next absolute one
                    this_chunk[seq], remaining[seq] = rest[:to_boundary], rest[to_boundary:]
            for seq, logits in self.step(cache, this_chunk, ranks, all_logits, checked).items():
                outputs[seq].append(logits if all_logits else logits[None])
        return {seq: torch.cat(parts) if all_logits else parts[-1][0] for seq, parts in outputs.items()}

    def decode(
        self, cache: KVCache, tokens: dict[Hashable, int], ranks: dict[Hashable, int] | None = None
    ) -> dict[Hashable, torch.Tensor]:
        """One decode step: append one token per sequence; returns each sequence's next-token logits [V]."""
        return self.step(cache, {seq: [token] for seq, token in tokens.items()}, ranks)

    def rollout_logp(self, logits: torch.Tensor) -> torch.Tensor:
        """The rollout's full log-softmax of logits [n, V] (``batch_invariant_logp``), FP32."""
        with self.activate():
            return self.ops().batch_invariant_logp(logits)
