"""On-policy RL on WS1: a minimal GRPO loop whose trainer recomputes exactly the rollout's log-probs.

    from ws1_qwen3 import rl
    model = ws1_qwen3.synthetic("tiny", "cpu_bf16")
    run = rl.Trainer(model, rl.GRPOConfig(steps=20))
    for log in run:                 # one StepLog per step: reward, loss, the mismatch metrics
        print(log.step, log.reward_mean, log.metrics["rollout_corr/kl"])

One step: rollouts with :func:`~ws1_qwen3.generate` (continuous batching, seeded sampling, a group
of samples per prompt, random max lengths, a stop token); rewards from a verifiable toy task;
group-normalized advantages; the trainer's log-probs of the same tokens with
:func:`~ws1_qwen3.teacher_forcing` in another layout and batch order (and, if asked, in
micro-batches); the PPO-clip loss against the rollout's recorded log-probs (verl's "bypass" mode:
pi_old = pi_rollout); backward inside ``ws1_ops.canonical_grads()``; an AdamW step on FP32 master
weights, rounded once to the model's BF16 parameters, which the next step's rollout uses.

On WS1's kernels the trainer's log-probs are the rollout's bit for bit, so every importance ratio
is exactly 1 and the update is truly on-policy; :func:`mismatch_metrics` shows it per step, and a
user's own trainer can call it with its own two log-prob tensors.

Why a whole run is reproducible: sampling noise is drawn per (seed, step, request), every kernel is
batch-, chunk- and thread-invariant, and parameter gradients reduce rows in canonical order — so
the rollout's ``max_batch`` and chunked-prefill size and the trainer's layout, batch order and
micro-batching do not change a single bit of the weights (tested). What does change them: the
seed, the task, the hyper-parameters (lr, betas, clip, group size, prompts per step, length limits),
the initial weights and the profile (another family's kernels round differently).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

import ws1_ops
from ws1_contract.compare import aggregates

from .generate import Completion, Request, generate
from .model import ModelInputError, Qwen3ForCausalLM
from .teacher import Sample, teacher_forcing

F32 = torch.float32


class RLInputError(ModelInputError):
    """Bad input to the RL loop (a reward, a group, a completion); the step changed no weights."""


# ---- mismatch metrics -------------------------------------------------------------------------


def mismatch_metrics(
    rollout_logp: torch.Tensor, trainer_logp: torch.Tensor, lengths: Sequence[int] | None = None, clip_eps: float = 0.2
) -> dict[str, float]:
    """How far the trainer's log-probs are from the rollout's, over the same tokens.

    ``rollout_logp``, ``trainer_logp``: [N] log-probs of the sampled tokens (any float dtype; compared
    in FP64). ``lengths``: tokens per sequence (sum N) for the sequence-level metrics; None: one sequence.

    Names and definitions follow verl's rollout-correction metrics (``rollout_corr/...``, docs/algo/
    rollout_corr.md; bypass mode: "training" is the policy being trained), with log_ratio =
    trainer − rollout and ratio = exp(log_ratio):

    * ``kl`` = mean(rollout − trainer) (KL(pi_rollout || pi_training), may be negative);
    * ``k3_kl`` = mean(exp(log_ratio) − log_ratio − 1) (always >= 0);
    * ``training_ppl`` / ``rollout_ppl`` = exp(−mean(logp)); ``log_ppl_diff`` = mean over sequences of
      (log_ppl_rollout − log_ppl_training); ``chi2_token`` = mean(ratio²) − 1;
      ``chi2_seq`` = mean over sequences of (prod ratio)² − 1;
    * ``rollout_is_mean`` / ``_min`` / ``_max`` / ``_std`` of the token-level ratio;

    slime/Miles report the mismatch as the same K3 KL (``k3_kl``; their true-on-policy mode aims at
    exactly 0, as WS1 does). WS1's raw-bit view (``ws1/...``): ``max_abs_dlogp``, ``mean_abs_dlogp``,
    ``clip_fraction`` (ratio outside [1 − clip_eps, 1 + clip_eps]: the tokens PPO would clip at the
    first update), ``tokens_different`` and ``tokens_different_fraction`` (raw FP32 bits differ)."""
    r = rollout_logp.detach().reshape(-1)
    t = trainer_logp.detach().reshape(-1)
    if r.shape != t.shape:
        raise RLInputError(f"mismatch_metrics: rollout has {r.numel()} log-probs, trainer {t.numel()}")
    n = r.numel()
    if n == 0:
        raise RLInputError("mismatch_metrics: no tokens")
    if not (torch.isfinite(r).all() and torch.isfinite(t).all()):
        raise RLInputError("mismatch_metrics: a log-prob is not finite")
    lengths = [n] if lengths is None else list(lengths)
    if sum(lengths) != n or min(lengths) < 1:
        raise RLInputError(f"mismatch_metrics: sequence lengths {lengths} do not add up to {n} tokens (each >= 1)")
    rd, td = r.double(), t.double()
    log_ratio = td - rd
    ratio = log_ratio.exp()
    seq = torch.split(torch.arange(n, device="cpu"), lengths)
    log_ppl_diff = torch.stack([(-rd[i].mean()) - (-td[i].mean()) for i in seq])
    seq_ratio = torch.stack([log_ratio[i].sum().exp() for i in seq])
    # the raw-bit view is the contract's own train/infer aggregate (dlogp = trainer - rollout)
    agg = aggregates(t.float(), r.float(), clip_interval=(1 - clip_eps, 1 + clip_eps))
    return {
        "rollout_corr/kl": float((rd - td).mean()),
        "rollout_corr/k3_kl": float((ratio - log_ratio - 1).mean()),
        "rollout_corr/training_ppl": float(torch.exp(-td.mean())),
        "rollout_corr/rollout_ppl": float(torch.exp(-rd.mean())),
        "rollout_corr/log_ppl_diff": float(log_ppl_diff.mean()),
        "rollout_corr/log_ppl_abs_diff": float(log_ppl_diff.abs().mean()),
        "rollout_corr/chi2_token": float((ratio**2).mean() - 1),
        "rollout_corr/chi2_seq": float((seq_ratio**2).mean() - 1),
        "rollout_corr/rollout_is_mean": float(ratio.mean()),
        "rollout_corr/rollout_is_min": float(ratio.min()),
        "rollout_corr/rollout_is_max": float(ratio.max()),
        "rollout_corr/rollout_is_std": float(ratio.std(unbiased=False)),
        # the same mismatch under the names other trainers log it (definitions: docs/trainer.md)
        "training/rollout_probs_diff_max": float((td.exp() - rd.exp()).abs().max()),  # verl
        "training/rollout_probs_diff_mean": float((td.exp() - rd.exp()).abs().mean()),  # verl
        "sampling/sampling_logp_difference/max": float(log_ratio.abs().max()),  # TRL
        "sampling/sampling_logp_difference/mean": float(log_ratio.abs().mean()),  # TRL
        "sampling/importance_sampling_ratio/max": float(ratio.max()),  # TRL
        "sampling/importance_sampling_ratio/min": float(ratio.min()),  # TRL
        "train/train_rollout_logprob_abs_diff": float(log_ratio.abs().mean()),  # slime
        "vllm_kl": float((rd - td).mean()),  # OpenRLHF
        "ws1/max_abs_dlogp": agg.max_abs_dlogp,
        "ws1/mean_abs_dlogp": float(log_ratio.abs().mean()),
        "ws1/clip_fraction": agg.clipfrac0,
        "ws1/tokens_different": agg.tokens_different,
        "ws1/tokens_different_fraction": agg.tokens_different / n,
    }


# ---- the toy task -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CopyTask:
    """Copy the prompt's symbols: prompt = [BOS, a1..ak, SEP] with a_i from a small alphabet; the reward
    of a completion c is 0.5 * (fraction of c1..ck in the alphabet) + 0.5 * (fraction with c_i == a_i),
    in [0, 1] — dense enough for a random ``tiny`` policy to get a signal, verifiable exactly."""

    length: int = 4
    alphabet: tuple[int, ...] = tuple(range(10, 18))
    bos: int = 1
    sep: int = 3
    stop: int = 2

    def prompt(self, g: torch.Generator) -> tuple[int, ...]:
        idx = torch.randint(len(self.alphabet), (self.length,), generator=g, device="cpu").tolist()
        return (self.bos, *(self.alphabet[i] for i in idx), self.sep)

    def reward(self, prompt: Sequence[int], completion: Sequence[int]) -> float:
        want = list(prompt[1 : 1 + self.length])
        got = [t for t in completion if t != self.stop][: self.length]
        in_alpha = sum(t in self.alphabet for t in got) / self.length
        copied = sum(a == b for a, b in zip(got, want)) / self.length
        return 0.5 * in_alpha + 0.5 * copied


# ---- the loop --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GRPOConfig:
    steps: int = 30
    prompts_per_step: int = 4
    group_size: int = 4  # samples per prompt (GRPO's group; >= 2)
    max_new_tokens: tuple[int, int] = (4, 8)  # each request's limit, drawn in [lo, hi]
    temperature: float = 1.0
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    clip_eps: float = 0.2
    seed: int = 0
    # knobs that must not change a bit of the run (tested)
    max_batch: int = 8  # the rollout's continuous-batching slots
    chunk: int | None = None  # the rollout's chunked-prefill size
    trainer_layout: str = "packed"  # the trainer's layout (the rollout decodes through a paged cache)
    micro_batches: int = 1  # the trainer's micro-batches (one canonical_grads scope per step)


@dataclass
class StepLog:
    step: int
    reward_mean: float
    rewards: list[float]
    loss: float
    tokens: int
    metrics: dict[str, float]
    grad_norm: float
    completions: list[Completion] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "reward_mean": self.reward_mean,
            "loss": self.loss,
            "tokens": self.tokens,
            "grad_norm": self.grad_norm,
            **self.metrics,
        }


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "little") & ((1 << 63) - 1)


def group_advantages(rewards: Sequence[float], group_size: int, eps: float = 1e-6) -> list[float]:
    """GRPO: each reward minus its group's mean, over the group's standard deviation (+ eps).
    Rewards are grouped in order (group_size consecutive samples per prompt)."""
    if group_size < 2:
        raise RLInputError(f"a GRPO group needs at least 2 samples, got group_size {group_size}")
    if len(rewards) % group_size:
        raise RLInputError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    bad = [i for i, r in enumerate(rewards) if not math.isfinite(r)]
    if bad:
        raise RLInputError(f"reward of sample {bad[0]} is not finite ({rewards[bad[0]]})")
    out = []
    for g in range(0, len(rewards), group_size):
        grp = torch.tensor(rewards[g : g + group_size], dtype=torch.float64, device="cpu")
        out += ((grp - grp.mean()) / (grp.std(unbiased=False) + eps)).tolist()
    return out


def step_requests(config: GRPOConfig, task: CopyTask, step: int) -> list[Request]:
    """Step ``step``'s rollout requests: ``prompts_per_step`` seeded prompts, ``group_size`` samples each (group
    order), each with its own seed and a max length drawn in ``max_new_tokens`` — the same on every engine."""
    c = config
    g = torch.Generator().manual_seed(_seed("ws1-rl-prompts", c.seed, step))
    reqs = []
    for p in range(c.prompts_per_step):
        prompt = task.prompt(g)
        for k in range(c.group_size):
            n = int(torch.randint(c.max_new_tokens[0], c.max_new_tokens[1] + 1, (1,), generator=g, device="cpu"))
            seed = _seed("ws1-rl-sample", c.seed, step, p, k)
            reqs.append(Request(prompt, n, c.temperature, seed, f"s{step}-p{p}-g{k}", (task.stop,)))
    return reqs


def ppo_clip_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip_eps: float, n_tokens: int
) -> torch.Tensor:
    """PPO-clip over tokens [n]: ``−Σ min(r·A, clip(r, 1 ± eps)·A) / n_tokens`` with r = exp(logp − old_logp) (verl's
    bypass mode: old = the rollout's log-probs). ``n_tokens``: the step's global token count, so the pieces of a
    step (micro-batches, ranks) sum to the whole step's loss."""
    ratio = torch.exp(logp - old_logp)
    obj = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    return -obj.sum() / n_tokens


class AdamW:
    """AdamW (decoupled weight decay, bias-corrected moments) on FP32 master tensors, written out so a
    step is plain elementwise FP32 arithmetic in a fixed parameter order: no reduction (the thread
    count cannot change a bit), no fused/foreach variant chosen by the library, and no accelerator
    probing (torch.optim asks torch.accelerator, which a renamed PrivateUse1 backend breaks)."""

    def __init__(
        self,
        params: dict[str, torch.Tensor],
        lr: float,
        betas: tuple[float, float],
        weight_decay: float = 0.0,
        eps: float = 1e-8,
    ):
        self.params, self.lr, self.betas, self.wd, self.eps = params, lr, betas, weight_decay, eps
        self.m = {n: torch.zeros_like(p) for n, p in params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in params.items()}
        self.t = 0

    @torch.no_grad()
    def step(self, grads: dict[str, torch.Tensor]) -> None:
        self.t += 1
        b1, b2 = self.betas
        bc1, bc2 = 1 - b1**self.t, 1 - b2**self.t
        for n, p in self.params.items():
            g = grads[n]
            p.mul_(1 - self.lr * self.wd)
            self.m[n].mul_(b1).add_(g, alpha=1 - b1)
            self.v[n].mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (self.v[n].sqrt() / math.sqrt(bc2)).add_(self.eps)
            p.addcdiv_(self.m[n], denom, value=-self.lr / bc1)


class Trainer:
    """A GRPO run on ``model`` (a ws1 profile's model, or a candidate such as a negative control)."""

    def __init__(self, model: Qwen3ForCausalLM, config: GRPOConfig = GRPOConfig(), task: CopyTask = CopyTask()):
        if config.group_size < 2:
            raise RLInputError(f"a GRPO group needs at least 2 samples, got group_size {config.group_size}")
        lo, hi = config.max_new_tokens
        if not 1 <= lo <= hi:
            raise RLInputError(f"max_new_tokens must be 1 <= lo <= hi, got {config.max_new_tokens}")
        longest = task.length + 2 + hi
        if longest > model.config.max_position_embeddings:
            raise RLInputError(
                f"a prompt of {task.length + 2} tokens + {hi} new tokens exceeds the context "
                f"({model.config.max_position_embeddings})"
            )
        if config.micro_batches < 1:
            raise RLInputError(f"micro_batches must be >= 1, got {config.micro_batches}")
        self.model, self.config, self.task = model, config, task
        self.names = [n for n, _ in model.named_parameters()]
        # FP32 masters: the optimizer's state; the model's parameters are their BF16 rounding
        self.masters = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        self.opt = AdamW(self.masters, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
        self.step_index = 0

    # -- rollout -----------------------------------------------------------------------------------

    def rollout(self, step: int) -> tuple[list[Request], list[Completion]]:
        c = self.config
        reqs = step_requests(c, self.task, step)
        with torch.no_grad():
            comps = generate(self.model, reqs, max_batch=c.max_batch, chunk=c.chunk)
        return reqs, comps

    # -- one step ------------------------------------------------------------------------------------

    def step(self, rewards_override: Sequence[float] | None = None) -> StepLog:
        """Rollout, rewards, advantages, the trainer's log-probs, the loss, backward, the update.
        Anything wrong is raised before the optimizer runs: a failed step changes no weights."""
        c, step = self.config, self.step_index
        reqs, comps = self.rollout(step)
        rewards = (
            list(rewards_override)
            if rewards_override is not None
            else [self.task.reward(r.prompt, comp.tokens) for r, comp in zip(reqs, comps)]
        )
        batch = train_batch(reqs, comps, rewards, c.group_size)
        old = torch.tensor([lp for comp in comps for lp in comp.logprobs], dtype=F32, device="cpu")  # rank, position
        adv_tok = torch.tensor(
            [a for a, comp in zip(batch.advantages, comps) for _ in comp.tokens], dtype=F32, device="cpu"
        )
        n_tok = batch.n_tokens
        trainer_lp, loss_total = self._backward(list(batch.samples), old, adv_tok, n_tok, step)
        metrics = mismatch_metrics(old, trainer_lp, [len(comp.tokens) for comp in comps], c.clip_eps)
        grad_norm = self._update()
        self.step_index += 1
        return StepLog(step, float(sum(rewards) / len(rewards)), rewards, loss_total, n_tok, metrics, grad_norm, comps)

    def _backward(self, samples: list[Sample], old: torch.Tensor, adv: torch.Tensor, n_tok: int, step: int):
        """The PPO-clip loss over every completion token, normalized by the step's token count, run in
        ``micro_batches`` pieces of a seeded permutation of the samples, all inside one
        ``canonical_grads()`` scope (so parameter gradients reduce rows in canonical order whatever the
        pieces). Returns the trainer's log-probs in (rank, position) order and the loss."""
        c, model = self.config, self.model
        order = torch.randperm(
            len(samples), generator=torch.Generator().manual_seed(_seed("ws1-rl-order", c.seed, step)), device="cpu"
        ).tolist()
        pieces = [order[i :: c.micro_batches] for i in range(c.micro_batches)]
        offsets, o = {}, 0
        for s in samples:  # each sample's first token index in ``old`` (rank order)
            offsets[s.rank] = o
            o += s.length - s.n_prompt
        got = torch.empty(n_tok, dtype=F32, device="cpu")
        loss_total = 0.0
        model.zero_grad(set_to_none=True)
        with ws1_ops.canonical_grads():
            for piece in pieces:
                if not piece:
                    continue
                sub = [samples[i] for i in piece]
                tf = teacher_forcing(model, sub, layout=c.trainer_layout, n_active=n_tok, grad=True)
                # tf rows: ascending logical key = (rank, position) of the pieces' samples
                idx = torch.cat(
                    [
                        torch.arange(offsets[s.rank], offsets[s.rank] + s.length - s.n_prompt, device="cpu")
                        for s in sorted(sub, key=lambda s: s.rank)
                    ]
                )
                lp = tf.logp[tf.active.to(tf.logp.device)]
                loss = ppo_clip_loss(lp, old[idx].to(lp.device), adv[idx].to(lp.device), c.clip_eps, n_tok)
                loss.backward()
                got[idx] = lp.detach().float().cpu()
                loss_total += float(loss.detach())
        return got, loss_total

    def _update(self) -> float:
        """AdamW on the FP32 masters (elementwise: no reduction, so the thread count cannot change it),
        then the model's BF16 parameters = the masters rounded once. Non-finite gradients: no update."""
        params = dict(self.model.named_parameters())
        grads = {}
        for n in self.names:
            g = params[n].grad
            if g is None:
                raise RLInputError(f"parameter {n} got no gradient")
            if not bool(torch.isfinite(g).all()):
                raise RLInputError(f"the gradient of {n} is not finite; no weight was changed")
            grads[n] = g.detach().float().cpu()
        sq = 0.0
        for n in self.names:  # the norm, for the log: FP64, fixed parameter order
            sq += float(grads[n].double().pow(2).sum())
        self.opt.step(grads)
        with torch.no_grad():
            for n in self.names:
                params[n].copy_(self.masters[n].to(params[n].dtype))
                params[n].grad = None
        return math.sqrt(sq)

    def __iter__(self) -> Iterator[StepLog]:
        while self.step_index < self.config.steps:
            yield self.step()


# ---- the loop on other engines: a rollout engine (vLLM + ws1_vllm) and a trainer (transformers + ws1_dist) -------


@dataclass(frozen=True)
class TrainBatch:
    """One step's training input, the same for every trainer: ``samples`` (prompt + completion, ``rank`` = the
    sample's global index: its rows' logical keys), the rollout's log-prob of each completion token
    (``rollout_logp[i]``: ``samples[i]``'s, in position order), each sample's advantage, and the step's global
    completion-token count (the loss normalizer)."""

    samples: tuple[Sample, ...]
    rollout_logp: tuple[tuple[float, ...], ...]
    advantages: tuple[float, ...]
    n_tokens: int


def train_batch(
    reqs: Sequence[Request], comps: Sequence[Completion], rewards: Sequence[float], group_size: int
) -> TrainBatch:
    """One step's :class:`TrainBatch` from its requests, completions (request order) and rewards: sample i is request
    i's prompt + completion with rank i, its advantage the group-normalized reward (:func:`group_advantages`).
    Refused, one line: a reward count that is not the completion count, an empty completion, a completion whose
    log-probs are not one per token."""
    if len(rewards) != len(comps):
        raise RLInputError(f"{len(rewards)} rewards for {len(comps)} completions")
    for comp in comps:
        if not comp.tokens:
            raise RLInputError(f"completion {comp.request_id} is empty")
        if len(comp.logprobs) != len(comp.tokens):
            raise RLInputError(
                f"completion {comp.request_id} has {len(comp.tokens)} tokens and {len(comp.logprobs)} log-probs"
            )
    adv = group_advantages(rewards, group_size)
    samples = tuple(
        Sample(i, tuple(r.prompt) + tuple(c.tokens), len(r.prompt), c.request_id)
        for i, (r, c) in enumerate(zip(reqs, comps))
    )
    n_tok = sum(len(c.tokens) for c in comps)
    return TrainBatch(samples, tuple(tuple(c.logprobs) for c in comps), tuple(adv), n_tok)


class RolloutEngine(Protocol):
    def generate(self, requests: list[Request]) -> list[Completion]:
        """Completions in request order, each with its sampled tokens and their log-probs (T = 1)."""

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Serve these weights (HF names) from the next request on, with nothing cached from the old ones."""


class PolicyTrainer(Protocol):
    def train_step(self, batch: TrainBatch) -> tuple[list[list[float]], float, float]:
        """Recompute the completion tokens' log-probs (returned per sample, before the update), the PPO-clip loss
        against the rollout's, backward, the optimizer step. Returns (log-probs, loss, gradient norm)."""

    def weights(self) -> dict[str, torch.Tensor]:
        """The current weights, whole, by HF name (what the rollout engine loads)."""


def run_on_engines(
    rollout: RolloutEngine, trainer: PolicyTrainer, config: GRPOConfig, task: CopyTask = CopyTask()
) -> Iterator[StepLog]:
    """The GRPO loop with rollouts from ``rollout`` and updates by ``trainer`` (:meth:`Trainer.step`'s recipe:
    :func:`step_requests`, the task's rewards, :func:`group_advantages`, PPO-clip against the rollout's log-probs),
    the new weights pushed into the engine after every step; yields each step's :class:`StepLog`, whose metrics
    compare the engine's log-probs with the trainer's (:func:`mismatch_metrics`)."""
    for step in range(config.steps):
        reqs = step_requests(config, task, step)
        comps = rollout.generate(reqs)
        if len(comps) != len(reqs):
            raise RLInputError(f"step {step}: {len(comps)} completions for {len(reqs)} requests")
        rewards = [task.reward(r.prompt, c.tokens) for r, c in zip(reqs, comps)]
        batch = train_batch(reqs, comps, rewards, config.group_size)
        n_tok = batch.n_tokens
        trainer_lp, loss, grad_norm = trainer.train_step(batch)
        old = torch.tensor([lp for c in comps for lp in c.logprobs], dtype=F32, device="cpu")
        new = torch.tensor([lp for lps in trainer_lp for lp in lps], dtype=F32, device="cpu")
        metrics = mismatch_metrics(old, new, [len(c.tokens) for c in comps], config.clip_eps)
        rollout.load_weights(trainer.weights())
        yield StepLog(step, float(sum(rewards) / len(rewards)), rewards, loss, n_tok, metrics, grad_norm, comps)


def weights_digest(model: Qwen3ForCausalLM) -> str:
    """sha256 over every parameter's raw bits, in name order: two runs' weights are equal iff these are."""
    h = hashlib.sha256()
    for n, p in sorted(model.named_parameters()):
        h.update(n.encode())
        h.update(p.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
