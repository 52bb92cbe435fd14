"""C10 chain gate: the whole model, every cell of docs/design.md §5, train/infer parity, the FP32 reference,
the C6 sweep, observed node kinds, and first_drift.

    python -m ws1_matrix c10 cpu_bf16 [--model tiny|tiny-tied|qwen3-8b-L2|qwen3-8b|...] [--weights DIR [--formal]]
    python -m ws1_matrix c10 cpu_bf16 --candidate variant_attn_decode_order   # a negative control: must be red

Cells, each compared with the canonical ``BN/full`` (the 4 samples right-padded to 20) by logical
key: ``B1/full`` (four B=1 runs, losses summed, one backward), ``BN/chunked``, ``B1/chunked``
(chunk 7 in absolute positions), ``padded_left``, ``padded_right`` (padded to 24), ``permuted``
(order [2, 0, 3, 1]), ``packed``. Per cell: the selected log-probs (bitwise, with the three
aggregates), the loss, a backward, and every parameter gradient bitwise. Then train/infer parity
(teacher forcing vs prompt prefill + stateful decode, B=4 and B=1), the FP32 reference cell
(forward and gradient accuracy), the six-case decode sweep of C6, every required node observed with
its declared kernel, and ``first_drift`` — the first (layer, node) whose per-token bits differ
between a cell and the canonical run (null when none does).

Modes: ``synthetic`` (seeded weights, any preset), ``checkpoint`` (``--weights``), ``formal``
(``--formal``: the pinned Qwen3-8B whose content hash the manifest records; refused while the hash
is not pinned). A synthetic run never claims the formal gate.

Gradient comparison: full tensors (max |Δ| and the first differing element named) when the
gradients fit in memory beside the model, else per-parameter sha256 digests of the raw bits
(``--grad-compare``; the gradient-accuracy cell then reads the canonical gradients back one at a
time from a temporary file); the evidence says which.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import resource
import time
from dataclasses import dataclass, field

import torch

import ws1_accel
import ws1_ops
from ws1_contract import Cell, Comparison, aggregates, bitwise, gate_main, judged, within_tolerance
from ws1_contract.compare import accuracy
from ws1_contract.progress import Progress
from ws1_qwen3.model import REFERENCE
from ws1_qwen3.teacher import fixture_samples, teacher_forcing

from . import parity
from .cells import comparison_cell, parity_cell
from .drift import NODE_ORDER, drift_map, first_drift, tracing
from .kv_ops import c6_operator_cases
from .model_nodes import node_cells, silu_identity
from .modelkit import attach_provenance, build_model, log

CANONICAL = "BN/full"
PERMUTATION = (2, 0, 3, 1)
DIGEST_ABOVE_BYTES = 6 << 30  # host memory: gradients larger than this are compared by digest
DEVICE_HEADROOM = 2.5  # device memory: full tensors when this many gradient sets fit in what is free


def grad_compare_mode(grad_bytes: int, dev: torch.device) -> str:
    """'full' (tensors kept and compared where they live) or 'digest' (sha256 of the raw bits on the host).

    On a GPU the canonical gradients stay on the device beside one cell's (Qwen3-8B: 2 x 16.4 GB of BF16
    gradients beside a 16.4 GB model on a 141 GB H200) and are compared there; digests would copy and hash
    16 GB per cell on the host. On the CPU, host memory is the limit (DIGEST_ABOVE_BYTES)."""
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return "full" if DEVICE_HEADROOM * grad_bytes < free else "digest"
    return "digest" if grad_bytes > DIGEST_ABOVE_BYTES else "full"


class _CellMeter:
    """Wall time and peak memory of one phase: the device's peak allocation (CUDA) or the process's peak
    RSS (CPU, which only grows) — printed per cell and kept in the cell's evidence."""

    def __init__(self, dev: torch.device):
        self.dev, self.t = dev, time.perf_counter()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)

    def read(self) -> dict:
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
            peak = {"peak_device_gib": round(torch.cuda.max_memory_allocated(self.dev) / 2**30, 2)}
        else:
            peak = {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}
        return {"seconds": round(time.perf_counter() - self.t, 2), **peak}

    @staticmethod
    def text(m: dict) -> str:
        mem = (
            f"peak device {m['peak_device_gib']:.1f} GiB"
            if "peak_device_gib" in m
            else f"peak RSS {m['peak_rss_gib']:.1f} GiB"
        )
        return f"{m['seconds']:.1f}s, {mem}"


def cell_plans(samples) -> dict[str, tuple[list, dict]]:
    """cell -> (teacher-forcing calls, each a list of samples; layout kwargs). B1 cells: one call per sample."""
    return {
        CANONICAL: ([samples], dict(layout="padded_right", padded_length=20)),
        "B1/full": ([[s] for s in samples], dict(layout="packed")),
        "BN/chunked": ([samples], dict(layout="padded_right", padded_length=20, chunk=7)),
        "B1/chunked": ([[s] for s in samples], dict(layout="packed", chunk=7)),
        "padded_left": ([samples], dict(layout="padded_left", padded_length=20)),
        "padded_right": ([samples], dict(layout="padded_right", padded_length=24)),
        "permuted": ([[samples[i] for i in PERMUTATION]], dict(layout="padded_right", padded_length=20)),
        "packed": ([samples], dict(layout="packed")),
    }


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()).hexdigest()


def run_cell(model, calls, kw, n_active: int):
    """One cell: forward (traced), loss, one backward in canonical_grads. Returns (logp [n] by key,
    active [n], loss, {param: grad}, trace)."""
    model.zero_grad(set_to_none=True)
    with tracing(model) as tr:
        outs = [teacher_forcing(model, c, n_active=n_active, grad=True, **kw) for c in calls]
    loss = sum(o.loss for o in outs)
    if model.profile == REFERENCE:
        loss.backward()
    else:
        with ws1_ops.canonical_grads():
            loss.backward()
    keys = torch.cat([o.keys for o in outs])
    order = torch.argsort(keys)
    logp = torch.cat([o.logp.detach() for o in outs]).index_select(0, order.to(outs[0].logp.device))
    active = torch.cat([o.active for o in outs]).index_select(0, order)
    grads = {n: p.grad for n, p in model.named_parameters()}
    return logp, active, loss.detach(), grads, tr


def param_op(name: str, tied: bool = False) -> str:
    """The chain node whose threshold row judges a parameter's gradient. ``tied``: the model ties its embeddings,
    so the table's gradient is lm_head's dW (a GEMM reduction over every head row) plus the embedding's per-id
    sums (ws1_ops.combine): judged by lm_head's row (class reduction), not the embedding's (elementwise)."""
    if name.endswith("embed_tokens.weight"):
        return "lm_head" if tied else "embedding"
    if name == "lm_head.weight":
        return "lm_head"
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return "qk_norm"
    if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
        return "rms_norm"
    return "det_gemm"


def compare_grads(grads, canon, mode: str, cell: str) -> Comparison:
    """Every parameter gradient bitwise equal to the canonical cell's ('full' tensors or 'digest')."""
    n, bad, first = len(canon), [], None
    for name, ref in canon.items():
        g = grads.get(name)
        if g is None:
            bad.append(name)
            first = first or f"{name}: no gradient"
            continue
        if mode == "digest":
            if digest(g) != ref:
                bad.append(name)
                first = first or f"{name}: raw-bit digest differs"
        else:
            c = bitwise(g, ref, name)
            if not c.passed:
                bad.append(name)
                first = first or c.detail
    ok = not bad
    detail = f"{cell}: {n - len(bad)} of {n} parameter gradients bitwise" + ("" if ok else f"; first: {first}")
    return Comparison(ok, detail, n_total=n, n_diff=len(bad), first_diff={"parameters": bad[:10]} if bad else None)


@dataclass
class _Chain:
    """What the phases of one C10 run share: the gate run, the model, the plans, the canonical cell's
    results (log-probs, active mask, loss, trace, gradients or their digests), and the drifts found."""

    run: object
    model: object
    samples: list
    plans: dict
    n_active: int
    gmode: str
    dev: torch.device
    bar: Progress
    summary: dict
    drifts: list[dict] = field(default_factory=list)
    c_logp: torch.Tensor | None = None
    c_active: torch.Tensor | None = None
    c_loss: torch.Tensor | None = None
    c_trace: object = None
    canon: dict = field(default_factory=dict)
    spill: str | None = None

    def drift(self, name: str, trace) -> dict | None:
        """The first drift of ``trace`` against the canonical run, kept (with its map) for the report."""
        fd = first_drift(trace, self.c_trace)
        if fd:
            self.drifts.append({"cell": name, **fd, "map": drift_map(trace, self.c_trace), "nodes": list(NODE_ORDER)})
        return fd


def _start(run, args):
    """The model the gate judges, or None when the formal mode's weights are not the pinned ones (red)."""
    manifest = run.manifest
    mode = "formal" if args.formal else ("checkpoint" if args.weights else "synthetic")
    run.extra["mode"] = mode
    if args.formal:
        pinned = manifest.model.formal_weights_sha256
        if not pinned or not args.weights:
            run.add(
                judged(
                    "formal-weights",
                    "chain_gate",
                    False,
                    "formal mode needs --weights and the manifest's pinned "
                    f"formal_weights_sha256 (pinned: {pinned!r}); nothing was run",
                )
            )
            return None, mode
    model = build_model(args.model, run.profile, weights=args.weights)
    if args.formal and model.weights_sha256 != manifest.model.formal_weights_sha256:
        run.add(
            judged(
                "formal-weights",
                "chain_gate",
                False,
                f"weights hash {model.weights_sha256} is not the pinned {manifest.model.formal_weights_sha256}",
            )
        )
        return None, mode
    if args.candidate:
        model.profile = args.candidate  # a negative control's kernels: not a profile
        if args.candidate != "torch_default":  # built on this profile's kernels (a GPU host's control runs on its GPU)
            from ws1_ops.backends.controls import CONTROLS

            family = ws1_accel.family_of(run.profile)
            if family not in CONTROLS[args.candidate].families:
                run.add(
                    judged(
                        "candidate",
                        "chain_gate",
                        False,
                        f"control {args.candidate} cannot be built on the {family} kernels "
                        f"of {run.profile} (only {'/'.join(CONTROLS[args.candidate].families)}); nothing was run",
                    )
                )
                return None, mode
            model.candidate_family = family
    return model, mode


def _canonical_cell(ch: _Chain) -> None:
    ch.bar.doing(CANONICAL)
    meter = _CellMeter(ch.dev)
    ch.c_logp, ch.c_active, ch.c_loss, c_grads, ch.c_trace = run_cell(ch.model, *ch.plans[CANONICAL], ch.n_active)
    # no copy needed: the next cell's zero_grad(set_to_none) gives the parameters new tensors
    ch.canon = {n: (digest(g) if ch.gmode == "digest" else g.detach()) for n, g in c_grads.items() if g is not None}
    if ch.gmode == "digest":  # the gradient-accuracy cell reads them back one at a time from disk
        ch.spill = _spill(c_grads)
    finite = bool(torch.isfinite(ch.c_logp).all() and torch.isfinite(ch.c_loss))
    m = meter.read()
    ch.run.add(
        judged(
            f"cell/{CANONICAL}",
            "chain_gate",
            finite and len(ch.canon) == ch.summary["parameters"],
            f"canonical: loss {float(ch.c_loss):.6f}, {int(ch.c_active.sum())} active tokens, "
            f"{len(ch.canon)} parameter gradients",
            extra={"loss": float(ch.c_loss), **m},
        )
    )
    log(f"{CANONICAL} in {_CellMeter.text(m)}")
    ch.bar.update()


def _layout_cells(ch: _Chain) -> None:
    """Every other cell of docs/design.md §5 against the canonical: log-probs and every gradient, bitwise."""
    contract, grad_counts = ch.run.contract, []
    for name, (calls, kw) in ch.plans.items():
        if name == CANONICAL:
            continue
        ch.bar.doing(name)
        meter = _CellMeter(ch.dev)
        logp, active, loss, grads, trace = run_cell(ch.model, calls, kw, ch.n_active)
        agg = aggregates(logp, ch.c_logp, active, contract.aggregate_thresholds("bfloat16"), contract.clip_interval)
        fd = ch.drift(name, trace)
        cmp = bitwise(logp, ch.c_logp, f"{name} log-probs vs {CANONICAL}")
        ch.run.add(
            comparison_cell(
                f"cell/{name}/logp",
                "forward_invariance",
                cmp,
                lhs="transformed_config",
                rhs="canonical_config",
                loss=float(loss),
                aggregates={
                    "max_abs_dlogp": agg.max_abs_dlogp,
                    "approx_kl0": agg.approx_kl0,
                    "clipfrac0": agg.clipfrac0,
                },
                bitwise_equal=agg.bitwise_equal,
                tokens_different=agg.tokens_different,
                first_drift=fd,
            )
        )
        g = compare_grads(grads, ch.canon, ch.gmode, name)
        grads = None  # free this cell's gradients before the next cell runs
        grad_counts.append(g.n_total - g.n_diff)
        m = meter.read()
        ch.run.add(
            comparison_cell(
                f"cell/{name}/grads",
                "gradient_invariance",
                g,
                lhs="transformed_config",
                rhs="canonical_config",
                grad_compare=ch.gmode,
                **m,
            )
        )
        log(
            f"{name}: logp {'bitwise' if cmp.passed else 'DIFFERS'}, {g.n_total - g.n_diff}/{g.n_total} grads bitwise "
            f"({_CellMeter.text(m)})"
        )
        ch.bar.update()
    ch.summary["gradient_invariance"] = {
        "min_bitwise": min(grad_counts),
        "of": len(ch.canon),
        "cells": len(grad_counts),
    }
    ch.model.zero_grad(set_to_none=True)


def _train_infer(ch: _Chain) -> None:
    """Teacher forcing's log-probs vs the rollout's (prompt prefill + stateful decode), B=4 and B=1."""
    tf_act = ch.c_logp[ch.c_active]
    worst = 0.0
    for name, together in (("B4", True), ("B1", False)):
        ch.bar.doing(f"parity/{name}")
        meter = _CellMeter(ch.dev)
        with tracing(ch.model) as tr:
            ro = parity.rollout_logp(ch.model, ch.samples, together=together)
        agg = parity.judge(tf_act, ro, ch.run.contract)
        fd = ch.drift(f"parity/{name}", tr)
        worst = max(worst, agg.max_abs_dlogp)
        m = meter.read()
        ch.run.add(parity_cell(f"parity/{name}", agg, parity.LHS, parity.RHS, first_drift=fd, **m))
        log(f"train/infer parity {name}: max|dlogp| {agg.max_abs_dlogp:.3e} ({_CellMeter.text(m)})")
        ch.bar.update()
    ch.summary["train_infer"] = {"max_abs_dlogp": worst, "bitwise": worst == 0.0}


def _decode_sweep(ch: _Chain) -> None:
    """The C6 operator cases on this model's kernels."""
    ch.bar.doing("decode sweep")
    meter = _CellMeter(ch.dev)
    with ch.model.activate():
        sweep = c6_operator_cases(device=ch.dev)
    for o in sweep:
        ch.run.add(
            comparison_cell(f"sweep/{o.name}", "decode_prefill", o, lhs="transformed_config", rhs="canonical_config")
        )
    log(f"decode sweep: {sum(o.passed for o in sweep)}/{len(sweep)} bitwise ({_CellMeter.text(meter.read())})")
    ch.bar.update()


def _observed(ch: _Chain, rec) -> None:
    """Every required node observed running its declared kernel (silu in its identity check)."""
    run, manifest = ch.run, ch.run.manifest
    silu = silu_identity(ch.model, ch.drifts)  # silu runs here, not in the chain: a drift there is named too
    declared = {node: manifest.kernel_id(run.profile, node) for node in manifest.required_nodes}
    for cell in node_cells(rec.summary(), declared, run.contract.family(run.profile), ch.dev.type, silu):
        run.add(
            Cell(
                id=f"observed/{cell.id}",
                judgment=cell.judgment,
                status=cell.status,
                detail=cell.detail,
                extra=cell.extra,
            )
        )


def _reference_cell(ch: _Chain) -> None:
    """The FP32 reference (last: it needs an FP32 copy of the weights, and the BF16 model goes first)."""
    run, contract = ch.run, ch.run.contract
    meter = _CellMeter(ch.dev)
    ref = reference_copy(ch.model)
    cand_grads = ch.canon if ch.gmode == "full" else _Spilled(ch.spill)
    ch.model = None
    gc.collect()
    r_logp, r_active, r_loss, _, _ = run_cell_streaming(
        ref, ch.plans[CANONICAL], ch.n_active, cand_grads, contract, run
    )
    fa = contract.resolve("forward_accuracy", "logprob", "bfloat16")
    cmp = within_tolerance(ch.c_logp, r_logp, fa.atol, fa.rtol, "bf16 chain log-probs vs FP32 reference")
    m = meter.read()
    run.add(
        judged(
            "reference/forward_accuracy",
            "forward_accuracy",
            cmp.passed,
            cmp.detail,
            lhs_role="bf16_candidate",
            rhs_role="fp32_reference",
            thresholds={"atol": fa.atol, "rtol": fa.rtol},
            max_abs_err=cmp.max_abs,
            extra={"loss_candidate": float(ch.c_loss), "loss_reference": float(r_loss), **m},
        )
    )
    log(f"FP32 reference cell ({_CellMeter.text(m)})")


def _verdict(ch: _Chain, rec, t0: float) -> None:
    run, drifts = ch.run, ch.drifts
    fd = drifts[0] if drifts else None
    run.add(
        judged(
            "first_drift",
            "chain_gate",
            fd is None,
            "null: no node's per-token bits differ between any cell and the canonical run"
            if fd is None
            else f"{fd['cell']}: first differing node layer {fd['layer']} {fd['node']} ({fd['tokens_differ']} of "
            f"{fd['tokens']} tokens; first at {fd['first_key']})",
            extra={"first_drift": {k: v for k, v in fd.items() if k != "map"} if fd else None},
        )
    )
    attach_provenance(run, rec)
    summary = ch.summary
    summary["variant"] = {op: s["variant"] for op, s in rec.summary().items() if "variant" in s}  # a control's kernels
    summary.update(
        first_drift={k: v for k, v in fd.items() if k != "map"} if fd else None,
        drift_maps=drifts,
        wall_time_s=round(time.perf_counter() - t0, 1),
        peak_rss_gib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        peak_device_gib=max((c.extra.get("peak_device_gib", 0.0) for c in run.cells), default=0.0)
        if ch.dev.type == "cuda"
        else None,
    )
    run.extra.update(summary)  # beside the gate's own facts (the TF32 switches)


def c10(run, args) -> None:
    """The chain gate: the canonical cell, the layout cells, train/infer parity, the decode sweep and
    the observed nodes (all recorded), then the FP32 reference cell and the verdict."""
    t0 = time.perf_counter()
    model, mode = _start(run, args)
    if model is None:
        return
    samples = fixture_samples(run.manifest)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    dev = ws1_accel.resolve_device(run.profile)
    gmode = args.grad_compare or grad_compare_mode(grad_bytes, dev)
    summary: dict = {
        "mode": mode,
        "model": model.config.name,
        "synthetic": model.synthetic,
        "candidate": args.candidate,
        "grad_compare": gmode,
        "parameters": sum(1 for _ in model.parameters()),
    }
    plans = cell_plans(samples)
    bar = Progress(len(plans) + 3, f"c10_chain_gate {run.profile}", unit="step")  # the cells, 2 parity runs, the sweep
    ch = _Chain(run, model, samples, plans, run.manifest.active_tokens, gmode, dev, bar, summary)
    with ws1_ops.record() as rec, contextlib.closing(bar):
        del model  # the phases hold it (the reference cell drops it)
        _canonical_cell(ch)
        _layout_cells(ch)
        _train_infer(ch)
        _decode_sweep(ch)
        _observed(ch, rec)
    _reference_cell(ch)
    _verdict(ch, rec, t0)


def reference_copy(model):
    """The FP32 reference model: the candidate's own BF16 parameters upcast to FP32 (docs/design.md §3)."""
    from ws1_qwen3.model import Qwen3ForCausalLM

    ref = Qwen3ForCausalLM(model.config, REFERENCE, device=model.device)  # made where it runs (8B: 33 GB FP32)
    with torch.no_grad():
        src = dict(model.named_parameters())
        for name, p in ref.named_parameters():
            p.copy_(src[name].float())
    return ref


def run_cell_streaming(ref, plan, n_active, cand_grads, contract, run):
    """The reference forward + backward, judging each parameter's gradient as soon as it is ready
    (then freeing it), so an FP32 copy of every gradient never has to exist at once."""
    results: list[tuple[str, Comparison]] = []
    names = {id(p): n for n, p in ref.named_parameters()}  # a tied table once, as model.embed_tokens.weight
    tied = ref.config.tie_word_embeddings

    def judge(p):
        name = names[id(p)]
        th = contract.resolve("gradient_accuracy", param_op(name, tied), "bfloat16")
        if name not in cand_grads:  # a gradient the candidate did not produce is red, never skipped
            results.append((name, Comparison(False, f"{name}: the candidate produced no gradient")))
        else:  # atol/rtol elementwise and the contract's tensor-norm rule (rel L2, cosine)
            results.append((name, accuracy(cand_grads[name], p.grad, th, name)))
        p.grad = None

    hooks = [p.register_post_accumulate_grad_hook(judge) for p in ref.parameters()]
    try:
        out = run_cell(ref, *plan, n_active)
    finally:
        for h in hooks:
            h.remove()
    bad = [(n, c) for n, c in results if not c.passed]
    worst = max(results, key=lambda nc: nc[1].max_abs or 0.0)
    rel = max(results, key=lambda nc: -1.0 if nc[1].rel_l2 is None else nc[1].rel_l2)
    cos = min(results, key=lambda nc: 2.0 if nc[1].cosine is None else nc[1].cosine)
    n, want = len(results), len(names)
    ok = not bad and n == want
    detail = (
        f"{n - len(bad)} of {want} parameter gradients within the gradient_accuracy rows (atol/rtol and "
        f"tensor_norm); largest |err| {worst[1].max_abs:.3e} ({worst[0]}), largest rel L2 {rel[1].rel_l2:.3e} "
        f"({rel[0]}), smallest cosine {cos[1].cosine:.9f} ({cos[0]})"
    ) + (f"; first failure: {bad[0][1].detail}" if bad else "")
    run.add(
        judged(
            "reference/gradient_accuracy",
            "gradient_accuracy",
            ok,
            detail,
            lhs_role="bf16_candidate",
            rhs_role="fp32_reference",
            max_abs_err=worst[1].max_abs,
            extra={
                "per_parameter_max_abs": {n: c.max_abs for n, c in results},
                "per_parameter_rel_l2": {n: c.rel_l2 for n, c in results},
                "per_parameter_cosine": {n: c.cosine for n, c in results},
            },
        )
    )
    return out


def _spill(grads: dict) -> str:
    """Write the canonical candidate gradients to a temporary safetensors file (digest mode keeps
    only their digests in memory); the file is removed when read back."""
    import tempfile

    from safetensors.torch import save_file

    fd, path = tempfile.mkstemp(suffix=".safetensors", prefix="ws1-c10-grads-")
    import os

    os.close(fd)
    save_file({n: g.detach().contiguous().cpu() for n, g in grads.items() if g is not None}, path)
    return path


class _Spilled:
    """dict-like view of spilled gradients: one tensor read at a time, the file deleted when done."""

    def __init__(self, path: str):
        from safetensors import safe_open

        self.path, self._f = path, safe_open(path, "pt")
        self._names = set(self._f.keys())

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._f.get_tensor(name)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def __del__(self):
        import os

        try:
            os.unlink(self.path)
        except OSError:
            pass


def add_args(ap) -> None:
    ap.add_argument(
        "--model",
        default="tiny",
        help="preset: tiny (default), tiny-tied (tied embeddings), qwen3-8b-L2, or one of the family "
        "(qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b)",
    )
    ap.add_argument("--weights", default=None, help="an HF-format checkpoint directory instead of synthetic weights")
    ap.add_argument(
        "--formal", action="store_true", help="the formal gate: --weights must hash to the manifest's pinned value"
    )
    ap.add_argument(
        "--candidate",
        default=None,
        choices=list(ws1_ops.candidate_names()),
        help="negative control (not a profile): torch_default (plain PyTorch ops for every node) or one of "
        "the project's variant kernels (ws1_ops.backends.controls); the gate must come out red",
    )
    ap.add_argument(
        "--grad-compare",
        default=None,
        choices=["full", "digest"],
        help="gradient invariance on full tensors or raw-bit digests (default: digest above 6 GiB of gradients)",
    )


def main(argv: list[str]) -> int:
    # a negative control writes its own evidence file: red is its expected outcome
    control = any(a == "--candidate" or a.startswith("--candidate=") for a in argv)
    return gate_main(
        "c10_negative_control" if control else "c10_chain_gate",
        c10,
        argv,
        needs_device=True,
        add_args=add_args,
        description="C10: the chain gate on the whole model",
    )
