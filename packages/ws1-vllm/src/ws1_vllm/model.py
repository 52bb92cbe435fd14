"""``WS1Qwen3ForCausalLM``: vLLM's model class for ``Qwen3ForCausalLM`` when the plugin is enabled.

It is ``ws1_qwen3.Qwen3ForCausalLM`` — WS1's own modules and parameters (the HF names vLLM's loader yields) — with
vLLM's model interface around it. Every node runs WS1's model code on the kernels of ``WS1_VLLM_PROFILE`` (or of
the ``WS1_VLLM_CANDIDATE`` control on that profile's family): embedding, rms_norm, the seven GEMMs as separate
``det_gemm`` calls (q/k/v and gate/up are never merged: WS1's bits are those of the separate GEMMs), qk_norm, rope,
attention over vLLM's paged KV cache (:mod:`ws1_vllm.attention`), swiglu, lm_head. Nothing of vLLM's layers or
kernels runs in the forward; vLLM's ``Attention`` layers are declared only so that vLLM allocates the KV cache and
builds its metadata.

Per step (T token rows of R requests, vLLM's batch order)::

    forward(input_ids [T], positions [T])  -> final-norm hidden [T, hidden] BF16
    compute_logits(hidden [n, hidden])     -> logits [n, V] FP32 (ws1 lm_head)
    Sampler.compute_logprobs(logits)       -> log-probs [n, V] FP32 (ws1 batch_invariant_logp; ws1_vllm.hooks)

Row keys (``rank << 32 | position``, rank = the request's index in the step) only order parameter-gradient
reductions in WS1's ops; a forward's bits do not depend on them.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

import ws1_accel
import ws1_dist
import ws1_ops
import ws1_qwen3
from ws1_qwen3 import Rows
from ws1_qwen3.weights import TIED_HEAD, TIED_TABLE

from . import hooks, recording
from .attention import PagedStep, kv_rows
from .errors import WS1VllmRefused
from .settings import check_model_len, check_vllm_config, from_env, resolve_device


class WS1Qwen3ForCausalLM(ws1_qwen3.Qwen3ForCausalLM):
    """Dense Qwen3 on WS1's kernels, behind vLLM's model interface (``vllm.model_executor.models.interfaces_base``).

    Built by vLLM's model loader in the Worker process. Refuses at construction (:class:`WS1VllmRefused`, one line)
    every setting of :func:`ws1_vllm.settings.check_vllm_config`, a checkpoint config ``ws1_qwen3`` refuses, a
    ``max_model_len`` beyond the checkpoint's positions, and an absent or mismatched device."""

    def __init__(self, *, vllm_config, prefix: str = ""):
        from vllm.model_executor.layers.attention import Attention

        # the settings register() patched vLLM for in this process: the log-prob hook runs on the same kernels
        settings, wanted = hooks.installed(), from_env()
        if settings is None or wanted != settings:
            have, want = (s.describe() if s else "nothing (inert)" for s in (settings, wanted))
            raise WS1VllmRefused(
                f"ws1_vllm: the environment asks for {want} but the plugin was registered for {have} in this process "
                "(set WS1_VLLM_PROFILE / WS1_VLLM_CANDIDATE before vLLM starts)"
            )
        check_vllm_config(vllm_config, settings)
        try:
            config = ws1_qwen3.Qwen3Config.from_hf(vllm_config.model_config.hf_config.to_dict())
        except ws1_qwen3.ConfigError as exc:
            raise WS1VllmRefused(f"ws1_vllm: {exc}") from None
        if getattr(vllm_config.model_config, "word_embeddings_untied_by_checkpoint", False):
            # the config was tied but the checkpoint carries an lm_head.weight, so vLLM set tie_word_embeddings
            # False (ModelConfig.maybe_untie_word_embeddings) to load it, and would serve it even where it differs
            # from the table. WS1 keeps the config's tie and takes the head only when it is bitwise the table
            # (load_weights), as ws1_qwen3.from_pretrained does: the trainer and the rollout run one model.
            config = config.replace(tie_word_embeddings=True)
        check_model_len(vllm_config.model_config.max_model_len, config.max_position_embeddings)
        device = resolve_device(settings, vllm_config.device_config.device)
        # tensor parallel (docs/parallel.md): this worker holds ws1_dist.tp_model's shard — its heads and
        # intermediate features, o_proj/down_proj finished across the TP group by the 8-chunk K tree (never the
        # group's all-reduce), the head's logits gathered — so every degree gives the bits of a model with
        # k_chunks=8 on one device (a trainer set so: apply_ws1(..., k_chunks=8))
        shard = None  # (the full config, the degree, this worker's rank) under tensor parallel
        tp = getattr(vllm_config.parallel_config, "tensor_parallel_size", 1)
        if tp > 1:
            from vllm.distributed import get_tp_group

            try:
                local = ws1_dist.local_config(config, tp)
            except ws1_dist.DistError as exc:
                raise WS1VllmRefused(f"ws1_vllm: {exc}") from None
            group = get_tp_group()
            shard = (config, tp, group.rank_in_group)
            config = local
        super().__init__(config, settings.model_profile, device=device)
        self.tp = shard
        if shard is not None:
            self.op_set = ws1_dist.TPOps(tp, shard[2], group.device_group)
            self.k_chunks = ws1_dist.CHUNKS
        if settings.candidate:
            self.candidate_family = settings.family  # the control runs on the profile's kernel family
        try:
            with self.activate():  # fail closed here, not at the first step: a kernel package or family missing
                pass
        except (ws1_ops.KernelUnavailable, ws1_accel.AcceleratorError) as exc:
            raise WS1VllmRefused(f"ws1_vllm: {settings.describe()}: {exc}") from None
        self.settings = settings
        # One vLLM Attention per layer, never called (module docstring). Its name must hold exactly one integer,
        # the layer index: vLLM binds each layer's cache by it (extract_layer_index).
        head_dim = config.head_dim
        self.vllm_attn = nn.ModuleList(
            Attention(
                config.num_attention_heads,
                head_dim,
                head_dim**-0.5,
                num_kv_heads=config.num_key_value_heads,
                cache_config=vllm_config.cache_config,
                prefix=f"{prefix}{'.' if prefix else ''}model.layers.{index}.self_attn.attn",
            )
            for index in range(config.num_hidden_layers)
        )
        recording.start()

    # ---- vLLM's model interface ------------------------------------------------------------------

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings [T, hidden] BF16 of ``input_ids`` [T] (ws1 ``embedding``)."""
        with self.activate(), recording.calls():
            return ws1_ops.embedding(input_ids.long(), self.model.embed_tokens.weight)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        intermediate_tensors=None,
        inputs_embeds: torch.Tensor | None = None,
        **_: object,
    ) -> torch.Tensor:
        """One step: ``input_ids`` [T], absolute ``positions`` [T] -> final-norm hidden states [T, hidden] BF16,
        through WS1's chain, attention on vLLM's paged KV cache."""
        if inputs_embeds is not None or intermediate_tensors is not None:
            raise WS1VllmRefused(
                "ws1_vllm: inputs_embeds / intermediate_tensors are refused: WS1's chain starts at its own embedding"
            )
        from vllm.forward_context import get_forward_context, is_forward_context_available

        ids, positions = input_ids.long(), positions.long()
        metadata = get_forward_context().attn_metadata if is_forward_context_available() else None
        if not metadata:
            return self._forward_without_cache(ids)
        if not isinstance(metadata, dict):
            raise WS1VllmRefused(f"ws1_vllm: attention metadata of type {type(metadata).__name__}, not per layer")
        num_tokens = ids.numel()
        steps: dict[int, PagedStep] = {}  # per metadata object: the layers of one KV-cache group share theirs
        caches = []
        for layer in self.vllm_attn:
            kv = kv_rows(
                layer.kv_cache, layer.attn_backend.get_name(), self.config.num_key_value_heads, self.config.head_dim
            )
            layer_metadata = metadata[layer.layer_name]
            if id(layer_metadata) not in steps:
                steps[id(layer_metadata)] = PagedStep.of(layer_metadata, num_tokens, kv.shape[2] // 2)
            caches.append((kv, steps[id(layer_metadata)]))

        def attend(index, query, key, value):
            kv, step = caches[index]
            return step.attend(kv, query, key, value, positions)

        step = caches[0][1]
        # rank = the request's index in this step; keys on the host (the ops keep them for gradient order only)
        ranks = torch.repeat_interleave(torch.arange(step.cu_q.numel() - 1), (step.cu_q[1:] - step.cu_q[:-1]).cpu())
        keys = ws1_ops.logical_keys(ranks, positions.cpu())
        # checked=False: vLLM validated the ids (vocabulary) and max_model_len (positions, checked at load)
        with self.activate(), recording.calls():
            return self.hidden(Rows(ids, positions, keys, step.cu_q), attend=attend, checked=False)

    def _forward_without_cache(self, ids: torch.Tensor) -> torch.Tensor:
        """vLLM's profiling / warm-up run (no attention metadata, no cache): the T rows as one causal sequence at
        positions 0..T-1, on the same kernels. Its output is discarded by vLLM."""
        num_tokens = ids.numel()
        positions = torch.arange(num_tokens)
        keys = ws1_ops.logical_keys(torch.zeros(num_tokens, dtype=torch.int64), positions)
        segments = torch.tensor([0, num_tokens])
        with self.activate(), recording.calls():
            return self.hidden(Rows(ids, positions, keys, segments), checked=False)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """FP32 logits [n, V] of hidden rows [n, hidden] (ws1 ``lm_head``; vLLM passes the rows it samples from, or a
        request's prompt rows for prompt log-probs)."""
        rows = hidden_states.shape[0]
        keys = ws1_ops.logical_keys(torch.zeros(rows, dtype=torch.int64), torch.arange(rows))
        with self.activate(), recording.calls():
            return self.logits_of(hidden_states, keys)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load checkpoint tensors by HF name; returns the names loaded. Every parameter must come, and nothing else.

        Goes through ``param.weight_loader`` (vLLM's ``default_weight_loader`` when a parameter has none): vLLM's
        ``reload_weights`` swaps the parameters for meta tensors whose wrapped loaders copy into the original
        storage, so a plain ``param.copy_()`` would write into the meta tensors and keep the old weights. An FP32
        checkpoint is rounded to BF16 (nearest-even) once, here, as ``ws1_qwen3.from_pretrained`` does.

        Tied embeddings: the one table is ``model.embed_tokens.weight`` (``named_parameters()`` lists it once), loaded
        once; a tied checkpoint has no ``lm_head.weight``. One that comes anyway (a checkpoint or a weight update
        carrying the redundant copy) is checked, not loaded: bitwise the table's tensor, or refused."""
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        params = dict(self.named_parameters())
        loaded: set[str] = set()
        tied = self.config.tie_word_embeddings
        head = table = None  # a tied model's redundant lm_head.weight and the table as given, compared at the end
        for name, tensor in weights:
            if tied and name == TIED_HEAD:
                head = tensor
                continue
            if tied and name == TIED_TABLE:
                table = tensor
            param = params.get(name)
            if param is None:
                raise WS1VllmRefused(f"ws1_vllm: checkpoint tensor {name} is not a parameter of dense Qwen3")
            if self.tp is not None:  # this worker's part of the full tensor (heads, features, K columns)
                tensor = ws1_dist.shard_weight(name, tensor, *self.tp)
            if tuple(tensor.shape) != tuple(param.shape):
                raise WS1VllmRefused(
                    f"ws1_vllm: checkpoint tensor {name} has shape {list(tensor.shape)}, expected {list(param.shape)}"
                )
            getattr(param, "weight_loader", default_weight_loader)(param, tensor.to(param.dtype))
            loaded.add(name)
        missing = sorted(set(params) - loaded)
        if missing:
            raise WS1VllmRefused(f"ws1_vllm: the checkpoint lacks {len(missing)} parameter(s), first {missing[0]}")
        if head is not None:
            same = table is not None and head.dtype == table.dtype and head.shape == table.shape
            if not (same and torch.equal(head.cpu(), table.cpu())):
                raise WS1VllmRefused(
                    f"ws1_vllm: checkpoint tensor {TIED_HEAD} is not {TIED_TABLE}, which the config ties it to "
                    "(tie_word_embeddings)"
                )
        return loaded
