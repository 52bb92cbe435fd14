"""Negative controls: the project's own deliberately variant kernels, one per invariance family.

A gate that can only come out green proves nothing. Each control here is the ``cpu`` family with
*one* node replaced by a variant that breaks exactly one invariance family the gates claim — a
K-blocking chosen by M, dW reduced in batch order, pad rows leaked into dW, … — and nothing else:
the variant stays within the accuracy thresholds and records the declared kernel id, so only the
invariance cells that judge its family can turn red, and the tests assert exactly which. One control
breaks accuracy instead: ``variant_logprob_lse_shift`` moves every log-prob by 1e-4, inside the BF16
row and outside the logprob class's FP64-reference row, and stays invariant.

Why the failure is certain on every host: a control is built from the cpu kernels, whose bits are
the same on every x86-64 ISA path (scalar, AVX2, AVX-512; tested in kernels-cpu), and it is run on
the gates' fixed, seeded inputs. Its outputs are therefore the same bits on every machine, and so
is the verdict. torch's own kernels give no such guarantee (on AMX hosts its BF16 GEMM is
row-invariant), which is why ``torch_default`` is only an extra control, never the proof.

Use: ``ws1_ops.use_candidate("<name>")``; gates take ``--candidate <name>``. Every call of a
variant kernel is recorded with ``variant=<name>`` (``Recorder.summary()[op]["variant"]``), so a
control's evidence can never pass for the kernel's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import registry
from ..registry import Kernel

BF16 = torch.bfloat16


@dataclass(frozen=True)
class Control:
    """One negative control: ``family``'s kernels with ``overrides`` (node -> variant builder)."""

    name: str
    breaks: str  # the invariance family it breaks: "batch_size", "permutation", "padding", ...; or
    # "fp64_accuracy": the logprob class's accuracy row against its FP64 reference
    why: str  # what the variant does differently, in one line
    overrides: dict[str, Callable[[Kernel], Kernel]]
    family: str = "cpu"
    # the families the variant can be built on: those whose builders only wrap the base kernel's own fwd/bwd
    # (attention's rotated key order, the lse shift) work on every family, so a GPU host's gate runs the
    # control on its profile's kernels; the GEMM/norm variants call the cpu ops directly (cpu only)
    families: tuple[str, ...] = ("cpu",)

    def kernels(self, family: str | None = None) -> dict[str, Kernel]:
        """node -> the variant kernel (same op, family and kernel id; ``variant`` set), on ``family``'s kernels."""
        base = registry.kernels_for(family or self.family)
        out = {}
        for node, build in self.overrides.items():
            k = build(base[node])
            out[node] = dataclasses.replace(k, variant=self.name)
        return out


def _cpu():
    return torch.ops.ws1_cpu


# ---- batch size (M) ---------------------------------------------------------------------------------

# The variant's "large-M path" kicks in above this many rows; the gates' canonical batches and their
# small-M layouts sit on both sides of it.
M_SPLIT_ABOVE = 8


def _split_k(a: torch.Tensor, b: torch.Tensor, parts: int) -> torch.Tensor:
    """FP32 ``a @ b.T`` (a [M, K], b [N, K]) with K cut into ``parts`` consecutive blocks: each block is
    the serial-FMA cpu gemm from +0, kept in a BF16 workspace (split-K with BF16 partials), the
    partials then added left to right in FP32. An FP32-only regrouping would hide behind the final
    BF16 rounding on most elements; the BF16 partials make most output elements differ by an ulp or
    so — within accuracy, visibly other bits."""
    cuts = torch.linspace(0, a.shape[1], parts + 1, device="cpu").round().long().tolist()
    out = None
    for lo, hi in zip(cuts, cuts[1:]):
        part = _cpu().gemm(a[:, lo:hi].contiguous(), b[:, lo:hi], True).to(BF16).float()
        out = part if out is None else out + part
    return out


def _gemm_k_blocked_by_m(k: Kernel) -> Kernel:
    """det_gemm whose K loop is split in two halves above M_SPLIT_ABOVE rows (see _split_k: BF16
    partials added at the end): the classic split-K "large-batch path". Its backward dx = dy @ W splits its N
    reduction the same way, so the gradient cells of the batch-size transforms see it too."""

    def fwd(x, w):
        return k.fwd(x, w) if x.shape[0] <= M_SPLIT_ABOVE else _split_k(x, w, 2).to(BF16)

    def bwd(dy, x, w):
        return k.bwd(dy, x, w) if dy.shape[0] <= M_SPLIT_ABOVE else _split_k(dy, w.t(), 2)

    return dataclasses.replace(k, fwd=fwd, bwd=bwd)


# ---- thread count -----------------------------------------------------------------------------------


def _gemm_split_by_threads(k: Kernel) -> Kernel:
    """det_gemm (and its dx) splitting the reduction into torch.get_num_threads() blocks — one partial
    sum per thread, added in thread order — the classic "parallel reduction". One thread is the serial
    kernel; any other count groups the same products differently. The gates' thread transforms run 1
    thread and the canonical count + 1, so at least one of them differs from the canonical run on
    every host (a 1-core host included)."""

    def fwd(x, w):
        t = torch.get_num_threads()
        return k.fwd(x, w) if t == 1 else _split_k(x, w, t).to(BF16)

    def bwd(dy, x, w):
        t = torch.get_num_threads()
        return k.bwd(dy, x, w) if t == 1 else _split_k(dy, w.t(), t)

    return dataclasses.replace(k, fwd=fwd, bwd=bwd)


# ---- row position -----------------------------------------------------------------------------------


def _rms_norm_by_row_parity(k: Kernel) -> Kernel:
    """rms_norm whose rows at odd batch positions take another path: rstd kept in BF16 (a low-precision
    row path), y = (x * rstd) * w from it. rstd moves by up to 2^-9 relative, so most y elements of
    those rows change by an ulp (dx and dweight follow through rstd); rows at even positions are the
    kernel's own."""

    def fwd(x, w, eps):
        y, rstd = k.fwd(x, w, eps)
        if x.shape[0] > 1:
            r = rstd[1::2].to(BF16).float()
            rows = x[1::2].float() * r.reshape(-1, 1)  # the kernel's two FP32 multiplies, then RNE
            y, rstd = y.clone(), rstd.clone()
            y[1::2] = (rows * w.float()).to(BF16)
            rstd[1::2] = r
        return y, rstd

    return dataclasses.replace(k, fwd=fwd)


# ---- permutation: the canonical row order of parameter gradients ----------------------------------


def _gemm_dw_batch_order(k: Kernel) -> Kernel:
    """det_gemm's dW reduced over its rows in batch order (padding still dropped), ignoring the
    canonical ``perm``: a permuted batch, or calls whose rows arrive out of key order (one call per
    chunk inside canonical_grads), sums the same rows in another order."""

    def param_grad(dy, x, perm):
        return k.param_grad(dy, x, torch.sort(perm).values)

    return dataclasses.replace(k, param_grad=param_grad)


# ---- padding: pad rows (logical key -1) leaked into a parameter gradient ----------------------------


def _gemm_dw_pad_leak(k: Kernel) -> Kernel:
    """det_gemm's dW reduced over every row of the call, padding included: the canonical rows first
    (in ``perm``'s order), then the rows ``perm`` dropped (key -1), in batch order — a kernel that
    forgot the pad mask. With a garbage gradient on the pad rows (the gates give them one) any
    layout with other padding than the canonical's sums other rows; without pad rows it is the
    kernel's own dW."""

    def param_grad(dy, x, perm):
        pad = torch.ones(x.shape[0], dtype=torch.bool, device=perm.device)
        pad[perm] = False
        return k.param_grad(dy, x, torch.cat([perm, torch.nonzero(pad).flatten()]))

    return dataclasses.replace(k, param_grad=param_grad)


# ---- attention: packing, chunking, decode vs prefill ------------------------------------------------


ATTN_TILE = 32  # the cpu kernel's key tile (kernels-cpu/csrc/attention.cpp, kKT)


def _attn_rotating(k: Kernel, start_of: Callable[[int, int, torch.Tensor], int]) -> Kernel:
    """attention where a sequence's queries may reduce their keys starting at key ``s`` instead of
    key 0: keys s..p first (tiles aligned to s), then 0..s-1, with the same online softmax.
    ``start_of(k0, nq, q_pos_of_sequence)`` gives s for one sequence of the call (k0: where its keys
    start in the packed buffer; 0: the kernel's own order). Built from the cpu kernel itself: each
    rotated query is run as its own one-query sequence over its keys gathered in the rotated order
    (q_pos = the last key), so the order of the softmax reduction changes; the rotated path's output
    is then rounded up by one BF16 ulp (its own epilogue), because a regrouped FP32 reduction alone
    would hide behind the BF16 rounding on most elements. Within accuracy (1 ulp), every element of a
    rotated row differs. The backward is the kernel's, from this forward's out and lse (Delta =
    dO . out moves with out, so dq, dk, dv move too)."""

    def fwd(q, kk, v, cu_q, cu_k, q_pos, scale):
        out, lse = k.fwd(q, kk, v, cu_q, cu_k, q_pos, scale)
        rows, keys, lens = [], [], []
        for b in range(cu_q.numel() - 1):
            qs, qe, k0 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b])
            if qe == qs:
                continue
            s = start_of(k0, qe - qs, q_pos[qs:qe])
            for i in range(qs, qe):
                p = int(q_pos[i])
                if 0 < s <= p:
                    rows.append(i)
                    keys += [torch.arange(k0 + s, k0 + p + 1, device="cpu"), torch.arange(k0, k0 + s, device="cpu")]
                    lens.append(p + 1)
        if not rows:
            return out, lse
        idx, kidx = torch.tensor(rows, device="cpu"), torch.cat(keys).to(kk.device)
        cu = torch.tensor([0, *lens], device="cpu").cumsum(0).to(cu_q.device)
        o, ls = k.fwd(
            q.index_select(0, idx.to(q.device)),
            kk.index_select(0, kidx),
            v.index_select(0, kidx),
            torch.arange(len(rows) + 1, device=cu_q.device),
            cu,
            (cu[1:] - cu[:-1] - 1).to(q_pos.device),
            scale,
        )
        out, lse = out.clone(), lse.clone()
        out[idx] = torch.nextafter(o, torch.full_like(o, float("inf")))
        lse[idx] = ls
        return out, lse

    return dataclasses.replace(k, fwd=fwd)


def _attn_tiles_from_buffer(k: Kernel) -> Kernel:
    """packing: key tiles aligned to row 0 of the packed buffer instead of the sequence's first key —
    a sequence starting at buffer row k0 reduces from its first tile boundary (32 - k0 % 32) % 32."""
    return _attn_rotating(k, lambda k0, nq, pos: (-k0) % ATTN_TILE)


def _attn_tiles_from_chunk(k: Kernel) -> Kernel:
    """chunking: a sequence whose queries in this call start at position c0 > 0 (a prefill chunk of
    more than one query) reduces its keys from c0 — tiles aligned to the chunk start."""
    return _attn_rotating(k, lambda k0, nq, pos: int(pos.min()) if nq > 1 else 0)


def _attn_decode_path(k: Kernel) -> Kernel:
    """decode vs prefill: a sequence with a single query at p > 0 (a decode step) takes its own key
    first, then keys 0..p-1 — a "decode kernel" with another reduction order than prefill's."""
    return _attn_rotating(k, lambda k0, nq, pos: int(pos[0]) if nq == 1 else 0)


# ---- accuracy at FP32 scale: the logprob class against its FP64 reference ---------------------------

LSE_SHIFT = 1e-4  # what the variant adds to lse: 2x the contract's FP64-reference atol (5e-5) for the class


def _logprob_lse_shift(k: Kernel) -> Kernel:
    """logprob / batch_invariant_logp whose lse is ``LSE_SHIFT`` too large in every row: lse' = lse + 1e-4
    (FP32), then the kernel's own subtraction x - lse' (one FP32 rounding), so every log-prob is ~1e-4
    too small (1e-4 within an ulp of lse and of the output: ~2e-6 at V 151936). The accuracy control
    of the class: red by the contract's FP64-reference row (atol 5e-5), green by its BF16 row (atol
    6e-2), which cannot see an FP32-level error. Every row is shifted by a row-local FP32 add, so
    the variant is as invariant as the kernel (no invariance cell turns red) and the logprob ==
    batch_invariant_logp[t] identity still holds bit for bit. Its backward is the kernel's, from the
    shifted lse (logprob) or the shifted output (batch_invariant_logp): the gradient of this wrong
    log-softmax, so the gradient accuracy cells may turn red too."""

    def fwd(logits, *targets):
        _, lse = k.fwd(logits, *targets)
        lse = lse + LSE_SHIFT
        x = logits.gather(1, targets[0][:, None]).squeeze(1) if targets else logits
        return (x - lse if targets else x - lse[:, None]), lse

    return dataclasses.replace(k, fwd=fwd)


ALL_FAMILIES = ("cpu", "triton", "cuda", "ascend")

CONTROLS: dict[str, Control] = {
    c.name: c
    for c in (
        Control(
            "variant_m_split_k",
            "batch_size",
            "det_gemm splits K in two halves when M > 8 (a large-batch path)",
            {"det_gemm": _gemm_k_blocked_by_m},
        ),
        Control(
            "variant_threads_split",
            "thread_count",
            "det_gemm splits K into torch.get_num_threads() partial sums",
            {"det_gemm": _gemm_split_by_threads},
        ),
        Control(
            "variant_row_parity",
            "row_position",
            "rms_norm keeps rstd in BF16 for rows at odd batch positions",
            {"rms_norm": _rms_norm_by_row_parity},
        ),
        Control(
            "variant_dw_batch_order",
            "permutation",
            "det_gemm reduces dW over rows in batch order, not canonical",
            {"det_gemm": _gemm_dw_batch_order},
        ),
        Control(
            "variant_pad_leak_dw",
            "padding",
            "det_gemm reduces dW over every row, the pad rows (key -1) included",
            {"det_gemm": _gemm_dw_pad_leak},
        ),
        Control(
            "variant_attn_pack_tiles",
            "packing",
            "attention key tiles aligned to the packed buffer's row 0",
            {"attention": _attn_tiles_from_buffer},
            families=ALL_FAMILIES,
        ),
        Control(
            "variant_attn_chunk_tiles",
            "chunking",
            "attention key tiles aligned to the chunk start, not key 0",
            {"attention": _attn_tiles_from_chunk},
            families=ALL_FAMILIES,
        ),
        Control(
            "variant_attn_decode_order",
            "decode_prefill",
            "attention reduces a one-query (decode) step in another order",
            {"attention": _attn_decode_path},
            families=ALL_FAMILIES,
        ),
        Control(
            "variant_logprob_lse_shift",
            "fp64_accuracy",
            "logprob and batch_invariant_logp add 1e-4 to every row's lse",
            {"logprob": _logprob_lse_shift, "batch_invariant_logp": _logprob_lse_shift},
            families=ALL_FAMILIES,
        ),
    )
}
