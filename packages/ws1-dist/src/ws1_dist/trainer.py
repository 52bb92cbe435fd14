"""A GRPO trainer of transformers' Qwen3 under FSDP2, in ``world`` processes (gloo): ``ws1_qwen3.rl.PolicyTrainer``.

    trainer = ws1_dist.FSDPTrainer(checkpoint_dir, "cpu_bf16", rl.GRPOConfig(...), world=2)
    for log in rl.run_on_engines(rollout, trainer, config): ...
    trainer.close()

Each rank loads the checkpoint with ``transformers.Qwen3ForCausalLM.from_pretrained`` in BF16 and either runs it on
WS1's kernels (``profile``: ``ws1_qwen3.apply_ws1`` + :func:`ws1_dist.shard`, backward in
:func:`ws1_dist.canonical_grads`) or as stock transformers (``profile=None``: FSDP2's own ``fully_shard`` and
reduce-scatter, log-probs by ``log_softmax`` of the FP32-cast logits, as TRL's ``selective_log_softmax``) — the control
a user has without WS1. ``order``: ``ws1_dist.canonical_grads``' (``"sample_tree"``: the parallel-invariant order, the
samples dealt in aligned blocks by ``dp_block``, so the weights are the same bits at any power-of-two world size).
``k_chunks``: the K order of o_proj and down_proj (``apply_ws1``'s; 8: the log-probs a tensor-parallel rollout computes,
vLLM at TP > 1 with the plugin). A step: the batch's samples dealt round-robin (rank r: samples r, r + world, ...;
blocks for the tree), each rank's log-probs of its completion tokens, the PPO-clip loss normalized by the step's global
token count, one backward, the gradient summed across ranks (divide factor 1), ``ws1_qwen3.rl.AdamW`` on each rank's
FP32 master shards, the BF16 parameters the masters rounded once. :meth:`weights` gathers the whole weights for the
rollout engine. Ranks are spawned processes, driven over pipes; the driver holds no model.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import socket
import traceback
from dataclasses import asdict

import torch

from .errors import DistError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FSDPTrainer:
    """``world`` trainer ranks (spawned, gloo) over one checkpoint; see the module docstring."""

    def __init__(
        self,
        checkpoint: str,
        profile: str | None,
        config,
        *,
        world: int = 2,
        threads: int = 1,
        order: str = "serial",
        k_chunks: int | None = None,
    ):
        if world < 1:
            raise DistError(f"ws1_dist: world must be >= 1, got {world}")
        if order not in ("serial", "sample_tree"):
            raise DistError(f"ws1_dist: order must be 'serial' or 'sample_tree', got {order!r}")
        if k_chunks is not None and profile is None:
            raise DistError(
                "ws1_dist: k_chunks is an order of WS1's kernels; the stock trainer (profile None) has none"
            )
        ctx = mp.get_context("spawn")
        port = _free_port()
        self.world, self._conns, self._procs = world, [], []
        for rank in range(world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_rank_main,
                args=(rank, world, port, checkpoint, profile, asdict(config), threads, order, k_chunks, child),
                daemon=True,
            )
            proc.start()
            self._conns.append(parent)
            self._procs.append(proc)
        self._gather("ready")

    def _gather(self, what: str) -> list:
        out = []
        for rank, conn in enumerate(self._conns):
            try:
                kind, payload = conn.recv()
            except EOFError:
                self.close()
                raise DistError(f"ws1_dist: trainer rank {rank} exited during {what}") from None
            if kind == "error":
                self.close()
                raise DistError(f"ws1_dist: trainer rank {rank} failed during {what}: {payload}")
            out.append(payload)
        return out

    def train_step(self, batch) -> tuple[list[list[float]], float, float]:
        for conn in self._conns:
            conn.send(("train", batch))
        parts = self._gather("train_step")
        logp: dict[int, list[float]] = {}
        for part in parts:
            logp.update(part["logp"])
        return [logp[s.rank] for s in batch.samples], sum(p["loss"] for p in parts), parts[0]["grad_norm"]

    def weights(self) -> dict[str, torch.Tensor]:
        for conn in self._conns:
            conn.send(("weights", None))
        return self._gather("weights")[0]

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        self._conns, self._procs = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- one rank ------------------------------------------------------------------------------------------------------


def _batch_tensors(samples, rollout_logp, advantages):
    """Left-padded [B, S] input_ids, attention_mask, completion mask, and the rollout log-prob and advantage of each
    completion cell (0 elsewhere), for this rank's samples."""
    import ws1_qwen3

    ids, mask, completion = ws1_qwen3.left_padded(samples)
    width = ids.shape[1]
    old = torch.zeros((len(samples), width), dtype=torch.float32, device="cpu")
    adv = torch.zeros_like(old)
    for b, (s, lps, a) in enumerate(zip(samples, rollout_logp, advantages)):
        first = width - s.length + s.n_prompt  # the sample's first completion cell
        old[b, first:] = torch.tensor(lps, dtype=torch.float32, device="cpu")
        adv[b, first:] = a
    return ids, mask, completion.bool(), old, adv


def _stock_logprobs(model, ids, mask):
    """Stock transformers: the logits at t − 1 predict token t; log_softmax in FP32 (TRL's selective_log_softmax)."""
    logits = model(ids, attention_mask=mask).logits
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    return torch.nn.functional.pad(lp, (1, 0))  # [B, S]: position 0 predicts nothing


def _rank_main(rank, world, port, checkpoint, profile, config, threads, order, k_chunks, conn) -> None:
    try:
        import torch.distributed as dist
        import transformers
        from torch.distributed.fsdp import fully_shard

        import ws1_qwen3
        from ws1_qwen3 import rl

        from . import fsdp

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.set_num_threads(threads)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = transformers.Qwen3ForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16)
        if profile is not None:
            fsdp.shard(ws1_qwen3.apply_ws1(model, profile, k_chunks=k_chunks))
        else:
            for layer in model.model.layers:
                fully_shard(layer)
            fully_shard(model)  # FSDP2's reduce-scatter averages over ranks (gloo has no PREMUL_SUM for a factor 1)
        names = [n for n, _ in model.named_parameters()]
        params = dict(model.named_parameters())
        masters = {n: params[n].to_local().detach().float().clone() for n in names}
        opt = rl.AdamW(masters, lr=config["lr"], betas=tuple(config["betas"]), weight_decay=config["weight_decay"])
        conn.send(("ready", None))
        while True:
            kind, payload = conn.recv()
            if kind == "stop":
                break
            if kind == "weights":
                whole = fsdp.full_state_dict(model) if profile is not None else _full(model)
                conn.send(("weights", whole if rank == 0 else None))
                continue
            batch = payload
            if order == "sample_tree":  # an aligned block: the rank's gradient is a node of the one tree
                mine = list(fsdp.dp_block(len(batch.samples), world, rank))
            else:
                mine = list(range(rank, len(batch.samples), world))
            samples = [batch.samples[i] for i in mine]
            ids, mask, comp, old, adv = _batch_tensors(
                samples, [batch.rollout_logp[i] for i in mine], [batch.advantages[i] for i in mine]
            )
            model.zero_grad(set_to_none=True)
            if profile is not None:
                ranks = torch.tensor([s.rank for s in samples], device="cpu")
                lp = ws1_qwen3.token_logprobs(model, ids, mask, completion_mask=comp, sample_ranks=ranks)
                loss = rl.ppo_clip_loss(lp[comp], old[comp], adv[comp], config["clip_eps"], batch.n_tokens)
                with fsdp.canonical_grads(model, divide_factor=1.0, order=order):
                    loss.backward()
            else:
                lp = _stock_logprobs(model, ids, mask)
                loss = rl.ppo_clip_loss(lp[comp], old[comp], adv[comp], config["clip_eps"], batch.n_tokens)
                (loss * world).backward()  # FSDP2 averages: × world makes it the sum, as divide factor 1 above
            grads = {}
            for n in names:
                g = params[n].grad
                if g is None:
                    raise DistError(f"ws1_dist: parameter {n} got no gradient")
                grads[n] = g.to_local().float()
            sq = torch.tensor(
                [sum(float(grads[n].double().pow(2).sum()) for n in names)], dtype=torch.float64, device="cpu"
            )
            dist.all_reduce(sq)  # the norm for the log only
            opt.step(grads)
            with torch.no_grad():
                for n in names:
                    params[n].to_local().copy_(masters[n].to(params[n].dtype))
                    params[n].grad = None
            logp = {s.rank: lp[b][comp[b]].detach().tolist() for b, s in enumerate(samples)}
            conn.send(("train", {"logp": logp, "loss": float(loss.detach()), "grad_norm": math.sqrt(float(sq))}))
        dist.destroy_process_group()
    except Exception as exc:  # the driver raises it, one line; the traceback goes to stderr
        traceback.print_exc()
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except (BrokenPipeError, OSError):
            pass


def _full(model) -> dict[str, torch.Tensor]:
    return {n: p.full_tensor().detach() for n, p in model.named_parameters()}
