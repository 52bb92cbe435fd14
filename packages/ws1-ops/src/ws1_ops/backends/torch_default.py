"""torch_default: plain PyTorch default ops for every node — the gates' negative control.

Not a profile, never chosen by one (only ``use_candidate("torch_default")`` reaches it). It runs
the same dtypes (BF16 execution) through torch's own kernels — ``F.linear``, SDPA, ``log_softmax``
— whose reduction orders follow the batch shape; its weight gradients are ``dy.T @ x`` over the
rows in batch order. A
gate run on it must come out red; if it came out green, the gate could not tell invariant kernels
from ordinary ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import reference
from ..registry import Impl

FAMILY = "torch_default"
BF16 = torch.bfloat16


def _vjp(fn, inputs, grad):
    """Backward by re-running the forward under autograd (plain torch, batch order)."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
        out = fn(*leaves)
        if isinstance(out, tuple):
            out = out[0]
        diff = [t for t in leaves if t.requires_grad]
        grads = torch.autograd.grad(out, diff, grad.to(out.dtype), allow_unused=True)
    it = iter(grads)
    return tuple(next(it) if t.requires_grad else None for t in leaves)


def _emb(ids, w):
    return F.embedding(ids, w)


def _rms(x, w, eps):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * w.float()).to(BF16), rstd.squeeze(-1)


def _gemm(x, w):
    return F.linear(x, w)


def _lm_head(x, w):
    return F.linear(x, w).float()


def _rope(x, pos, theta):
    return reference.rope(x, pos, theta).to(x.dtype)


def _attn(q, k, v, cu_q, cu_k, q_pos, scale):
    outs = []
    group = q.shape[1] // k.shape[1]
    for b in range(cu_q.numel() - 1):
        qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        qb = q[qs:qe].transpose(0, 1)[None]
        kb = k[ks:ke].repeat_interleave(group, 1).transpose(0, 1)[None]
        vb = v[ks:ke].repeat_interleave(group, 1).transpose(0, 1)[None]
        mask = torch.arange(ke - ks, device=q.device)[None, :] <= q_pos[qs:qe][:, None]
        outs.append(F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale)[0].transpose(0, 1))
    out = torch.cat(outs, 0)
    return out, torch.zeros(q.shape[:2], dtype=torch.float32, device=q.device)


def _swiglu(g, u):
    return F.silu(g) * u


def _logprob(logits, t):
    lp = torch.log_softmax(logits, -1)
    return lp.gather(1, t[:, None]).squeeze(1), torch.logsumexp(logits, -1)


def _bilp(logits):
    return torch.log_softmax(logits, -1), torch.logsumexp(logits, -1)


def _rms_bwd(dy, x, w, rstd):
    # rows in batch order, torch's own reductions (mean over H, sum over rows)
    xf, g = x.float(), dy.float() * w.float()
    r = rstd[..., None]
    dx = r * (g - xf * r * r * (g * xf).mean(-1, keepdim=True))
    dw = (dy.float() * xf * r).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


def _gemm_dx(dy, x, w):
    return dy.to(x.dtype) @ w


def _gemm_dw(dy, x, perm):
    return dy.to(x.dtype).t() @ x  # all rows in batch order (perm ignored); torch chooses the split


def _rms_dw(dy, x, rstd, w, perm):
    return (dy.float() * x.float() * rstd[..., None]).reshape(-1, x.shape[-1]).sum(0)


def _emb_dw(dy, ids, V, perm):
    return torch.zeros(V, dy.shape[1], device=dy.device).index_add_(0, ids, dy.float())


def _rope_bwd(dy, pos, theta):
    return _vjp(lambda a: _rope(a, pos, theta), (dy.new_zeros(dy.shape),), dy)[0]


def _attn_bwd(do, q, k, v, o, lse, cu_q, cu_k, q_pos, scale):
    return _vjp(lambda a, b, c: _attn(a, b, c, cu_q, cu_k, q_pos, scale), (q, k, v), do)


# Kernel ids of its own (torch::...): it is no profile's family, so the manifest declares none for it.
KERNELS = {
    "embedding": Impl(_emb, None, _emb_dw, kernel_id="torch::embedding"),
    "rms_norm": Impl(_rms, _rms_bwd, _rms_dw, kernel_id="torch::rms_norm"),
    "qk_norm": Impl(_rms, _rms_bwd, _rms_dw, kernel_id="torch::qk_norm"),
    "det_gemm": Impl(_gemm, _gemm_dx, _gemm_dw, kernel_id="torch::linear"),
    "lm_head": Impl(_lm_head, _gemm_dx, _gemm_dw, kernel_id="torch::linear_fp32_out"),
    "rope": Impl(_rope, _rope_bwd, kernel_id="torch::rope"),
    "attention": Impl(_attn, _attn_bwd, kernel_id="torch::sdpa"),
    "swiglu": Impl(_swiglu, lambda dy, g, u: _vjp(_swiglu, (g, u), dy), kernel_id="torch::silu_mul"),
    "silu": Impl(F.silu, lambda dy, x: _vjp(F.silu, (x,), dy)[0], kernel_id="torch::silu"),
    "logprob": Impl(
        _logprob,
        lambda g, logits, lse, t: _vjp(lambda a: _logprob(a, t), (logits,), g)[0],
        kernel_id="torch::log_softmax_gather",
    ),
    "batch_invariant_logp": Impl(
        _bilp, lambda g, logp: g - logp.exp() * g.sum(-1, keepdim=True), kernel_id="torch::log_softmax"
    ),
}
