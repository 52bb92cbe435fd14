"""The chain's trace points: every kernel call of the Qwen3 chain, by role, in the order the model
computes them. The model hands each point's output to its ``tracer`` (``Qwen3ForCausalLM.tracer``);
a harness (ws1-matrix's ``first_drift``) digests them per token to name where two runs stop agreeing.

* layer −1: ``embedding``;
* each decoder layer: ``input_layernorm``, ``q_proj``, ``q_norm``, ``k_proj``, ``k_norm``, ``v_proj``,
  ``rope_q``, ``rope_k``, ``attention``, ``o_proj``, ``attn_residual``, ``post_attention_layernorm``,
  ``gate_proj``, ``up_proj``, ``swiglu``, ``down_proj``, ``mlp_residual`` (the residuals are FP32 adds,
  not kernels: traced so a drift is seen where it enters the residual stream);
* layer L (the head): ``final_norm``, ``lm_head``, then the selected log-prob of the predicted token —
  ``logprob`` in teacher forcing, ``batch_invariant_logp`` in the rollout (decode path). The two are
  the same point of the chain (the log-prob a token gets): :data:`SAME_POINT`.

``silu`` never runs in the dense chain (the MLP uses the fused ``swiglu``); it is traced as node
(0, ``silu``) where a harness checks ``silu(g) == swiglu(g, 1)`` on layer 0's gate activations.
Each point's kind is a manifest node (``ws1_contract`` node table) or ``residual_add``; a test checks
that every required node is some point's kind.
"""

# (point, kind): the kind is a manifest node or "residual_add"
INPUT_NODES = (("embedding", "embedding"),)
LAYER_NODES = (("input_layernorm", "rms_norm"), ("q_proj", "det_gemm"), ("q_norm", "qk_norm"), ("k_proj", "det_gemm"),
               ("k_norm", "qk_norm"), ("v_proj", "det_gemm"), ("rope_q", "rope"), ("rope_k", "rope"),
               ("attention", "attention"), ("o_proj", "det_gemm"), ("attn_residual", "residual_add"),
               ("post_attention_layernorm", "rms_norm"), ("gate_proj", "det_gemm"), ("up_proj", "det_gemm"),
               ("swiglu", "swiglu"), ("silu", "silu"), ("down_proj", "det_gemm"), ("mlp_residual", "residual_add"))
HEAD_NODES = (("final_norm", "rms_norm"), ("lm_head", "lm_head"), ("logprob", "logprob"),
              ("batch_invariant_logp", "batch_invariant_logp"))
NODE_KIND = dict(INPUT_NODES + LAYER_NODES + HEAD_NODES)
NODE_ORDER = tuple(NODE_KIND)
# nodes that are one point of the chain under two names (teacher forcing vs rollout)
SAME_POINT = {"batch_invariant_logp": "logprob", "logprob": "batch_invariant_logp"}


__all__ = ["HEAD_NODES", "INPUT_NODES", "LAYER_NODES", "NODE_KIND", "NODE_ORDER", "SAME_POINT"]
