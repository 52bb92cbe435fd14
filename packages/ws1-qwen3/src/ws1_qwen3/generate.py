"""generate(): a small continuous-batching rollout engine — prefill, decode, sampling on the device.

Requests join the running batch when a slot is free and leave it when they finish, so the batch a
request decodes in changes from step to step. Its tokens and log-probs do not: every kernel is
row-invariant, prefill and decode attend to the same cached BF16 K/V with the same key tiles, and
the sampler draws each request's noise from its own ``(stream, step)`` — nothing depends on which
other requests share the batch (:mod:`ws1_qwen3.sampling`, :mod:`ws1_qwen3.engine`).

Sampling is Gumbel-max over ``batch_invariant_logp`` on the device, the whole batch at once, noise from
a counter-based generator keyed by the request's stream and the step; temperature 0 is greedy (argmax
of logp, lowest id on ties). The log-prob returned for a token is the policy's,
``batch_invariant_logp(logits)[token]`` at temperature 1 — the value a trainer recomputes with
``logprob`` (bitwise equal by construction, C10 train/infer parity).

Streams: a request with a ``seed`` samples from that seed's stream (the same seed, the same tokens,
alone or in any batch); without one, from its ``request_id`` — so n samples of one prompt differ
(GRPO needs that: identical samples have zero advantage). generate() names unnamed requests
``req-<index>``; name them (or seed them) to reproduce a request outside its list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .engine import Engine, capture_refused
from .model import ModelInputError, Qwen3ForCausalLM
from .sampling import sample_token, stream_of

__all__ = ["Completion", "Request", "generate", "sample_token", "stream_of", "validate"]


@dataclass(frozen=True)
class Request:
    """One prompt to complete.

    ``seed``: the noise stream — the same seed samples the same tokens, alone or in any batch, on one profile.
    None (the default): the stream comes from ``request_id``, so unseeded requests with distinct ids sample
    independently (n samples of one prompt differ). ``temperature`` 0 is greedy."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    temperature: float = 1.0
    seed: int | None = None
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
        raise ModelInputError(
            f"request {rid}: prompt ({len(req.prompt)}) + max_new_tokens ({req.max_new_tokens}) exceeds "
            f"max_position_embeddings {c.max_position_embeddings}"
        )
    if not req.temperature >= 0:
        raise ModelInputError(f"request {rid}: temperature must be >= 0, got {req.temperature}")
    if req.seed is not None and (isinstance(req.seed, bool) or not isinstance(req.seed, int)):
        raise ModelInputError(f"request {rid}: seed must be an int or None, got {req.seed!r}")


def generate(
    model: Qwen3ForCausalLM,
    requests: Sequence[Request],
    *,
    max_batch: int = 8,
    cache=None,
    chunk: int | None = None,
    block_size: int = 16,
    progress: bool = False,
    graphs: bool | None = None,
    sync_every: int = 16,
    stats: dict | None = None,
) -> list[Completion]:
    """Run ``requests`` to completion with continuous batching; results in request order.

    ``cache``: a KV cache to use (e.g. a warm :class:`~ws1_kv.PagedKVCache`; prefix reuse applies),
    ``"paged"`` / ``"contiguous"``, or None: a fresh paged cache sized for the requests (contiguous when
    ``graphs`` is True). ``chunk``: chunked prefill. ``sync_every``: decode steps between the host's reads of
    the sampled tokens (stop tokens are found there; the draws after a stop are dropped). ``graphs``: the
    static decode step per batch bucket — CUDA graphs on a GPU, the same step run directly on a CPU — which
    needs a contiguous cache; None: on when the model is on a CUDA device and the cache is contiguous.
    ``stats``: filled with ``prefill_s``, ``decode_s``, ``decode_steps``, ``host_syncs``, ``buckets``, ``graphs_made``
    (static steps captured in this call: a contiguous cache passed again keeps its graphs and replays them).
    Every request is validated before anything runs; a bad one raises and nothing is generated."""
    reqs = [r if r.request_id else Request(**{**r.__dict__, "request_id": f"req-{i}"}) for i, r in enumerate(requests)]
    ids = [r.request_id for r in reqs]
    if len(set(ids)) != len(ids):
        raise ModelInputError(f"request ids must be unique, got {ids}")
    for r in reqs:
        validate(model, r)
    if max_batch < 1:
        raise ModelInputError(f"max_batch must be >= 1, got {max_batch}")
    if not isinstance(sync_every, int) or sync_every < 1:
        raise ModelInputError(f"sync_every must be a positive int, got {sync_every!r}")
    if cache is None or isinstance(cache, str):
        kind = cache or ("contiguous" if graphs else "paged")
        longest = max(len(r.prompt) + r.max_new_tokens for r in reqs)
        cache = model.new_cache(kind, max_seqs=min(max_batch, len(reqs)), max_len=longest, block_size=block_size)
    from ws1_kv import ContiguousKVCache

    contiguous = isinstance(cache, ContiguousKVCache)
    capture_why = capture_refused(model)
    if graphs is None:
        graphs = contiguous and model.device.type == "cuda" and model.tracer is None and capture_why is None
    if graphs:
        if capture_why is not None:
            raise ModelInputError(f"graphs=True: {capture_why}")
        if not contiguous:
            raise ModelInputError(
                "graphs=True needs a contiguous KV cache (cache='contiguous'): the replayed decode step "
                "reads each slot in place"
            )
        if cache.seqs:
            raise ModelInputError(
                "graphs=True needs a contiguous cache holding no other sequences: the decode step's "
                "dummy rows write into slots no live sequence of this run holds"
            )
        if model.tracer is not None:
            raise ModelInputError(
                "graphs=True runs no model tracer (a replayed step calls no Python): use graphs=False"
            )
    out = {r.request_id: Completion(r.request_id, tuple(r.prompt)) for r in reqs}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(r.max_new_tokens for r in reqs), desc="generate", unit="tok", leave=False)
    eng = Engine(
        model, cache, max_batch=max_batch, chunk=chunk, graphs=bool(graphs), sync_every=sync_every, progress=bar
    )
    waiting = list(reqs)
    try:
        with torch.no_grad():
            while waiting or eng.running:
                admit = []
                while waiting and len(eng.running) + len(admit) < eng.max_running:
                    admit.append(waiting.pop(0))
                if admit:
                    eng.admit(admit, out)
                eng.decode_window()
                eng.sync(out)
    finally:
        if bar is not None:
            bar.close()
    if stats is not None:
        t = eng.clock.totals()
        stats.update(
            {
                "prefill_s": t.get("prefill", 0.0),
                "decode_s": t.get("decode", 0.0),
                "decode_steps": eng.n_decode_steps,
                "host_syncs": eng.n_syncs,
                "graphs": bool(graphs),
                "buckets": sorted(eng.buckets_used),
                "graphs_made": eng.captured,
                "sync_every": sync_every,
            }
        )
    return [out[r.request_id] for r in reqs]
