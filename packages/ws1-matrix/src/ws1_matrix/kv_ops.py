"""C6 and C7 checks at operator level: attention decode vs prefill through the cache, B1 and B2.

Each check runs the active profile's kernels (call it inside ``ws1_ops.use_profile(...)`` or, for a
negative control, ``ws1_ops.use_candidate(name)``) and returns :class:`~ws1_matrix.cells.Outcome`
records: a name, a raw-bit :class:`~ws1_contract.Comparison`, and facts for the evidence. The
model-level checks (decode vs teacher forcing, generate-then-rescore, warm vs cold prefix on a
model) are in :mod:`ws1_matrix.decode_prefill` and :mod:`ws1_matrix.stateful_kv`, the C6/C7 gates.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

import ws1_ops
from ws1_contract import Comparison, bitwise
from ws1_kv import ContiguousKVCache, KVCache, PagedKVCache, cached_attention

from .cells import Outcome

BF16 = torch.bfloat16

# docs/design.md §6: (case id, sequence lengths, layout of the prefill batch)
DECODE_CASES: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("b1-len8", (8,), "packed"),
    ("b1-len32", (32,), "packed"),
    ("b1-len19", (19,), "packed"),
    ("b4-varlen", (11, 16, 13, 19), "packed"),
    ("b4-padded-right20", (11, 16, 13, 19), "padded_right"),
    ("b4-padded-left20", (11, 16, 13, 19), "padded_left"),
)
PADDED_LENGTH = 20
CHUNK = 7


def _qkv(lengths: Sequence[int], hq: int, hkv: int, d: int, seed: int, device) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        out.append(
            tuple((torch.randn(n, h, d, generator=g, device="cpu") * 2).to(BF16).to(device) for h in (hq, hkv, hkv))
        )
    return out


def _prefill(seqs, layout: str, device) -> list[torch.Tensor]:
    """Full prefill of every sequence in one attention call over ``layout``; outputs per sequence."""
    lengths = [q.shape[0] for q, _, _ in seqs]
    if layout == "packed":
        q, k, v = (torch.cat([s[i] for s in seqs]) for i in range(3))
        cu = ws1_ops.cu_seqlens_from_lengths(torch.tensor(lengths, device="cpu")).to(device)
        pos = torch.cat([torch.arange(n, device="cpu") for n in lengths]).to(device)
        out = ws1_ops.attention(q, k, v, cu, cu, pos)
        return list(out.split(lengths))
    # padded [B, S, H, D], garbage (seeded, ×3) in the pad rows; all B*S rows go into the kernel, each
    # sequence and each run of pad rows its own segment (pad rows are queries no real row attends to)
    B, S = len(seqs), PADDED_LENGTH
    valid = torch.zeros(B, S, dtype=torch.bool, device="cpu")
    for b, n in enumerate(lengths):
        if layout == "padded_right":
            valid[b, :n] = True
        else:
            valid[b, S - n :] = True
    g = torch.Generator().manual_seed(S)
    padded = []
    for i in range(3):
        h, d = seqs[0][i].shape[1:]
        t = (torch.randn(B, S, h, d, generator=g, device="cpu") * 3).to(BF16)
        for b, s in enumerate(seqs):
            t[b, valid[b]] = s[i].cpu()
        padded.append(t.flatten(0, 1).to(device))
    cu, pos = ws1_ops.padded_segments(valid)
    out = ws1_ops.attention(*padded, cu.to(device), cu.to(device), pos.to(device)).view(B, S, *padded[0].shape[1:])
    return [out[b][valid[b].to(device)] for b in range(B)]


def _through_cache(cache: KVCache, seqs, chunk: int) -> list[torch.Tensor]:
    """Feed every sequence through ``cache`` ``chunk`` positions at a time (1 = decode). Sequences
    join the batch together and leave it when done, so the batch composition changes."""
    outs: list[list[torch.Tensor]] = [[] for _ in seqs]
    for b in range(len(seqs)):
        cache.begin(b)
    t = 0
    longest = max(q.shape[0] for q, _, _ in seqs)
    while t < longest:
        live = [b for b, (q, _, _) in enumerate(seqs) if q.shape[0] > t]
        counts = {b: min(chunk, seqs[b][0].shape[0] - t) for b in live}
        step = cache.reserve(counts)
        q, k, v = (torch.cat([seqs[b][i][t : t + counts[b]] for b in live]) for i in range(3))
        out = cached_attention(cache, 0, step, q, k, v)
        for b, o in zip(live, out.split([counts[b] for b in live])):
            outs[b].append(o)
        cache.commit(step)
        for b in live:
            if seqs[b][0].shape[0] <= t + chunk:
                cache.finish(b)
                cache.free(b)
        t += chunk
    return [torch.cat(o) for o in outs]


def _cat_keys(outs: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(outs)  # sequence rank, then position: the logical-key order


def decode_vs_prefill(
    case: str,
    lengths: Sequence[int],
    layout: str,
    *,
    hq: int = 32,
    hkv: int = 8,
    d: int = 128,
    seed: int = 0,
    device="cpu",
    cache: str = "contiguous",
) -> list[Outcome]:
    """One C6 case: decode (one token per step, from the cache) and chunked prefill (7 positions per
    step) must equal the full prefill over ``layout``, bitwise, row by logical key."""
    seqs = _qkv(lengths, hq, hkv, d, seed, device)
    pre = _cat_keys(_prefill(seqs, layout, device))

    def new_cache():
        if cache == "paged":
            return PagedKVCache(1, hkv, d, num_blocks=sum(-(-n // 16) for n in lengths), block_size=16, device=device)
        return ContiguousKVCache(1, hkv, d, max_seqs=len(lengths), max_len=max(lengths), device=device)

    dec = _cat_keys(_through_cache(new_cache(), seqs, 1))
    chk = _cat_keys(_through_cache(new_cache(), seqs, CHUNK))
    facts = {
        "lengths": list(lengths),
        "layout": layout,
        "Hq": hq,
        "Hkv": hkv,
        "D": d,
        "cache": cache,
        "rows": int(pre.shape[0]),
    }
    return [
        Outcome.of(
            f"{case}/decode",
            bitwise(dec, pre, f"{case}: decode vs prefill"),
            {**facts, "variant": "decode", "against": "prefill"},
        ),
        Outcome.of(
            f"{case}/chunked{CHUNK}",
            bitwise(chk, pre, f"{case}: chunked-{CHUNK} prefill vs prefill"),
            {**facts, "variant": f"chunked{CHUNK}", "against": "prefill"},
        ),
    ]


def c6_operator_cases(*, device="cpu", seed: int = 0, cases=DECODE_CASES, **dims) -> list[Outcome]:
    """The six operator-level cases of docs/design.md §6 (Hq 32, Hkv 8, D 128 unless ``dims`` says otherwise)."""
    out = []
    for i, (name, lengths, layout) in enumerate(cases):
        out += decode_vs_prefill(name, lengths, layout, seed=seed + i, device=device, **dims)
    return out


# ---- C7 (operator level) -----------------------------------------------------------------------


def b1_roundtrip(
    *, length: int = 19, hkv: int = 8, d: int = 128, hq: int = 32, seed: int = 0, device="cpu"
) -> list[Outcome]:
    """B1: allocate → write S−1 tokens → read back exact → cursor advanced → one decode step finite."""
    g = torch.Generator().manual_seed(seed)
    k = (torch.randn(length, hkv, d, generator=g, device="cpu") * 3).to(BF16).to(device)
    v = (torch.randn(length, hkv, d, generator=g, device="cpu") * 3).to(BF16).to(device)
    q = (torch.randn(1, hq, d, generator=g, device="cpu") * 3).to(BF16).to(device)
    cache = ContiguousKVCache(1, hkv, d, max_seqs=2, max_len=length, device=device)
    cache.begin("s")
    n = length - 1
    step = cache.reserve({"s": n})
    cache.write(0, step, k[:n], v[:n])
    before = cache.length("s")
    cache.commit(step)
    rk, rv = cache.read(0, "s")
    out = []
    out.append(Outcome.of("b1/write-read-k", bitwise(rk, k[:n], "B1: K read back vs written"), {"tokens": n}))
    out.append(Outcome.of("b1/write-read-v", bitwise(rv, v[:n], "B1: V read back vs written"), {"tokens": n}))
    moved = cache.length("s") - before
    out.append(
        Outcome.of(
            "b1/cursor",
            Comparison(moved == n, f"B1: cursor advanced by {moved} (expected {n})"),
            {"cursor": cache.length("s")},
        )
    )
    step = cache.reserve({"s": 1})
    o = cached_attention(cache, 0, step, q, k[n:], v[n:])
    cache.commit(step)
    finite = bool(torch.isfinite(o.float()).all())
    out.append(
        Outcome.of(
            "b1/decode-finite",
            Comparison(finite, f"B1: decode step at position {n}: output {'finite' if finite else 'NOT finite'}"),
            {"position": n},
        )
    )
    return out


def paged_vs_contiguous(
    *,
    lengths: Sequence[int] = (11, 16, 13, 19),
    block_size: int = 4,
    hq: int = 32,
    hkv: int = 8,
    d: int = 128,
    seed: int = 0,
    device="cpu",
) -> list[Outcome]:
    """B2: decode through the paged cache (small blocks, so tables span several blocks) equals decode
    through the contiguous cache, bitwise."""
    seqs = _qkv(lengths, hq, hkv, d, seed, device)
    cont = _cat_keys(
        _through_cache(
            ContiguousKVCache(1, hkv, d, max_seqs=len(lengths), max_len=max(lengths), device=device), seqs, 1
        )
    )
    blocks = sum(-(-n // block_size) for n in lengths)
    paged = _cat_keys(
        _through_cache(PagedKVCache(1, hkv, d, num_blocks=blocks + 3, block_size=block_size, device=device), seqs, 1)
    )
    return [
        Outcome.of(
            "b2/paged-vs-contiguous",
            bitwise(paged, cont, "B2: paged decode vs contiguous decode"),
            {"lengths": list(lengths), "block_size": block_size},
        )
    ]
