"""FP32 reference ops: the candidate's own inputs upcast to FP32, computed entirely in FP32 with
plain PyTorch, output FP32. Autograd-capable, so gradient accuracy compares against
``torch.autograd`` on these. Same names and arguments as the public ops.
"""

from __future__ import annotations

import math

import torch

F32 = torch.float32


def embedding(ids, weight, row_keys=None):
    """[T] int64, [V, H] -> [T, H] FP32."""
    return weight.to(F32)[ids]


def rms_norm(x, weight, eps=1e-6, row_keys=None):
    """[T, H], [H] -> [T, H] FP32."""
    x = x.to(F32)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.to(F32)


def qk_norm(x, weight, eps=1e-6, row_keys=None):
    """[T, n_heads, D], [D] -> [T, n_heads, D] FP32."""
    return rms_norm(x.reshape(-1, x.shape[-1]), weight, eps).reshape(x.shape)


def det_gemm(x, weight, row_keys=None):
    """[M, K], [N, K] -> [M, N] FP32."""
    return x.to(F32) @ weight.to(F32).T


def lm_head(x, weight, row_keys=None):
    """[M, K], [V, K] -> [M, V] FP32."""
    return x.to(F32) @ weight.to(F32).T


def rope_cos_sin(positions, dim, theta):
    """cos, sin [T, dim/2] FP32 for the rotate-half convention (HF's inv_freq formula)."""
    # on the positions' device: a tensor made without a device lands on the default one (the CPU), and
    # the first GPU run died here ("Expected all tensors to be on the same device")
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=positions.device).to(F32) / dim))
    ang = positions.to(F32)[:, None] * inv_freq[None, :]
    return ang.cos(), ang.sin()


def rope(x, positions, theta=1e6):
    """[T, n_heads, D], [T] -> [T, n_heads, D] FP32."""
    x = x.to(F32)
    d = x.shape[-1] // 2
    cos, sin = rope_cos_sin(positions, x.shape[-1], theta)
    cos, sin = cos[:, None, :], sin[:, None, :]
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, scale=None):
    """Causal varlen GQA: [Tq, Hq, D], [Tk, Hkv, D] x2 -> [Tq, Hq, D] FP32 (a loop over sequences)."""
    q, k, v = q.to(F32), k.to(F32), v.to(F32)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[1] // k.shape[1]
    outs = []
    for b in range(cu_seqlens_q.numel() - 1):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        qb = q[qs:qe].transpose(0, 1)  # [Hq, Sq, D]
        kb = k[ks:ke].repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, Sk, D]
        vb = v[ks:ke].repeat_interleave(group, dim=1).transpose(0, 1)
        s = (qb @ kb.transpose(1, 2)) * scale  # [Hq, Sq, Sk]
        allowed = torch.arange(ke - ks, device=q_pos.device)[None, :] <= q_pos[qs:qe][:, None]
        s = s.masked_fill(~allowed[None], float("-inf"))
        outs.append((torch.softmax(s, dim=-1) @ vb).transpose(0, 1))
    return torch.cat(outs, 0) if outs else q.new_zeros(q.shape)


def silu(x):
    return torch.nn.functional.silu(x.to(F32))


def swiglu(gate, up):
    return torch.nn.functional.silu(gate.to(F32)) * up.to(F32)


def batch_invariant_logp(logits, dtype=F32):
    """[T, V] -> [T, V] in ``dtype``: FP32, or float64 for the logprob class's FP64 reference (the
    contract's ``fp64_reference`` row: the ops are FP32 in and out, so an FP32 reference is about as
    far from exact as the kernel it judges)."""
    return torch.log_softmax(logits.to(dtype), dim=-1)


def logprob(logits, targets, dtype=F32):
    """[T, V], [T] int64 -> [T] in ``dtype`` (FP32, or float64: see batch_invariant_logp)."""
    return batch_invariant_logp(logits, dtype).gather(1, targets[:, None]).squeeze(1)


from .ops.pack import pack, unpack  # noqa: E402  (profile-independent: the reference is the op itself)


def _ops() -> dict:
    """node -> its FP32 reference (a function of this module named after the node), for every node of
    the manifest's node table; a node without one is an error naming it."""
    from ws1_contract.manifest import load_manifest

    nodes = load_manifest().ops
    lacking = [n for n in nodes if not callable(globals().get(n))]
    if lacking:
        raise NotImplementedError(
            f"ws1_ops.reference has no FP32 reference for node(s) {lacking} of the manifest's node table"
        )
    return {n: globals()[n] for n in nodes}


def __getattr__(name: str):
    if name == "OPS":
        value = _ops()
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "embedding",
    "rms_norm",
    "qk_norm",
    "det_gemm",
    "lm_head",
    "rope",
    "attention",
    "silu",
    "swiglu",
    "logprob",
    "batch_invariant_logp",
    "pack",
    "unpack",
    "rope_cos_sin",
]  # and OPS (derived, on first use)
