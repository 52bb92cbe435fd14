"""The chain-speed baseline: Qwen3 written in plain PyTorch as a user would, BF16.

Not the negative-control backend (``torch_default`` runs the ws1 chain's own node-by-node calls with
torch ops); this is the ordinary way to write the model: a right-padded [B, S] batch, ``F.linear``,
``F.rms_norm``, HF-style rotary embedding (cos/sin in BF16, rotate_half), and one batched
``F.scaled_dot_product_attention`` call per layer with the causal mask (``is_causal=True``; right
padding sits after every real token, so no real query sees a pad key) and GQA (``enable_gqa``).
The weights are the ws1 model's, held in BF16.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BF = torch.bfloat16


class PlainQwen3(nn.Module):
    def __init__(self, ws1_model, device=None):
        super().__init__()
        self.config = c = ws1_model.config
        # ws1 parameter names (HF layout), dots -> "__" for the ParameterDict
        self.w = nn.ParameterDict({n.replace(".", "__"): nn.Parameter(p.detach().to(device=device, dtype=BF).clone())
                                   for n, p in ws1_model.named_parameters()})
        D = c.head_dim
        self.register_buffer("inv_freq", 1.0 / (c.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32, device=device) / D)),
                             persistent=False)

    def p(self, name: str) -> torch.Tensor:
        return self.w[name.replace(".", "__")]

    def rope(self, S: int, device):
        fr = torch.arange(S, device=device, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((fr, fr), dim=-1)
        return emb.cos().to(BF), emb.sin().to(BF)

    @staticmethod
    def rotate(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        c = self.config
        B, S = ids.shape
        Hq, Hkv, D, eps = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps
        cos, sin = self.rope(S, ids.device)
        x = F.embedding(ids, self.p("model.embed_tokens.weight"))
        for i in range(c.num_hidden_layers):
            L = f"model.layers.{i}."
            h = F.rms_norm(x, (c.hidden_size,), self.p(L + "input_layernorm.weight"), eps)
            q = F.linear(h, self.p(L + "self_attn.q_proj.weight")).view(B, S, Hq, D)
            k = F.linear(h, self.p(L + "self_attn.k_proj.weight")).view(B, S, Hkv, D)
            v = F.linear(h, self.p(L + "self_attn.v_proj.weight")).view(B, S, Hkv, D)
            q = F.rms_norm(q, (D,), self.p(L + "self_attn.q_norm.weight"), eps).transpose(1, 2)
            k = F.rms_norm(k, (D,), self.p(L + "self_attn.k_norm.weight"), eps).transpose(1, 2)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            a = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True, enable_gqa=True)
            x = x + F.linear(a.transpose(1, 2).reshape(B, S, Hq * D), self.p(L + "self_attn.o_proj.weight"))
            h = F.rms_norm(x, (c.hidden_size,), self.p(L + "post_attention_layernorm.weight"), eps)
            m = F.silu(F.linear(h, self.p(L + "mlp.gate_proj.weight"))) * F.linear(h, self.p(L + "mlp.up_proj.weight"))
            x = x + F.linear(m, self.p(L + "mlp.down_proj.weight"))
        return F.rms_norm(x, (c.hidden_size,), self.p("model.norm.weight"), eps)

    def loss(self, ids, rows, tgt):
        """−mean log p of the target tokens at the flattened [B*S] positions ``rows`` (logits in FP32)."""
        h = self.hidden(ids).reshape(-1, self.config.hidden_size).index_select(0, rows)
        logits = F.linear(h, self.p("lm_head.weight")).float()
        return -torch.log_softmax(logits, -1).gather(1, tgt[:, None]).mean()
