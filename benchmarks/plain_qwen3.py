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
        self.w = nn.ParameterDict(
            {
                n.replace(".", "__"): nn.Parameter(p.detach().to(device=device, dtype=BF).clone())
                for n, p in ws1_model.named_parameters()
            }
        )
        D = c.head_dim
        self.register_buffer(
            "inv_freq",
            1.0 / (c.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32, device=device) / D)),
            persistent=False,
        )

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

    # ---- packed varlen (the trainer step's layout) and decode through a KV cache (the rollout's) ----------------

    def _layer_qkv(self, i: int, h: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q [T, Hq, D], k, v [T, Hkv, D] of rows h [T, H] at positions pos [T] (rope from the cos/sin tables)."""
        c = self.config
        Hq, Hkv, D, eps = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps
        L = f"model.layers.{i}."
        T = h.shape[0]
        q = F.rms_norm(
            F.linear(h, self.p(L + "self_attn.q_proj.weight")).view(T, Hq, D),
            (D,),
            self.p(L + "self_attn.q_norm.weight"),
            eps,
        )
        k = F.rms_norm(
            F.linear(h, self.p(L + "self_attn.k_proj.weight")).view(T, Hkv, D),
            (D,),
            self.p(L + "self_attn.k_norm.weight"),
            eps,
        )
        v = F.linear(h, self.p(L + "self_attn.v_proj.weight")).view(T, Hkv, D)
        cs, sn = cos[pos][:, None, :], sin[pos][:, None, :]
        return self.rotate(q, cs, sn), self.rotate(k, cs, sn), v

    def _layer_rest(self, i: int, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        c = self.config
        L = f"model.layers.{i}."
        x = x + F.linear(a, self.p(L + "self_attn.o_proj.weight"))
        h = F.rms_norm(x, (c.hidden_size,), self.p(L + "post_attention_layernorm.weight"), c.rms_norm_eps)
        m = F.silu(F.linear(h, self.p(L + "mlp.gate_proj.weight"))) * F.linear(h, self.p(L + "mlp.up_proj.weight"))
        return x + F.linear(m, self.p(L + "mlp.down_proj.weight"))

    def hidden_packed(self, ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """Packed varlen rows: ids [T] (sequences back to back, ``lengths`` on the host) -> final-norm hidden [T, H].
        Every projection on all T rows at once (F.linear); attention per sequence, causal SDPA (flash on a GPU)."""
        c = self.config
        Hq, D, eps = c.num_attention_heads, c.head_dim, c.rms_norm_eps
        pos = torch.cat([torch.arange(n, device=ids.device) for n in lengths])
        cos, sin = self.rope(max(lengths), ids.device)
        x = F.embedding(ids, self.p("model.embed_tokens.weight"))
        for i in range(c.num_hidden_layers):
            h = F.rms_norm(x, (c.hidden_size,), self.p(f"model.layers.{i}.input_layernorm.weight"), eps)
            q, k, v = self._layer_qkv(i, h, pos, cos, sin)
            outs, s = [], 0
            for n in lengths:
                qb, kb, vb = (t[s : s + n].transpose(0, 1)[None] for t in (q, k, v))
                outs.append(
                    F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, enable_gqa=True)[0].transpose(0, 1)
                )
                s += n
            x = self._layer_rest(i, x, torch.cat(outs).reshape(-1, Hq * D))
        return F.rms_norm(x, (c.hidden_size,), self.p("model.norm.weight"), eps)

    def loss_packed(self, ids, lengths, rows, tgt):
        """−mean log p of the targets ``tgt`` at packed rows ``rows`` (FP32 logits, log_softmax)."""
        h = self.hidden_packed(ids, lengths).index_select(0, rows)
        logits = F.linear(h, self.p("lm_head.weight")).float()
        return -torch.log_softmax(logits, -1).gather(1, tgt[:, None]).mean()

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, new_tokens: int, temperature: float = 1.0, seed: int = 0, marks=None):
        """Rollout in plain PyTorch: prompts [B, P] (equal lengths), prefill then ``new_tokens`` - 1 decode steps,
        Gumbel-max sampling with torch's own generator on the device, tokens kept on the device (no host
        sync per token). The KV cache has ws1's contiguous layout, ``[B * max_len, Hkv, D]`` per layer (slot b's
        position p at row b * max_len + p), read in place by SDPA as a strided [B, Hkv, L, D] view.
        ``marks``: a list that gets (start, after the prefill's token, end) time marks — CUDA events on a GPU
        (no sync), perf_counter on a CPU — for the phase times. Returns (tokens [B, new_tokens], log-probs
        [B, new_tokens] FP32)."""
        c = self.config
        B, P = prompts.shape
        Hq, Hkv, D, eps = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps
        dev = prompts.device
        ml = P + new_tokens
        ks = [torch.zeros(B * ml, Hkv, D, dtype=BF, device=dev) for _ in range(c.num_hidden_layers)]
        vs = [torch.zeros(B * ml, Hkv, D, dtype=BF, device=dev) for _ in range(c.num_hidden_layers)]
        cos, sin = self.rope(ml, dev)
        g = torch.Generator(device=dev).manual_seed(seed)

        def view(t, n):  # [B * ml, Hkv, D] -> [B, Hkv, n, D], positions 0..n-1 of each slot, in place
            return t.view(B, ml, Hkv, D)[:, :n].transpose(1, 2)

        def step(ids, pos0, n):  # ids [B * n] at positions pos0..pos0+n-1 of every slot
            x = F.embedding(ids, self.p("model.embed_tokens.weight"))
            pos = torch.arange(pos0, pos0 + n, device=dev).repeat(B)
            rows = (
                torch.arange(B, device=dev)[:, None] * ml + torch.arange(pos0, pos0 + n, device=dev)[None, :]
            ).reshape(-1)
            for i in range(c.num_hidden_layers):
                h = F.rms_norm(x, (c.hidden_size,), self.p(f"model.layers.{i}.input_layernorm.weight"), eps)
                q, k, v = self._layer_qkv(i, h, pos, cos, sin)
                ks[i].index_copy_(0, rows, k)
                vs[i].index_copy_(0, rows, v)
                a = F.scaled_dot_product_attention(
                    q.view(B, n, Hq, D).transpose(1, 2),
                    view(ks[i], pos0 + n),
                    view(vs[i], pos0 + n),
                    is_causal=n > 1,
                    enable_gqa=True,
                )
                x = self._layer_rest(i, x, a.transpose(1, 2).reshape(B * n, Hq * D))
            x = F.rms_norm(x.view(B, n, -1)[:, -1], (c.hidden_size,), self.p("model.norm.weight"), eps)
            return F.linear(x, self.p("lm_head.weight")).float()

        def sample(logits):
            logp = torch.log_softmax(logits, -1)
            u = torch.rand(logp.shape, generator=g, device=dev).clamp_(1e-20, 1 - 1e-7)
            tok = (logp / temperature - torch.log(-torch.log(u))).argmax(1)
            return tok, logp.gather(1, tok[:, None])[:, 0]

        def mark():
            if marks is None:
                return
            if dev.type == "cuda":
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                marks.append(e)
            else:
                import time

                marks.append(time.perf_counter())

        toks, lps = [], []
        mark()
        tok, lp = sample(step(prompts.reshape(-1), 0, P))
        toks.append(tok)
        lps.append(lp)
        mark()
        for t in range(1, new_tokens):
            tok, lp = sample(step(tok, P + t - 1, 1))
            toks.append(tok)
            lps.append(lp)
        mark()
        return torch.stack(toks, 1), torch.stack(lps, 1)
