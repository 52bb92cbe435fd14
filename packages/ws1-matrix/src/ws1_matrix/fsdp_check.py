"""FSDP2 on WS1's kernels, on gloo: per-rank log-probs vs one device, gradients run to run and across world sizes.

    python -m ws1_matrix fsdp [PROFILE] [--world 1,2,4] [--models tiny,tiny-tied] [--json]   (nox -s fsdp_check)

For each world size W a process group of W ranks (gloo, spawned here) loads the same seeded checkpoint
as WS1's ``Qwen3ForCausalLM`` and as transformers' ``Qwen3ForCausalLM`` after ``ws1_qwen3.apply_ws1``, each
sharded with ``ws1_dist.shard``. The 8 samples (distinct lengths) are dealt in aligned blocks (``ws1_dist.dp_block``:
rank r takes samples [r·B, (r+1)·B), their global ranks kept as the rows' logical keys). Each step (:data:`STEPS`,
each from the same weights): the rank's log-probs of its completion tokens, the loss ``−Σ logp / n`` with ``n`` the
global token count, the backward inside ``ws1_dist.canonical_grads(model, divide_factor=1, order=...)``. The
reference: one device, no process group, the same loss in the same order.

Cells (raw FP32/BF16 bits):

* ``logp``: every rank's log-probs in every step == the single device's of the same samples;
* ``run_to_run``: the default (``serial``) order's gradients, gathered whole, identical in two runs;
* ``dp1``: at W = 1 the ``serial`` gradients == one device's;
* ``tree_grads``: the parallel-invariant order (``sample_tree``, docs/parallel.md) == one device in that order,
  at every world size;
* ``serial_across_world`` (W > 1, red as required): the default order under the split differs from one device —
  what FSDP alone gives, and the proof that ``tree_grads`` can fail;
* ``control_rank_fold`` (W >= 4, ours, red as required): ``sample_tree`` with the ranks' partials folded in rank
  order instead of the tree; ``control_pg_sum`` (W > 1, shown): the process group's own sum of the partials;
* ``control``: our ``variant_m_split_k`` kernels on the sharded side — its log-probs must differ from the
  profile's on one device (red as required), the proof that the ``logp`` cell can fail; ``control_run_to_run``:
  that variant's step against the serial run's gradients — must differ, the proof ``run_to_run`` can fail.

Exit 0 all judged cells green, 1 a red cell, 2 a bad argument or the profile's device absent.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

from . import gloo_checks

CONTROL = "variant_m_split_k"
N_SAMPLES = 8
KINDS = ("ws1", "hf")


def _samples(vocab: int) -> list:
    """8 seeded samples of distinct lengths (prompt 3–6 tokens, completion 2–9)."""
    import ws1_qwen3

    g = torch.Generator().manual_seed(20261207)
    out = []
    for rank in range(N_SAMPLES):
        n_prompt = 3 + rank % 4
        length = n_prompt + 2 + rank
        tokens = tuple(torch.randint(4, vocab, (length,), generator=g, device="cpu").tolist())
        out.append(ws1_qwen3.Sample(rank, tokens, n_prompt, f"s{rank}"))
    return out


def _load(kind: str, path: str, profile: str):
    import ws1_qwen3

    if kind == "ws1":
        return ws1_qwen3.from_pretrained(path, profile)
    import transformers

    model = transformers.Qwen3ForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    return ws1_qwen3.apply_ws1(model, profile)


def _logprobs(kind: str, model, samples, n_total: int, grad: bool):
    """The samples' completion log-probs {rank: FP32 [n]} and the loss −Σ logp / n_total (global count)."""
    import ws1_qwen3

    if kind == "ws1":
        tf = ws1_qwen3.teacher_forcing(model, samples, layout="packed", grad=grad, n_active=n_total)
        by_rank, o = {}, 0
        for s in sorted(samples, key=lambda s: s.rank):  # tf rows: ascending (rank, position)
            n = s.length - s.n_prompt
            by_rank[s.rank] = tf.logp[o : o + n]
            o += n
        return by_rank, tf.loss
    ids, mask, completion = ws1_qwen3.left_padded(samples)  # as a rollout batch comes
    ranks = torch.tensor([s.rank for s in samples], device="cpu")
    with torch.set_grad_enabled(grad):
        lp = ws1_qwen3.token_logprobs(model, ids, mask, completion_mask=completion, sample_ranks=ranks)
    by_rank = {s.rank: lp[b][completion[b].bool()] for b, s in enumerate(samples)}
    loss = -(lp * completion).sum() / n_total
    return by_rank, loss


def _step(kind: str, model, samples, n_total: int, sharded: bool, order: str = "serial", cross=None):
    """One step's log-probs {rank: FP32 bits} and whole gradients {name: tensor} (collective when sharded)."""
    import ws1_ops

    model.zero_grad(set_to_none=True)
    by_rank, loss = _logprobs(kind, model, samples, n_total, grad=True)
    if sharded:
        import ws1_dist

        with ws1_dist.canonical_grads(model, divide_factor=1.0, order=order, cross_rank=cross):
            loss.backward()
        grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    else:
        with ws1_ops.canonical_grads(order=order):
            loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return {r: v.detach().clone() for r, v in by_rank.items()}, grads


# the sharded steps of one (model, kind) at one world size: name -> (order, cross-rank sum)
STEPS = {
    "serial": ("serial", None),  # the default single-device order, FSDP2-style sum across ranks
    "serial_again": ("serial", None),  # run to run
    "tree": ("sample_tree", None),  # the parallel-invariant order: the tree across ranks too
    "tree_pg_sum": ("sample_tree", "sum"),  # control (third party's order, shown): the process group's sum
    "tree_rank_fold": ("sample_tree", "rank_fold"),  # control (ours): the partials folded in rank order
}


def _worker(rank: int, world: int, port: int, job: dict) -> None:
    """One rank: for each (model, kind), shard and run each of STEPS from the same weights on the rank's block of
    samples (ws1_dist.dp_block); save its log-probs (rank 0: every step's whole gradients)."""
    import torch.distributed as dist

    import ws1_dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out = {}
        for name, path in job["checkpoints"].items():
            samples = _samples(job["vocab"][name])
            mine = [samples[i] for i in ws1_dist.dp_block(len(samples), world, rank)]
            n_total = sum(s.length - s.n_prompt for s in samples)
            for kind in KINDS:
                got = {}
                for step, (order, cross) in STEPS.items():
                    model = ws1_dist.shard(_load(kind, path, job["profile"]))
                    got[step] = _step(kind, model, mine, n_total, True, order, cross)
                # our variant kernels, the same (serial) step: its log-probs and gradients must differ
                ctrl_lp, ctrl_g = _step(kind, ws1_dist.shard(_load(kind, path, CONTROL)), mine, n_total, True)
                out[f"{name}/{kind}"] = {
                    "logp": {step: lp for step, (lp, _g) in got.items()},
                    "control_logp": ctrl_lp,
                    "grads": {step: g for step, (_lp, g) in got.items()} if rank == 0 else None,
                    "control_grads": ctrl_g if rank == 0 else None,
                }
        torch.save(out, Path(job["out"]) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
    )


def _grad_diff(got: dict, ref: dict) -> dict:
    """Elements whose bits differ, max |Δ| and the gradients' own scale, over every parameter."""
    n_diff = sum(int((got[n].view(torch.int16) != ref[n].view(torch.int16)).sum()) for n in got)
    max_d = max(float((got[n].float() - ref[n].float()).abs().max()) for n in got)
    return {
        "elements_differ": n_diff,
        "elements": sum(g.numel() for g in got.values()),
        "max_abs_diff": max_d,
        "max_abs_grad": max(float(g.float().abs().max()) for g in ref.values()),
    }


def run(profile: str, worlds: list[int], models: list[str], progress=None) -> dict:
    """The check at each world size; returns the record (cells and measurements)."""
    import torch.multiprocessing as mp

    import ws1_qwen3

    record = {"profile": profile, "control": CONTROL, "worlds": worlds, "models": models, "cells": []}
    with tempfile.TemporaryDirectory(prefix="ws1-fsdp-") as tmp:
        checkpoints, vocab, reference = {}, {}, {}
        for name in models:
            model = ws1_qwen3.synthetic(name, profile)
            path = str(Path(tmp) / name)
            ws1_qwen3.save_pretrained(model, path)
            checkpoints[name], vocab[name] = path, model.config.vocab_size
            samples = _samples(vocab[name])
            n_total = sum(s.length - s.n_prompt for s in samples)
            for kind in KINDS:  # one device, no process group: the reference, in each order
                for order in ("serial", "sample_tree"):
                    reference[(f"{name}/{kind}", order)] = _step(
                        kind, _load(kind, path, profile), samples, n_total, sharded=False, order=order
                    )
        for world in worlds:
            out = Path(tmp) / f"w{world}"
            out.mkdir()
            job = {"checkpoints": checkpoints, "vocab": vocab, "profile": profile, "out": str(out)}
            mp.spawn(_worker, args=(world, gloo_checks.free_port(), job), nprocs=world, join=True)
            ranks = [torch.load(out / f"rank{r}.pt") for r in range(world)]
            for key in [k for k, order in reference if order == "serial"]:
                ref_lp, serial_ref = reference[(key, "serial")]
                tree_ref = reference[(key, "sample_tree")][1]
                n_tok = sum(v.numel() for v in ref_lp.values())

                def differ(lps: dict, ref_lp=ref_lp) -> int:
                    return sum(int((lps[r].view(torch.int32) != ref_lp[r].view(torch.int32)).sum()) for r in ref_lp)

                logp = {step: {r: v for res in ranks for r, v in res[key]["logp"][step].items()} for step in STEPS}
                ctrl = differ({r: v for res in ranks for r, v in res[key]["control_logp"].items()})
                g = ranks[0][key]["grads"]
                bad_lp = sum(differ(lps) for lps in logp.values())
                r2r = [n for n in g["serial"] if not _bits_equal(g["serial"][n], g["serial_again"][n])]
                ctrl_g = ranks[0][key]["control_grads"]
                ctrl_r2r = [n for n in g["serial"] if not _bits_equal(g["serial"][n], ctrl_g[n])]
                serial = _grad_diff(g["serial"], serial_ref)
                tree = _grad_diff(g["tree"], tree_ref)
                pg = _grad_diff(g["tree_pg_sum"], tree_ref)
                fold = _grad_diff(g["tree_rank_fold"], tree_ref)

                def cell(name, green, detail, place=(world, key), **kw):
                    return {"world": place[0], "model": place[1], "cell": name, "green": green, "detail": detail, **kw}

                def diff_text(d):
                    return (
                        f"vs one device: {d['elements_differ']}/{d['elements']} differ, max |Δ| "
                        f"{d['max_abs_diff']:.3g} (max |g| {d['max_abs_grad']:.3g})"
                    )

                cells = [
                    cell("logp", bad_lp == 0, f"{bad_lp}/{len(STEPS) * n_tok} log-probs differ from one device"),
                    cell(
                        "run_to_run",
                        not r2r,
                        f"{len(r2r)}/{len(g['serial'])} gradients differ between two runs"
                        + (f" ({r2r[0]}...)" if r2r else ""),
                    ),
                    cell(
                        "control",
                        ctrl > 0,
                        f"{CONTROL}: {ctrl}/{n_tok} log-probs differ from the profile on one device",
                        red_required=True,
                    ),
                    # the run-to-run comparison can fail: the same step on our variant kernels is another gradient
                    cell(
                        "control_run_to_run",
                        bool(ctrl_r2r),
                        f"{CONTROL}'s step vs the serial run: {len(ctrl_r2r)}/{len(g['serial'])} gradients differ",
                        red_required=True,
                    ),
                    # the parallel-invariant order: the one device's bits at every world size (judged)
                    cell("tree_grads", tree["elements_differ"] == 0, "sample_tree: " + diff_text(tree), **tree),
                ]
                if world == 1:
                    cells.append(cell("dp1", serial["elements_differ"] == 0, "serial: " + diff_text(serial), **serial))
                else:
                    # the default order under a split: what FSDP alone gives (our own order: a certain difference)
                    cells.append(
                        cell(
                            "serial_across_world",
                            serial["elements_differ"] > 0,
                            "serial (default order) under the split: " + diff_text(serial),
                            red_required=True,
                            **serial,
                        )
                    )
                    # the process group's own sum of the tree's partials: a third party's order, shown, not judged
                    cells.append(
                        cell("control_pg_sum", None, "sample_tree + process-group sum: " + diff_text(pg), **pg)
                    )
                if world >= 4:  # at 2 ranks a left fold IS the tree (a + b)
                    cells.append(
                        cell(
                            "control_rank_fold",
                            fold["elements_differ"] > 0,
                            "sample_tree + partials folded in rank order: " + diff_text(fold),
                            red_required=True,
                            **fold,
                        )
                    )
                record["cells"] += cells
            if progress:
                progress(world)
    judged = [c for c in record["cells"] if c["green"] is not None]
    record["green"] = all(c["green"] for c in judged)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = gloo_checks.parser("fsdp", __doc__, "1,2,4", "world sizes")
    ap.add_argument("--models", default="tiny,tiny-tied", help="presets, comma-separated (default tiny,tiny-tied)")
    args = ap.parse_args(argv)
    worlds = gloo_checks.worlds_or_exit(
        "fsdp", args, lambda w: 1 <= w <= 8, "world sizes must be in 1..8", "fsdp_check"
    )
    if isinstance(worlds, int):
        return worlds
    import ws1_qwen3

    models = args.models.split(",")
    bad = [m for m in models if m not in ws1_qwen3.PRESETS]
    if bad:
        print(f"fsdp: unknown preset {bad[0]!r} (presets: {', '.join(sorted(ws1_qwen3.PRESETS))})", file=sys.stderr)
        return gloo_checks.EXIT_UNAVAILABLE
    record = run(args.profile, worlds, models, progress=lambda w: print(f"  world {w}: done", file=sys.stderr))
    title = f"FSDP2 on gloo, {record['profile']} (control {record['control']})"
    return gloo_checks.finish(args, record, "fsdp_check", gloo_checks.table(title, record, 14, 19))
