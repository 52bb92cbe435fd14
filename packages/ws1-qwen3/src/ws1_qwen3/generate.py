"""generate(): a small continuous-batching rollout engine — prefill, decode, seeded sampling.

Requests join the running batch when a slot is free and leave it when they finish, so the batch a
request decodes in changes from step to step. Its tokens and log-probs do not: every kernel is
row-invariant, prefill and decode attend to the same cached BF16 K/V with the same key tiles, and
the sampler draws each request's noise from its own ``(seed, step)`` — nothing depends on which
other requests share the batch.

Sampling is Gumbel-max over ``batch_invariant_logp``: token = argmax(logp / T + g) with
g = −log(−log u), u ~ U(0,1) from a generator seeded by (request seed, step); temperature 0 is
greedy (argmax of logp, lowest id on ties). The log-prob returned for a token is the policy's,
``batch_invariant_logp(logits)[token]`` at temperature 1 — the value a trainer recomputes with
``logprob`` (bitwise equal by construction, C10 train/infer parity).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .model import ModelInputError, Qwen3ForCausalLM


@dataclass(frozen=True)
class Request:
    prompt: tuple[int, ...]
    max_new_tokens: int
    temperature: float = 1.0
    seed: int = 0
    request_id: str = ""
    stop_token_ids: tuple[int, ...] = ()


@dataclass
class Completion:
    request_id: str
    prompt: tuple[int, ...]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = ""
    prefix_hit_tokens: int = 0


def _noise_seed(seed: int, step: int) -> int:
    return int.from_bytes(hashlib.sha256(f"ws1-gumbel:{seed}:{step}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def sample_token(logp: torch.Tensor, temperature: float, seed: int, step: int) -> int:
    """One token from logp [V] (FP32 log-probs): greedy at temperature 0, else Gumbel-max."""
    if temperature == 0:
        return int(torch.argmax(logp))
    g = torch.Generator().manual_seed(_noise_seed(seed, step))
    u = torch.rand(logp.shape, generator=g, dtype=torch.float64, device="cpu").clamp_(1e-300, 1.0 - 1e-16)
    gumbel = -torch.log(-torch.log(u))
    return int(torch.argmax(logp.double().cpu() / temperature + gumbel))


def validate(model: Qwen3ForCausalLM, req: Request) -> None:
    c = model.config
    rid = req.request_id or "?"
    if not req.prompt:
        raise ModelInputError(f"request {rid}: empty prompt")
    bad = [t for t in req.prompt if not 0 <= int(t) < c.vocab_size]
    if bad:
        raise ModelInputError(f"request {rid}: token id {bad[0]} is outside the vocabulary [0, {c.vocab_size})")
    if not isinstance(req.max_new_tokens, int) or req.max_new_tokens < 1:
        raise ModelInputError(f"request {rid}: max_new_tokens must be a positive int, got {req.max_new_tokens!r}")
    if len(req.prompt) + req.max_new_tokens > c.max_position_embeddings:
        raise ModelInputError(f"request {rid}: prompt ({len(req.prompt)}) + max_new_tokens ({req.max_new_tokens}) exceeds "
                              f"max_position_embeddings {c.max_position_embeddings}")
    if not req.temperature >= 0:
        raise ModelInputError(f"request {rid}: temperature must be >= 0, got {req.temperature}")


def generate(model: Qwen3ForCausalLM, requests: Sequence[Request], *, max_batch: int = 8, cache=None, chunk: int | None = None,
             block_size: int = 16, progress: bool = False) -> list[Completion]:
    """Run ``requests`` to completion with continuous batching; results in request order.

    ``cache``: a KV cache to use (e.g. a warm :class:`~ws1_kv.PagedKVCache`; prefix reuse applies),
    or None for a fresh paged cache sized for the requests. ``chunk``: chunked prefill. Every
    request is validated before anything runs; a bad one raises and nothing is generated."""
    reqs = [r if r.request_id else Request(**{**r.__dict__, "request_id": f"req-{i}"}) for i, r in enumerate(requests)]
    ids = [r.request_id for r in reqs]
    if len(set(ids)) != len(ids):
        raise ModelInputError(f"request ids must be unique, got {ids}")
    for r in reqs:
        validate(model, r)
    if max_batch < 1:
        raise ModelInputError(f"max_batch must be >= 1, got {max_batch}")
    if cache is None:
        longest = max(len(r.prompt) + r.max_new_tokens for r in reqs)
        cache = model.new_cache("paged", max_seqs=min(max_batch, len(reqs)), max_len=longest, block_size=block_size)
    out = {r.request_id: Completion(r.request_id, tuple(r.prompt)) for r in reqs}
    waiting = list(reqs)
    running: dict[str, Request] = {}
    pending: dict[str, int] = {}              # request -> the token to feed at the next decode step
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(r.max_new_tokens for r in reqs), desc="generate", unit="tok", leave=False)

    def emit(r: Request, logits: torch.Tensor) -> None:
        comp = out[r.request_id]
        logp = model.rollout_logp(logits[None])[0]
        tok = sample_token(logp, r.temperature, r.seed, len(comp.tokens))
        comp.tokens.append(tok)
        comp.logprobs.append(float(logp[tok]))
        if bar is not None:
            bar.update(1)
        if tok in r.stop_token_ids or len(comp.tokens) >= r.max_new_tokens:
            comp.finish_reason = "stop" if tok in r.stop_token_ids else "length"
            if bar is not None:
                bar.update(r.max_new_tokens - len(comp.tokens))
            cache.finish(r.request_id)
            cache.free(r.request_id)
            del running[r.request_id]
        else:
            pending[r.request_id] = tok

    try:
        while waiting or running:
            admit = []
            while waiting and len(running) + len(admit) < max_batch:
                admit.append(waiting.pop(0))
            if admit:
                prompts = {}
                for r in admit:
                    hit = cache.begin(r.request_id, r.prompt)
                    out[r.request_id].prefix_hit_tokens = hit
                    prompts[r.request_id] = r.prompt[hit:]
                    running[r.request_id] = r
                for rid, logits in model.prefill(cache, prompts, chunk=chunk).items():
                    emit(running[rid], logits)
            if pending:
                step = dict(pending)
                pending.clear()
                for rid, logits in model.decode(cache, step).items():
                    emit(running[rid], logits)
    finally:
        if bar is not None:
            bar.close()
    return [out[r.request_id] for r in reqs]
