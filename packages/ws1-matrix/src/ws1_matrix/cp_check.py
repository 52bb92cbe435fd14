"""Context parallel on WS1's kernels, on gloo: the same attention output and gradients, and the same log-probs, at
CP 1, 2 and 4 on one long sequence, in the parallel-invariant order.

    python -m ws1_matrix cp [PROFILE] [--world 1,2,4] [--seq 2048] [--json]            (nox -s cp_check)

For each world size W a process group of W ranks (gloo, spawned here) splits one sequence into ``ws1_dist``'s
aligned blocks of 128-position chunks. Two workloads:

* **attention** on seeded q [S, 32, 128], k, v [S, 8, 128] (Qwen3-8B's heads; ``--seq`` S, default 2048) and a
  seeded output gradient: ``ContextParallel.attention`` forward and backward on each rank's block, the blocks
  gathered on rank 0;
* **the model**: tiny's widths with a 4,096-token context, one seeded sequence of S tokens, ``ws1_dist.cp_logprobs``
  (every layer's attention through the CP group).

Cells (raw bits):

* ``cp_out`` / ``cp_dq``: the output and dq at W == one device's ``ws1_ops.attention`` and its backward (the
  default kernel: CP costs the forward nothing in bits), judged;
* ``cp_dkdv``: dk and dv at W == at CP 1 (the chunk tree on one device), judged; ``dkdv_vs_default`` (shown): how
  many of them the tree order changes against the default backward's one serial fold;
* ``cp_logp``: the model's log-probs at W == one device's ``ws1_qwen3.teacher_forcing``, judged;
* ``cp_grads``: training under context parallel — the model sharded by FSDP2 over the CP group, the loss over the
  sequence's log-probs, every weight gradient in ``order="chunk_tree"`` — at W == at CP 1, judged; controls (ours,
  red as required): ``control_grads_serial`` (the default order under the split); ``control_grads_rank_fold``
  (W >= 4, shown: the nodes folded in rank order, a difference few elements keep after the BF16 rounding);
* negative controls, ours, red as required (W >= 2; ``rank_fold`` W >= 4): ``control_ring_out`` — ring attention's
  merge as torch's ``context_parallel`` does it (block outputs merged in ring arrival order) must change the output;
  ``control_serial_split`` — the default backward order under the split (each rank one serial fold, the partials
  summed) must change dk/dv; ``control_rank_fold`` — the ranks' tree nodes folded in rank order must change them.
  ``control_sum`` (shown): the process group's own sum of the nodes; ``control_ring_logp`` (shown): the model with
  the ring merge.

Exit 0 all judged cells green, 1 a red cell, 2 a bad argument or the profile's device absent.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

from . import gloo_checks

HQ, HKV, HEAD_DIM = 32, 8, 128  # Qwen3-8B's attention heads
CROSSES = ("tree", "serial_split", "sum", "rank_fold")
# the model's weight gradients: (canonical_grads order, cross-rank sum) — the CP order, the default order under the
# split (each rank's rows one serial chain, the process group's sum), the CP order's nodes folded in rank order
GRAD_RUNS = (("chunk_tree", "tree"), ("serial", "sum"), ("chunk_tree", "rank_fold"))


def _attention_inputs(seq: int):
    g = torch.Generator().manual_seed(20261207)
    q = torch.randn(seq, HQ, HEAD_DIM, generator=g, device="cpu").bfloat16()
    k = torch.randn(seq, HKV, HEAD_DIM, generator=g, device="cpu").bfloat16()
    v = torch.randn(seq, HKV, HEAD_DIM, generator=g, device="cpu").bfloat16()
    dout = (torch.randn(seq, HQ, HEAD_DIM, generator=g, device="cpu") / 16).bfloat16()
    return q, k, v, dout


def _model_config():
    import ws1_qwen3

    return ws1_qwen3.preset("tiny").replace(max_position_embeddings=4096, name="tiny-long")


def _ids(seq: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(20261208)
    return torch.randint(4, vocab, (seq,), generator=g, device="cpu")


def _worker(rank: int, world: int, port: int, job: dict) -> None:
    import torch.distributed as dist

    import ws1_dist
    import ws1_ops
    import ws1_qwen3

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        seq, profile = job["seq"], job["profile"]
        out = {}
        q, k, v, dout = _attention_inputs(seq)
        with ws1_ops.use_profile(profile, torch.device("cpu")):
            for cross, merge in [(c, "gather") for c in CROSSES] + [("tree", "ring")]:
                if merge == "ring" and world == 1:
                    continue
                cp = ws1_dist.ContextParallel(seq, cross=cross, merge=merge)
                mine = slice(cp.tokens.start, cp.tokens.stop)
                ql, kl, vl = (t[mine].clone().requires_grad_(True) for t in (q, k, v))
                o = cp.attention(ql, kl, vl)
                if merge == "ring":
                    out[("out", "ring")] = cp.gather(o.detach())
                    continue
                o.backward(dout[mine])
                for name, t in (("out", o), ("dq", ql.grad), ("dk", kl.grad), ("dv", vl.grad)):
                    out[(name, cross)] = cp.gather(t.detach())
        model = ws1_qwen3.from_pretrained(job["checkpoint"], profile)
        ids = _ids(seq, model.config.vocab_size)
        for merge in ("gather", "ring") if world > 1 else ("gather",):
            cp = ws1_dist.ContextParallel(seq, merge=merge)
            with torch.no_grad():
                logp = ws1_dist.cp_logprobs(model, ids, cp)
            n = torch.tensor([logp.numel()], device="cpu")
            sizes = [torch.empty_like(n) for _ in range(world)]
            dist.all_gather(sizes, n)
            padded = torch.zeros(int(max(sizes)), dtype=logp.dtype, device="cpu")
            padded[: logp.numel()] = logp
            parts = [torch.empty_like(padded) for _ in range(world)]
            dist.all_gather(parts, padded)
            out[("logp", merge)] = torch.cat([p[: int(s)] for p, s in zip(parts, sizes)])
        # training under context parallel: FSDP2 over the CP group, every weight gradient in the chunk_tree order
        for order, cross in GRAD_RUNS:
            if cross == "rank_fold" and world < 4:
                continue
            model = ws1_qwen3.from_pretrained(job["checkpoint"], profile)
            ws1_dist.shard(model)
            cp = ws1_dist.ContextParallel(seq)
            loss = -ws1_dist.cp_logprobs(model, ids, cp).sum() / (seq - 1)
            with ws1_dist.canonical_grads(model, divide_factor=1.0, order=order, cross_rank=cross):
                loss.backward()
            out[("grads", order, cross)] = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
            del model
        if rank == 0:
            torch.save(out, Path(job["out"]) / "rank0.pt")
    finally:
        dist.destroy_process_group()


def _one_device(profile: str, seq: int, checkpoint: str) -> dict:
    """The default kernels on one device, no CP anywhere: ws1_ops.attention and its backward, teacher forcing."""
    import ws1_ops
    import ws1_qwen3

    q, k, v, dout = _attention_inputs(seq)
    ql, kl, vl = (t.clone().requires_grad_(True) for t in (q, k, v))
    cu = torch.tensor([0, seq], dtype=torch.int64, device="cpu")
    pos = torch.arange(seq, dtype=torch.int64, device="cpu")
    with ws1_ops.use_profile(profile, torch.device("cpu")):
        o = ws1_ops.attention(ql, kl, vl, cu, cu, pos)
        o.backward(dout)
    model = ws1_qwen3.from_pretrained(checkpoint, profile)
    ids = _ids(seq, model.config.vocab_size)
    sample = ws1_qwen3.Sample(0, tuple(ids.tolist()), 1, "long")
    with torch.no_grad():
        tf = ws1_qwen3.teacher_forcing(model, [sample], layout="packed")
    return {"out": o.detach(), "dq": ql.grad, "dk": kl.grad, "dv": vl.grad, "logp": tf.logp.detach()}


def differ(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements whose raw bits differ (BF16 or FP32)."""
    view = torch.int16 if a.dtype == torch.bfloat16 else torch.int32
    return int((a.contiguous().view(view) != b.contiguous().view(view)).sum())


def grads_differ(a: dict, b: dict) -> tuple[int, int]:
    """Elements whose bits differ over every parameter's gradient, and the element count."""
    return sum(differ(a[k], b[k]) for k in b), sum(t.numel() for t in b.values())


def run(profile: str, worlds: list[int], seq: int, progress=None) -> dict:
    import torch.multiprocessing as mp

    import ws1_qwen3

    record = {"profile": profile, "worlds": worlds, "seq": seq, "cells": []}
    results = {}
    with tempfile.TemporaryDirectory(prefix="ws1-cp-") as tmp:
        checkpoint = str(Path(tmp) / "tiny-long")
        ws1_qwen3.save_pretrained(ws1_qwen3.synthetic(_model_config(), profile), checkpoint)
        base = _one_device(profile, seq, checkpoint)
        if progress:
            progress("one device")
        for world in sorted(set(worlds) | {1}):  # CP 1 is the reference of the tree order
            out = Path(tmp) / f"c{world}"
            out.mkdir()
            job = {"checkpoint": checkpoint, "profile": profile, "seq": seq, "out": str(out)}
            mp.spawn(_worker, args=(world, gloo_checks.free_port(), job), nprocs=world, join=True)
            results[world] = torch.load(out / "rank0.pt")
            if progress:
                progress(f"CP {world}")
    ref = results[1]

    def cell(world, model, name, green, detail, **extra):
        record["cells"].append(
            {"world": world, "model": model, "cell": name, "green": green, "detail": detail, **extra}
        )

    for world in worlds:
        got = results[world]
        for name in ("out", "dq"):
            d, n = differ(got[(name, "tree")], base[name]), base[name].numel()
            cell(
                world,
                "attention",
                f"cp_{name}",
                d == 0,
                f"{d}/{n} differ from one device's default kernel",
                differ=d,
                n=n,
            )
        d = differ(got[("dk", "tree")], ref[("dk", "tree")]) + differ(got[("dv", "tree")], ref[("dv", "tree")])
        n = 2 * base["dk"].numel()
        cell(world, "attention", "cp_dkdv", d == 0, f"{d}/{n} of dk, dv differ from CP 1", differ=d, n=n)
        if world == 1:
            dd = differ(got[("dk", "tree")], base["dk"]) + differ(got[("dv", "tree")], base["dv"])
            cell(
                1,
                "attention",
                "dkdv_vs_default",
                None,
                f"the tree order: {dd}/{n} of dk, dv differ from the default backward's serial fold (shown)",
                differ=dd,
                n=n,
            )
        d, n = differ(got[("logp", "gather")], base["logp"]), base["logp"].numel()
        cell(world, "tiny-long", "cp_logp", d == 0, f"{d}/{n} log-probs differ from one device", differ=d, n=n)
        d, n = grads_differ(got[("grads", "chunk_tree", "tree")], ref[("grads", "chunk_tree", "tree")])
        cell(
            world, "tiny-long", "cp_grads", d == 0, f"{d}/{n} weight-gradient elements differ from CP 1", differ=d, n=n
        )
        if world == 1:
            continue
        d, n = grads_differ(got[("grads", "serial", "sum")], ref[("grads", "serial", "sum")])
        cell(
            world,
            "tiny-long",
            "control_grads_serial",
            d > 0,
            f"default order under the split: {d}/{n} differ",
            red_required=True,
            differ=d,
            n=n,
        )
        if world >= 4:
            d, n = grads_differ(got[("grads", "chunk_tree", "rank_fold")], ref[("grads", "chunk_tree", "tree")])
            cell(
                world,
                "tiny-long",
                "control_grads_rank_fold",
                None,
                f"nodes folded in rank order: {d}/{n} differ (shown: few FP32 differences survive the BF16 rounding)",
                differ=d,
                n=n,
            )
        d, n = differ(got[("out", "ring")], base["out"]), base["out"].numel()
        cell(
            world,
            "attention",
            "control_ring_out",
            d > 0,
            f"ring merge (torch's order): {d}/{n} outputs differ",
            red_required=True,
            differ=d,
            n=n,
        )
        for cross in ("serial_split", "rank_fold", "sum"):
            if cross == "rank_fold" and world < 4:
                continue
            against = ref if cross != "serial_split" else {("dk", cross): base["dk"], ("dv", cross): base["dv"]}
            key = cross if cross == "serial_split" else "tree"
            d = differ(got[("dk", cross)], against[("dk", key)]) + differ(got[("dv", cross)], against[("dv", key)])
            n = 2 * base["dk"].numel()
            judged = cross != "sum"
            cell(
                world,
                "attention",
                f"control_{cross}",
                (d > 0) if judged else None,
                f"{d}/{n} of dk, dv differ" + ("" if judged else " (shown)"),
                differ=d,
                n=n,
                **({"red_required": True} if judged else {}),
            )
        d, n = differ(got[("logp", "ring")], base["logp"]), base["logp"].numel()
        cell(world, "tiny-long", "control_ring_logp", None, f"{d}/{n} log-probs differ (shown)", differ=d, n=n)
    judged = [c for c in record["cells"] if c["green"] is not None]
    record["green"] = bool(judged) and all(c["green"] for c in judged)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = gloo_checks.parser("cp", __doc__, "1,2,4", "CP degrees")
    ap.add_argument("--seq", type=int, default=2048, help="the sequence's length (default 2048; at most 4096)")
    args = ap.parse_args(argv)
    if not 128 <= args.seq <= 4096:
        print(f"cp: --seq must be in [128, 4096], got {args.seq}", file=sys.stderr)
        return gloo_checks.EXIT_UNAVAILABLE
    chunks = -(-args.seq // 128)
    worlds = gloo_checks.worlds_or_exit(
        "cp", args, lambda w: 1 <= w <= chunks, f"CP degrees must be in [1, {chunks}] (128-token chunks)", "cp_check"
    )
    if isinstance(worlds, int):
        return worlds
    record = run(args.profile, worlds, args.seq, progress=lambda w: print(f"  {w}: done", file=sys.stderr))
    title = f"Context parallel on gloo, {record['profile']}, {args.seq} tokens (the parallel-invariant order)"
    return gloo_checks.finish(args, record, "cp_check", gloo_checks.table(title, record, 10, 21))
