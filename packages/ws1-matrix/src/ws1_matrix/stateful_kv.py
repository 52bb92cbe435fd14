"""C7 stateful KV: B1 (contiguous cache) and B2 (paged cache), at operator and model level.

    python -m ws1_matrix c7 cpu_bf16 [--model tiny] [--json]        (nox -s c7_stateful_kv -- cpu_bf16)

B1: write S−1 tokens and read them back exactly, the cursor advances, a decode step is finite;
generate then rescore — by teacher forcing (the trainer) and by forced decode (direct) — matches
the log-probs generate returned, bitwise.
B2: paged decode equals contiguous decode (operator level and a whole generate), bitwise; a warm
prefix (blocks another request left in the cache) continued equals a cold run, bitwise, and the
cache really served the prefix; a request decoding in a batch that others join and leave equals
the request alone; a failing request leaves the other requests' cache entries untouched.
"""

from __future__ import annotations

import ws1_accel
import ws1_ops
from ws1_contract import Cell, Comparison, bitwise, gate_main, judged
from ws1_kv import KVCacheError
from ws1_qwen3.generate import Request, generate
from ws1_qwen3.model import ModelInputError
from ws1_qwen3.teacher import Sample, fixture_samples, teacher_forcing

from . import parity
from .cells import comparison_cell, error_cell, parity_cell
from .kv_ops import b1_roundtrip, paged_vs_contiguous
from .modelkit import attach_provenance, build_model, log


def _requests(samples, temperature: float = 1.0) -> list[Request]:
    return [
        Request(
            prompt=s.tokens[: s.n_prompt],
            max_new_tokens=len(s.completion),
            temperature=temperature,
            seed=1000 + s.rank,
            request_id=f"s{s.rank}",
        )
        for s in samples
    ]


def _same(a, b, what: str) -> Comparison:
    """Tokens equal and log-probs bitwise equal, request by request."""
    import torch

    for x, y in zip(a, b):
        if x.tokens != y.tokens:
            return Comparison(False, f"{what}: request {x.request_id} sampled {x.tokens} vs {y.tokens}")
    lp = lambda cs: torch.tensor([v for c in cs for v in c.logprobs], dtype=torch.float32, device="cpu")  # noqa: E731
    return bitwise(lp(a), lp(b), what)


def _as_samples(completions, ranks) -> list[Sample]:
    return [
        Sample(rank=r, tokens=tuple(c.prompt) + tuple(c.tokens), n_prompt=len(c.prompt))
        for c, r in zip(completions, ranks)
    ]


def model_cells(model, manifest, contract):
    import torch

    samples = fixture_samples(manifest)
    ranks = [s.rank for s in samples]
    longest = max(s.length for s in samples)
    reqs = _requests(samples)

    def contiguous():
        return model.new_cache("contiguous", max_seqs=len(reqs), max_len=longest)

    # B1: generate, then rescore two ways
    gen = generate(model, reqs, cache=contiguous())
    lp = torch.tensor([v for c in gen for v in c.logprobs], dtype=torch.float32, device="cpu")
    again = _as_samples(gen, ranks)
    tf = teacher_forcing(model, again, layout="padded_right", padded_length=max(20, longest))
    yield parity_cell(
        "b1/generate-then-rescore-tf",
        parity.judge(tf.logp[tf.active], lp, contract),
        parity.LHS,
        parity.RHS,
        model=model.config.name,
        tokens=[c.tokens for c in gen],
    )
    direct = parity.rollout_logp(model, again, cache="contiguous")
    yield comparison_cell(
        "b1/generate-then-rescore-decode",
        "stateful_kv",
        bitwise(direct, lp, "B1: forced decode of the generated tokens vs generate's log-probs"),
        lhs="transformed_config",
        rhs="canonical_config",
    )

    # B2: paged generate equals contiguous generate
    paged = generate(model, reqs, cache=model.new_cache("paged", max_seqs=len(reqs), max_len=longest, block_size=4))
    yield comparison_cell(
        "b2/paged-vs-contiguous-generate",
        "stateful_kv",
        _same(paged, gen, "B2: paged vs contiguous generate"),
        lhs="transformed_config",
        rhs="canonical_config",
    )

    # B2: continuous batching — 2 slots, 4 requests of different lengths vs each request alone
    batched = generate(model, reqs, max_batch=2, block_size=4)
    alone = [generate(model, [r], block_size=4)[0] for r in reqs]
    yield comparison_cell(
        "b2/continuous-batching-vs-alone",
        "stateful_kv",
        _same(batched, alone, "requests joining/leaving a 2-slot batch vs each alone"),
        lhs="transformed_config",
        rhs="canonical_config",
    )

    # B2: warm prefix == cold
    long = manifest.fixtures.long
    prompt = tuple(long.prompt)
    bs = 4
    x = Request(prompt=prompt, max_new_tokens=6, temperature=1.0, seed=77, request_id="x")
    cold = generate(model, [x], block_size=bs)[0]
    cache = model.new_cache("paged", max_seqs=2, max_len=len(prompt) + 8, block_size=bs)
    warmup = Request(prompt=prompt[:12] + (1, 2, 3), max_new_tokens=2, temperature=0.0, request_id="w")
    generate(model, [warmup], cache=cache)  # leaves prompt[:12] in 3 registered blocks
    warm = generate(model, [x], cache=cache)[0]
    cmp = _same([warm], [cold], "B2: warm prefix continued vs cold")
    if cmp.passed and warm.prefix_hit_tokens == 0:
        cmp = Comparison(False, "B2: the warm run reused no cached block: prefix reuse was not exercised")
    yield comparison_cell(
        "b2/warm-prefix-vs-cold",
        "stateful_kv",
        cmp,
        lhs="transformed_config",
        rhs="canonical_config",
        prefix_hit_tokens=warm.prefix_hit_tokens,
        block_size=bs,
    )

    # failing requests leave other requests' entries untouched
    yield isolation_cell(model)


def isolation_cell(model) -> Cell:
    """A sequence's K/V and cursor survive bad requests beside it: an out-of-vocabulary id, a cache
    overflow, a decode on a finished sequence — each raises one clear error."""
    cache = model.new_cache("paged", max_seqs=2, max_len=16, block_size=4, num_blocks=5)
    cache.begin("a")
    model.prefill(cache, {"a": [5, 6, 7, 8, 9]})
    before = [cache.read(i, "a") for i in range(model.config.num_hidden_layers)]
    n0 = cache.length("a")
    errors = []
    cache.begin("b")
    attempts = (
        ("token id >= vocab", lambda: model.prefill(cache, {"a": [1], "b": [model.config.vocab_size]})),
        ("cache full", lambda: model.prefill(cache, {"a": [1], "b": list(range(1, 15))})),
        ("decode on a finished sequence", lambda: (cache.finish("b"), model.decode(cache, {"a": 1, "b": 2}))),
    )
    for what, fn in attempts:
        try:
            fn()
            errors.append(f"{what}: NOT refused")
        except (ModelInputError, KVCacheError) as exc:
            errors.append(f"{what}: {type(exc).__name__}")
    after = [cache.read(i, "a") for i in range(model.config.num_hidden_layers)]
    same = all(bitwise(x[0], y[0]).passed and bitwise(x[1], y[1]).passed for x, y in zip(before, after))
    ok = same and cache.length("a") == n0 and not any("NOT refused" in e for e in errors)
    return judged(
        "isolation/failing-request",
        "stateful_kv",
        ok,
        detail=(
            f"{'; '.join(errors)}; sequence a: K/V {'unchanged' if same else 'CHANGED'}, "
            f"cursor {n0} -> {cache.length('a')}"
        ),
    )


def c7(run, args) -> None:
    profile = run.profile
    dev = ws1_accel.resolve_device(profile)
    with ws1_ops.record() as rec:
        with ws1_ops.use_profile(profile):
            for o in b1_roundtrip(device=dev) + paged_vs_contiguous(device=dev):
                run.add(comparison_cell(f"op/{o.name}", "stateful_kv", o.comparison, **o.facts))
        log("operator checks done")
        model = build_model(args.model, profile, weights=args.weights)
        try:
            for cell in model_cells(model, run.manifest, run.contract):
                run.add(cell)
        except (ModelInputError, KVCacheError) as exc:
            run.add(error_cell("model", "stateful_kv", exc))
    attach_provenance(run, rec)
    run.extra = {"model": model.config.name, "synthetic": model.synthetic}


def add_args(ap) -> None:
    ap.add_argument("--model", default="tiny", help="preset for the model-level checks (default tiny)")
    ap.add_argument("--weights", default=None, help="an HF-format checkpoint directory instead of synthetic weights")


def main(argv: list[str]) -> int:
    return gate_main(
        "c7_stateful_kv",
        c7,
        argv,
        needs_device=True,
        add_args=add_args,
        description="C7: stateful KV caches B1 (contiguous) and B2 (paged)",
    )
