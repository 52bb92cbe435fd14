"""FSDP2 on WS1's kernels, on gloo: per-rank log-probs vs one device, gradients run to run and across world sizes.

    python -m ws1_matrix fsdp [PROFILE] [--world 1,2,4] [--models tiny,tiny-tied] [--json]   (nox -s fsdp_check)

For each world size W a process group of W ranks (gloo, spawned here) loads the same seeded checkpoint twice:
as WS1's ``Qwen3ForCausalLM`` and as transformers' ``Qwen3ForCausalLM`` after ``ws1_qwen3.apply_ws1``; each is
sharded with ``ws1_dist.shard``. The 8 samples (distinct lengths) are dealt round-robin, rank r taking samples
r, r + W, ... (their global ranks kept as the rows' logical keys). One training step per run: the rank's
log-probs of its completion tokens, the loss ``−Σ logp / n`` with ``n`` the global token count, the backward
inside ``ws1_dist.canonical_grads(model, divide_factor=1)``; run twice from the same weights.

Cells (raw FP32/BF16 bits):

* ``logp``: every rank's log-probs == the single device's of the same samples (no FSDP, no process group);
* ``run_to_run``: the step's gradients (gathered whole) identical in the two runs;
* ``dp1``: at W = 1 the sharded step's gradients == the single device's;
* ``across_world`` (measured, not judged: issue 38 removes it): max |Δ| and the number of elements that differ
  between the gradients at W and at one device;
* ``control``: our ``variant_m_split_k`` kernels on the sharded side — its log-probs must differ from the
  profile's on one device (red as required), the proof that the ``logp`` cell can fail.

Exit 0 all judged cells green, 1 a red cell, 2 a bad argument or the profile's device absent.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch

EXIT_GREEN, EXIT_RED, EXIT_UNAVAILABLE = 0, 1, 2
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
    width = max(s.length for s in samples)
    ids = torch.zeros((len(samples), width), dtype=torch.int64, device="cpu")
    mask = torch.zeros_like(ids)
    completion = torch.zeros_like(ids)
    for b, s in enumerate(samples):  # left padding, as a rollout batch comes
        ids[b, width - s.length :] = torch.tensor(s.tokens, device="cpu")
        mask[b, width - s.length :] = 1
        completion[b, width - s.length + s.n_prompt :] = 1
    ranks = torch.tensor([s.rank for s in samples], device="cpu")
    with torch.set_grad_enabled(grad):
        lp = ws1_qwen3.token_logprobs(model, ids, mask, completion_mask=completion, sample_ranks=ranks)
    by_rank = {s.rank: lp[b][completion[b].bool()] for b, s in enumerate(samples)}
    loss = -(lp * completion).sum() / n_total
    return by_rank, loss


def _step(kind: str, model, samples, n_total: int, sharded: bool) -> tuple[dict, dict]:
    """One step's log-probs {rank: FP32 bits} and whole gradients {name: tensor} (collective when sharded)."""
    import ws1_ops

    model.zero_grad(set_to_none=True)
    by_rank, loss = _logprobs(kind, model, samples, n_total, grad=True)
    if sharded:
        import ws1_dist

        with ws1_dist.canonical_grads(model, divide_factor=1.0):
            loss.backward()
        grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    else:
        with ws1_ops.canonical_grads():
            loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return {r: v.detach().clone() for r, v in by_rank.items()}, grads


def _worker(rank: int, world: int, port: int, job: dict) -> None:
    """One rank: for each (model, kind), shard, run the step twice, save its log-probs (and rank 0 the gradients)."""
    import torch.distributed as dist

    import ws1_dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out = {}
        for name, path in job["checkpoints"].items():
            samples = _samples(job["vocab"][name])
            mine = samples[rank::world]
            n_total = sum(s.length - s.n_prompt for s in samples)
            for kind in KINDS:
                runs = []
                for _ in range(2):
                    model = ws1_dist.shard(_load(kind, path, job["profile"]))
                    runs.append(_step(kind, model, mine, n_total, sharded=True))
                control = ws1_dist.shard(_load(kind, path, CONTROL))
                ctrl_lp, _ = _logprobs(kind, control, mine, n_total, grad=False)
                out[f"{name}/{kind}"] = {
                    "logp": runs[0][0],
                    "logp_run2": runs[1][0],
                    "control_logp": {r: v.detach() for r, v in ctrl_lp.items()},
                    "grads": runs[0][1] if rank == 0 else None,
                    "grads_run2": runs[1][1] if rank == 0 else None,
                }
        torch.save(out, Path(job["out"]) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
    )


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
            for kind in KINDS:  # one device, no process group: the reference
                reference[f"{name}/{kind}"] = _step(kind, _load(kind, path, profile), samples, n_total, sharded=False)
        for world in worlds:
            out = Path(tmp) / f"w{world}"
            out.mkdir()
            job = {"checkpoints": checkpoints, "vocab": vocab, "profile": profile, "out": str(out)}
            mp.spawn(_worker, args=(world, _free_port(), job), nprocs=world, join=True)
            ranks = [torch.load(out / f"rank{r}.pt") for r in range(world)]
            for key, (ref_lp, ref_grads) in reference.items():
                got = {r: v for res in ranks for r, v in res[key]["logp"].items()}
                got2 = {r: v for res in ranks for r, v in res[key]["logp_run2"].items()}
                ctrl = {r: v for res in ranks for r, v in res[key]["control_logp"].items()}
                n_tok = sum(v.numel() for v in ref_lp.values())
                differ = sum(int((got[r].view(torch.int32) != ref_lp[r].view(torch.int32)).sum()) for r in ref_lp)
                differ2 = sum(int((got2[r].view(torch.int32) != ref_lp[r].view(torch.int32)).sum()) for r in ref_lp)
                ctrl_differ = sum(int((ctrl[r].view(torch.int32) != ref_lp[r].view(torch.int32)).sum()) for r in ref_lp)
                g1, g2 = ranks[0][key]["grads"], ranks[0][key]["grads_run2"]
                r2r = [n for n in g1 if not _bits_equal(g1[n], g2[n])]
                vs1 = {n: (g1[n].float() - ref_grads[n].float()).abs() for n in g1}
                max_d = max(float(d.max()) for d in vs1.values())
                max_g = max(float(g.float().abs().max()) for g in ref_grads.values())
                n_diff = sum(int((g1[n].view(torch.int16) != ref_grads[n].view(torch.int16)).sum()) for n in g1)
                n_el = sum(g.numel() for g in g1.values())
                base = {"world": world, "model": key}
                record["cells"] += [
                    {
                        **base,
                        "cell": "logp",
                        "green": differ == 0 and differ2 == 0,
                        "detail": f"{differ + differ2}/{2 * n_tok} log-probs differ from one device",
                    },
                    {
                        **base,
                        "cell": "run_to_run",
                        "green": not r2r,
                        "detail": f"{len(r2r)}/{len(g1)} gradients differ between two runs"
                        + (f" ({r2r[0]}...)" if r2r else ""),
                    },
                    {
                        **base,
                        "cell": "control",
                        "green": ctrl_differ > 0,
                        "red_required": True,
                        "detail": f"{CONTROL}: {ctrl_differ}/{n_tok} log-probs differ from the profile on one device",
                    },
                    {
                        **base,
                        "cell": "dp1" if world == 1 else "across_world",
                        "green": n_diff == 0 if world == 1 else None,
                        "max_abs_diff": max_d,
                        "max_abs_grad": max_g,
                        "elements_differ": n_diff,
                        "elements": n_el,
                        "detail": f"vs one device: {n_diff}/{n_el} differ, max |Δ| {max_d:.3g} (max |g| {max_g:.3g})",
                    },
                ]
            if progress:
                progress(world)
    judged = [c for c in record["cells"] if c["green"] is not None]
    record["green"] = all(c["green"] for c in judged)
    return record


def _table(record: dict) -> str:
    lines = [f"FSDP2 on gloo, {record['profile']} (control {record['control']})", ""]
    lines.append(f"{'W':>2}  {'model':<14} {'cell':<13} {'verdict':<9} detail")
    for c in record["cells"]:
        verdict = "measured" if c["green"] is None else ("green" if c["green"] else "RED")
        if c.get("red_required") and c["green"]:
            verdict = "red ✓"
        lines.append(f"{c['world']:>2}  {c['model']:<14} {c['cell']:<13} {verdict:<9} {c['detail']}")
    lines.append("")
    lines.append("PASS" if record["green"] else "FAIL")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import ws1_accel
    from ws1_contract.evidence import evidence_root

    ap = argparse.ArgumentParser(prog="python -m ws1_matrix fsdp", description=__doc__.split("\n")[0])
    ap.add_argument("profile", nargs="?", default="cpu_bf16")
    ap.add_argument("--world", default="1,2,4", help="world sizes, comma-separated (default 1,2,4)")
    ap.add_argument("--models", default="tiny,tiny-tied", help="presets, comma-separated (default tiny,tiny-tied)")
    ap.add_argument("--json", action="store_true", help="print the record as JSON")
    ap.add_argument("--evidence-dir", default=None)
    args = ap.parse_args(argv)
    if args.profile != "cpu_bf16":
        # gloo on the host: a GPU profile's FSDP check needs NCCL on its host (docs/trainer.md)
        print(
            f"fsdp: {args.profile}: this check runs gloo on cpu_bf16 only; NCCL on a GPU host is not written yet",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    try:
        worlds = [int(w) for w in args.world.split(",")]
    except ValueError:
        print(f"fsdp: --world must be comma-separated integers, got {args.world!r}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not worlds or min(worlds) < 1 or max(worlds) > 8:
        print(f"fsdp: world sizes must be in 1..8, got {args.world!r}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    import ws1_qwen3

    models = args.models.split(",")
    bad = [m for m in models if m not in ws1_qwen3.PRESETS]
    if bad:
        print(f"fsdp: unknown preset {bad[0]!r} (presets: {', '.join(sorted(ws1_qwen3.PRESETS))})", file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        ws1_accel.resolve_device(args.profile)
    except ws1_accel.AcceleratorUnavailable as e:
        print(f"fsdp: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    record = run(args.profile, worlds, models, progress=lambda w: print(f"  world {w}: done", file=sys.stderr))
    root = Path(args.evidence_dir) if args.evidence_dir else evidence_root() / args.profile
    root.mkdir(parents=True, exist_ok=True)
    (root / "fsdp_check.json").write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2) if args.json else _table(record))
    return EXIT_GREEN if record["green"] else EXIT_RED
