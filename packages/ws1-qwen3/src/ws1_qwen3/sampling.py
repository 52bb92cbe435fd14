"""Sampling on the device: Gumbel-max over ``batch_invariant_logp`` with noise from a counter-based generator.

A request's noise is a pure function of its *stream* (a 64-bit key: its seed, or its request id when no seed
is given — :func:`stream_of`), the sampling *step* (0 for the token sampled from the prompt's logits, then
1, 2, ...) and the noise *index* — never of its row in the batch, the batch size or what else is in the batch:
the same request samples the same tokens alone or in any batch, on every run (on one profile: another
profile's logits round differently). The whole batch is sampled at once on the logits' device; nothing is
copied to the host.

The generator (SplitMix64's output function as a counter-based hash, Steele, Lea & Flood 2014)::

    key(stream, step) = mix64(stream + (step + 1) * GAMMA)            mod 2**64
    bits(key, i)      = mix64(key + (i + 1) * GAMMA)                   mod 2**64
    mix64(z)          = z ^= z >> 30; z *= M1; z ^= z >> 27; z *= M2; z ^= z >> 31
    u                 = ((bits >> 12) + 0.5) * 2**-52                  in (0, 1), exact in FP64

It is written with int64 tensor ops (wrapping adds and multiplies, logical shifts as arithmetic shift + mask),
which are exact on every device: the CPU and a GPU produce the same uniform bits for a key, and both equal
:func:`uniform_bits_ref` in plain Python integers (tested). The Gumbel transform ``-log(-log(u))`` is FP64
``log`` on the device; its last bit may differ between a CPU and a GPU, never between two rows of one device.

Two-level Gumbel-max (exact in distribution, O(sqrt V) draws per token instead of V): the vocabulary is cut
into fixed blocks of :data:`BLOCK` ids (the last padded with -inf); block j's log-mass
``M_j = m + log(sum_{v in j} exp(z_v - m))`` (z = logp / T, m the row max, the sum a fixed pairwise tree of
elementwise adds, so a row's bits depend on that row alone); the block is ``argmax_j (M_j + G_j)`` and the
token the argmax of ``z_v + g_v`` inside it, with fresh noise. P(v) = P(block) * P(v | block) = softmax(z)_v:
the max of a block's Gumbel-perturbed logits is a Gumbel at the block's log-mass, and the argmax inside a
block is independent of it. The draws: ``n_blocks`` for the blocks, then :data:`BLOCK` for the ids inside
(``index`` = n_blocks + offset in the block): 594 + 256 per token at V = 151936.

Temperature 0 is greedy: ``argmax(logp)``, the lowest id on ties. The log-prob returned for a token is the
policy's, ``logp[token]`` at temperature 1 — the value the trainer's ``logprob`` recomputes bit for bit.
"""

from __future__ import annotations

import hashlib

import torch

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB
BLOCK = 256  # vocabulary ids per block of the two-level draw (a constant: a row's bits never depend on it moving)


def _s64(x: int) -> int:
    """A uint64 as the int64 with the same bits (what a torch int64 tensor holds)."""
    x &= MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


# ---- the reference, in Python integers --------------------------------------------------------------------


def mix64_ref(z: int) -> int:
    z &= MASK64
    z = ((z ^ (z >> 30)) * M1) & MASK64
    z = ((z ^ (z >> 27)) * M2) & MASK64
    return z ^ (z >> 31)


def key_ref(stream: int, step: int) -> int:
    return mix64_ref(stream + (step + 1) * GAMMA)


def uniform_bits_ref(stream: int, step: int, index: int) -> int:
    """The 64 random bits of noise draw ``index`` of ``(stream, step)`` (uint64, plain Python)."""
    return mix64_ref(key_ref(stream, step) + (index + 1) * GAMMA)


def uniform_ref(stream: int, step: int, index: int) -> float:
    return ((uniform_bits_ref(stream, step, index) >> 12) + 0.5) * 2.0**-52


# ---- streams --------------------------------------------------------------------------------------------------


def stream_of(seed: int | None, request_id: str) -> int:
    """A request's 64-bit noise stream: from its ``seed`` when one is given (the same seed, the same
    samples, whatever the request is called or where it runs), else from its ``request_id`` (distinct
    requests, distinct samples: n unseeded samples of one prompt differ). Two domains, so a seed and an id
    never share a stream by construction."""
    tag = f"ws1-seed:{int(seed)}" if seed is not None else f"ws1-request:{request_id}"
    return int.from_bytes(hashlib.sha256(tag.encode()).digest()[:8], "little")


def as_int64(values) -> list[int]:
    """uint64 stream keys as the int64 values a tensor holds."""
    return [_s64(v) for v in values]


# ---- the generator as int64 tensor ops -------------------------------------------------------------------------


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical shift right of int64 bit patterns (torch's >> is arithmetic: mask the sign copies off)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finalizer on int64 tensors (wrapping multiplies: the low 64 bits, as uint64 arithmetic)."""
    z = (z ^ _shr(z, 30)) * _s64(M1)
    z = (z ^ _shr(z, 27)) * _s64(M2)
    return z ^ _shr(z, 31)


def keys(streams: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """[B] int64 streams and steps -> [B] int64 keys of the rows' draws at their steps."""
    return mix64(streams + (steps + 1) * _s64(GAMMA))


_OFFSETS: dict[tuple[int, str], torch.Tensor] = {}


def _offsets(n: int, device: torch.device) -> torch.Tensor:
    """(i + 1) * GAMMA mod 2**64 for i < n, as int64 on ``device`` (made once per size and device)."""
    k = (n, str(device))
    if k not in _OFFSETS:
        _OFFSETS[k] = torch.arange(1, n + 1, dtype=torch.int64, device=device) * _s64(GAMMA)
    return _OFFSETS[k]


def uniform_bits(row_keys: torch.Tensor, n: int) -> torch.Tensor:
    """[B] int64 keys -> [B, n] int64: the bit patterns of draws 0..n-1 of each row (uint64 as int64)."""
    return mix64(row_keys[:, None] + _offsets(n, row_keys.device)[None, :])


def uniform(row_keys: torch.Tensor, n: int) -> torch.Tensor:
    """[B] keys -> [B, n] FP64 uniforms in (0, 1): the top 52 bits + 1/2, times 2**-52 (every step exact)."""
    return (_shr(uniform_bits(row_keys, n), 12).double() + 0.5) * 2.0**-52


def gumbel(row_keys: torch.Tensor, n: int) -> torch.Tensor:
    """[B] keys -> [B, n] FP64 standard Gumbel noise -log(-log(u))."""
    return uniform(row_keys, n).log().neg_().log_().neg_()


# ---- sampling ---------------------------------------------------------------------------------------------------


def n_blocks(vocab: int, block: int = BLOCK) -> int:
    return -(-vocab // block)


def sample(
    logp: torch.Tensor, temperature: torch.Tensor, streams: torch.Tensor, steps: torch.Tensor, block: int = BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row, on the logits' device, with no host sync.

    logp [B, V] FP32 (``batch_invariant_logp``), temperature [B] (0: greedy), streams / steps [B] int64 ->
    (tokens [B] int64, their log-probs [B] FP32 = logp[row, token]). Row b's token depends only on
    (logp[b], temperature[b], streams[b], steps[b]). See the module docstring for the draw."""
    B, V = logp.shape
    dev = logp.device
    nb = n_blocks(V, block)
    greedy = logp.argmax(1)  # first max: the lowest id on ties
    t = temperature.to(device=dev, dtype=torch.float32)
    hot = t > 0
    z = logp / torch.where(hot, t, torch.ones_like(t))[:, None]  # T = 1: exact (x / 1 == x)
    if nb * block > V:  # the last block padded with -inf (mass +0)
        z = torch.nn.functional.pad(z, (0, nb * block - V), value=float("-inf"))
    m = z.amax(1, keepdim=True)  # exact: max is order-free
    s = (z - m).exp_().view(B, nb, block)
    w = block
    while w > 1:  # the block sums: a fixed pairwise tree
        w //= 2
        s = s[..., :w] + s[..., w:]
    mass = s[..., 0].log_().add_(m)  # [B, nb] log-mass of each block (FP32)
    g = gumbel(keys(streams.to(dev), steps.to(dev)), nb + block)
    blk = (mass.double() + g[:, :nb]).argmax(1)  # the block
    ids = blk[:, None] * block + torch.arange(block, dtype=torch.int64, device=dev)[None, :]
    inner = (z.gather(1, ids).double() + g[:, nb:]).argmax(1)  # the id inside it
    tok = torch.where(hot, blk * block + inner, greedy).clamp_(0, V - 1)  # NaN rows (dummies) stay in range
    return tok, logp.gather(1, tok[:, None]).squeeze(1)


def sample_token(logp: torch.Tensor, temperature: float, stream: int, step: int) -> int:
    """One token from logp [V] (one row of :func:`sample`; reads it back to the host)."""
    dev = logp.device
    tok, _ = sample(
        logp[None],
        torch.tensor([temperature], dtype=torch.float32, device=dev),
        torch.tensor(as_int64([stream]), dtype=torch.int64, device=dev),
        torch.tensor([step], dtype=torch.int64, device=dev),
    )
    return int(tok[0])
