"""Padding reaches the kernels: the padded transforms hand the op every row, pad rows included, with a
garbage output gradient on them, so a kernel that leaks pad rows is red (the ``variant_pad_leak_dw``
negative control), and attention's pad rows really are queries of the kernel."""

import dataclasses
import functools

import torch
from small import args, make_run

import ws1_ops
from ws1_matrix import attn
from ws1_matrix import forward_gradient as c34
from ws1_matrix.cases import AttnCase
from ws1_ops import registry

BF16 = torch.bfloat16


def _failed(cell):
    return {t["transform"] for t in cell.extra.get("transforms", []) if not t["passed"]}


def test_pad_leak_control_turns_exactly_the_layouts_with_pad_rows_red(small_env):
    """dW summed over the pad rows too: every transform with filler rows (left/right padding and the
    random positions among fillers) is red, every other transform green."""
    run = make_run("c4_gradient")
    c34.c4_gradient(
        run, args(op=["det_gemm"]), activate=functools.partial(ws1_ops.use_candidate, "variant_pad_leak_dw")
    )
    cells = {c.id: c for c in run.cells}
    for tier in ("short", "primary"):
        inv = cells[f"det_gemm-{tier}-gradient_invariance"]
        assert inv.status == "red" and _failed(inv) == {"padded_left", "padded_right", "random_positions"}, _failed(inv)
        assert inv.extra["kernel"]["variant"] == ["variant_pad_leak_dw"]


def test_attention_padded_transforms_run_the_pad_rows_as_queries():
    """padded_right/left: one call over all B*P rows (not the packed valid rows), the pad rows get a
    nonzero dq/dk/dv from their garbage dO, and the real rows' bits still equal the canonical's."""
    g = torch.Generator().manual_seed(0)
    lengths, P = [11, 16, 13, 19], 20
    seqs = [tuple(torch.randn(n, h, 16, generator=g).to(BF16) for h in (4, 2, 2)) for n in lengths]
    ac = AttnCase(None, "prefill", lengths, seqs, P)
    real = ws1_ops.kernels_for("cpu")["attention"]
    seen = []

    def bwd(*a):
        dq, dk, dv = real.bwd(*a)
        seen.append((a[1].shape[0], dq, dk, dv))
        return dq, dk, dv

    registry._KERNELS[("attention", "cpu")] = dataclasses.replace(real, bwd=bwd)
    try:
        dev = torch.device("cpu")
        douts = attn._douts(ac, 0)
        with ws1_ops.use_profile("cpu_bf16"):
            ref = attn._prefill_run(ac, "canonical", dev, douts, 0)
            for tr in ("padded_right", "padded_left"):
                seen.clear()
                got = attn._prefill_run(ac, tr, dev, douts, 0)
                assert all(c.passed for c in attn._cmp_out(tr, got, ref) + attn._cmp_grads(tr, got, ref)), tr
                ((rows, dq, dk, dv),) = seen
                assert rows == len(lengths) * P, (tr, rows)
                valid = torch.zeros(len(lengths), P, dtype=torch.bool)
                for b, n in enumerate(lengths):
                    valid[b, :n] = True
                pad = ~(valid if tr == "padded_right" else valid.flip(1)).flatten()
                # every pad row's dv is nonzero (its own query attends it); dq, dk vanish where a run's
                # softmax has one key (a run's position 0, a one-row run), not elsewhere
                assert dv[pad].float().abs().amax(dim=(1, 2)).min() > 0, tr
                assert dq[pad].float().abs().amax() > 0 and dk[pad].float().abs().amax() > 0, tr
    finally:
        registry._KERNELS[("attention", "cpu")] = real
