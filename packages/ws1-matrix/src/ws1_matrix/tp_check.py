"""Tensor parallel on WS1's kernels, on gloo: the same log-probs at TP 1, 2, 4 and 8 in the parallel-invariant order.

    python -m ws1_matrix tp [PROFILE] [--world 1,2,4,8] [--json]                      (nox -s tp_check)

For each world size T a process group of T ranks (gloo, spawned here) builds its shard of each checkpoint with
``ws1_dist.tp_model`` (column-parallel q/k/v/gate/up, row-parallel o_proj/down_proj on 8 K chunks and a fixed tree,
the vocabulary-parallel head) and teacher-forces 8 seeded samples; rank 0 keeps the log-probs. Checkpoints:

* ``tiny-tp`` — tiny's widths with 8 query and 8 KV heads (head_dim 16) and Qwen3's vocabulary, 151,936 (TP up to 8);
* ``qwen3-8b-layer`` — one decoder layer of Qwen3-8B's shapes (hidden 4096, 32/8 heads, intermediate 12,288), a
  1,024-token vocabulary (the layer is what is 8B-shaped; a 151,936 × 4,096 table on 8 ranks would not fit here).

Cells (raw FP32 bits):

* ``tp_logp``: the log-probs at T == at TP 1 (one device, the same order), judged;
* ``gemm_tree`` and ``control_gemm_serial_split`` / ``control_gemm_rank_fold``: the row-parallel sum alone, FP32
  before its rounding, on seeded [64, 4096] x [256, 4096]: the tree at T == at 1 (judged); the default order under
  the split (each rank one serial chain, the partials summed) and our rank-order fold (T >= 4) must differ —
  certain at that size, red as required: the proof the comparison can fail;
* ``control_logp_*`` (shown): the log-probs with those controls' sums, and with the process group's own sum.

Exit 0 all judged cells green, 1 a red cell, 2 a bad argument or the profile's device absent.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

from . import gloo_checks
from .fsdp_check import _samples

CROSSES = ("tree", "serial_split", "sum", "rank_fold")


def _configs():
    import ws1_qwen3

    tiny = ws1_qwen3.preset("tiny")
    return {
        "tiny-tp": tiny.replace(
            num_attention_heads=8, num_key_value_heads=8, head_dim=16, vocab_size=151936, name="tiny-tp"
        ),
        "qwen3-8b-layer": ws1_qwen3.preset("qwen3-8b").replace(
            num_hidden_layers=1, vocab_size=1024, pad_token_id=None, name="qwen3-8b-layer"
        ),
    }


def _gemm_inputs():
    g = torch.Generator().manual_seed(20261207)
    x = torch.randn(64, 4096, generator=g, device="cpu").bfloat16()
    w = (torch.randn(256, 4096, generator=g, device="cpu") / 64).bfloat16()
    return x, w


def _worker(rank: int, world: int, port: int, job: dict) -> None:
    import torch.distributed as dist

    import ws1_dist
    import ws1_ops
    import ws1_qwen3

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out = {"logp": {}, "gemm": {}}
        for name, (path, vocab) in job["checkpoints"].items():
            samples = _samples(vocab)
            for cross in CROSSES:
                model = ws1_dist.tp_model(path, job["profile"], world, rank, cross=cross)
                with torch.no_grad():
                    tf = ws1_qwen3.teacher_forcing(model, samples, layout="packed")
                out["logp"][(name, cross)] = tf.logp.detach().clone()
                del model
        x, w = _gemm_inputs()
        k = x.shape[1] // world
        with ws1_ops.use_profile(job["profile"], torch.device("cpu")):
            for cross in CROSSES:
                ops = ws1_dist.TPOps(world, rank, None, cross)
                out["gemm"][cross] = ops.row_parallel_sum(
                    x[:, rank * k : (rank + 1) * k], w[:, rank * k : (rank + 1) * k]
                )
        if rank == 0:
            torch.save(out, Path(job["out"]) / "rank0.pt")
    finally:
        dist.destroy_process_group()


def run(profile: str, worlds: list[int], progress=None) -> dict:
    import torch.multiprocessing as mp

    import ws1_qwen3

    record = {"profile": profile, "worlds": worlds, "cells": []}
    results = {}
    with tempfile.TemporaryDirectory(prefix="ws1-tp-") as tmp:
        checkpoints = {}
        for name, config in _configs().items():
            path = str(Path(tmp) / name)
            ws1_qwen3.save_pretrained(ws1_qwen3.synthetic(config, profile), path)
            checkpoints[name] = (path, config.vocab_size)
        for world in sorted(set(worlds) | {1}):  # TP 1 is the reference
            out = Path(tmp) / f"t{world}"
            out.mkdir()
            job = {"checkpoints": checkpoints, "profile": profile, "out": str(out)}
            mp.spawn(_worker, args=(world, gloo_checks.free_port(), job), nprocs=world, join=True)
            results[world] = torch.load(out / "rank0.pt")
            if progress:
                progress(world)
    ref = results[1]

    def differ(a: torch.Tensor, b: torch.Tensor) -> int:
        return int((a.view(torch.int32) != b.view(torch.int32)).sum())

    for world in worlds:
        got = results[world]
        for name in checkpoints:
            base = ref["logp"][(name, "tree")]
            n = base.numel()
            d = differ(got["logp"][(name, "tree")], base)
            record["cells"].append(
                {
                    "world": world,
                    "model": name,
                    "cell": "tp_logp",
                    "green": d == 0,
                    "detail": f"{d}/{n} log-probs differ from TP 1",
                    "differ": d,
                    "n": n,
                }
            )
            if world > 1:
                for cross in ("serial_split", "sum", "rank_fold"):
                    # each control's log-probs against TP 1 in the same sum's order (serial_split at 1 = det_gemm)
                    dc = differ(
                        got["logp"][(name, cross)], ref["logp"][(name, cross if cross == "serial_split" else "tree")]
                    )
                    record["cells"].append(
                        {
                            "world": world,
                            "model": name,
                            "cell": f"control_logp_{cross}",
                            "green": None,
                            "detail": f"{dc}/{n} log-probs differ from TP 1 (shown)",
                            "differ": dc,
                            "n": n,
                        }
                    )
        g = got["gemm"]
        n = g["tree"].numel()
        d = differ(g["tree"], ref["gemm"]["tree"])
        record["cells"].append(
            {
                "world": world,
                "model": "gemm",
                "cell": "gemm_tree",
                "green": d == 0,
                "detail": f"{d}/{n} FP32 sums differ from TP 1",
                "differ": d,
                "n": n,
            }
        )
        if world > 1:
            ds = differ(g["serial_split"], ref["gemm"]["serial_split"])
            record["cells"].append(
                {
                    "world": world,
                    "model": "gemm",
                    "cell": "control_gemm_serial_split",
                    "green": ds > 0,
                    "red_required": True,
                    "detail": f"default order under the split: {ds}/{n} FP32 sums differ",
                    "differ": ds,
                    "n": n,
                }
            )
        if world >= 4:
            df = differ(g["rank_fold"], ref["gemm"]["tree"])
            record["cells"].append(
                {
                    "world": world,
                    "model": "gemm",
                    "cell": "control_gemm_rank_fold",
                    "green": df > 0,
                    "red_required": True,
                    "detail": f"partials folded in rank order: {df}/{n} FP32 sums differ",
                    "differ": df,
                    "n": n,
                }
            )
    judged = [c for c in record["cells"] if c["green"] is not None]
    record["green"] = bool(judged) and all(c["green"] for c in judged)
    return record


def main(argv: list[str] | None = None) -> int:
    args = gloo_checks.parser("tp", __doc__, "1,2,4,8", "TP degrees, each dividing 8").parse_args(argv)
    worlds = gloo_checks.worlds_or_exit(
        "tp", args, lambda w: w >= 1 and 8 % w == 0, "TP degrees must divide 8", "tp_check"
    )
    if isinstance(worlds, int):
        return worlds
    record = run(args.profile, worlds, progress=lambda w: print(f"  TP {w}: done", file=sys.stderr))
    title = f"Tensor parallel on gloo, {record['profile']} (the parallel-invariant order)"
    return gloo_checks.finish(args, record, "tp_check", gloo_checks.table(title, record, 15, 27))
