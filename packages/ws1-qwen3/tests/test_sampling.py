"""The device sampler (ws1_qwen3.sampling): its generator equals a plain-integer reference, a row's noise and
token depend on nothing but its own key, it samples softmax(logp / T) exactly, and temperature 0 is greedy."""

import math
import random

import pytest
import torch

from ws1_qwen3 import sampling as S


def test_the_generator_is_the_reference_in_plain_integers():
    """Keys and uniform bits from int64 tensor ops equal SplitMix64 written with Python ints: no bit depends on
    a vector width, an overflow rule or the device (a GPU runs the same int64 ops; tests_device compares)."""
    rnd = random.Random(0)
    streams = [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, *[rnd.getrandbits(64) for _ in range(20)]]
    steps = [0, 1, 2, 255, 1 << 31, (1 << 62) + 3]
    n = 700
    for st in streams:
        for sp in steps:
            k = S.keys(torch.tensor(S.as_int64([st]), device="cpu"), torch.tensor([sp], device="cpu"))
            assert k.tolist() == S.as_int64([S.key_ref(st, sp)])
            bits = S.uniform_bits(k, n)[0].tolist()
            assert bits == S.as_int64([S.uniform_bits_ref(st, sp, i) for i in range(n)]), (st, sp)
            u = S.uniform(k, n)[0].tolist()
            assert u == [S.uniform_ref(st, sp, i) for i in range(n)]
            assert 0.0 < min(u) and max(u) < 1.0


def test_the_reference_can_tell_a_wrong_generator():
    """The comparison above can fail: one constant off (M1 with its lowest bit flipped) changes the bits."""
    st, sp = 12345, 7
    good = S.uniform_bits_ref(st, sp, 3)
    z = (S.key_ref(st, sp) + 4 * S.GAMMA) & S.MASK64
    z = ((z ^ (z >> 30)) * (S.M1 ^ 1)) & S.MASK64
    z = ((z ^ (z >> 27)) * S.M2) & S.MASK64
    assert z ^ (z >> 31) != good


def _batch(n, V, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    logp = torch.log_softmax(torch.randn(n, V, generator=g, device="cpu") * 3, -1)
    temp = torch.tensor([0.0, 1.0, 0.7, 1.3, 1.0, 0.0, 2.0, 1.0, 0.5, 1.0, 1.0][:n], dtype=torch.float32, device="cpu")
    streams = torch.tensor(S.as_int64([S.stream_of(None, f"r{i}") for i in range(n)]), device="cpu")
    steps = torch.tensor([3 * i + 1 for i in range(n)], dtype=torch.int64, device="cpu")
    return logp, temp, streams, steps


@pytest.mark.parametrize("V", [1000, 1024, 3])
def test_a_rows_noise_and_token_never_depend_on_its_batch(V):
    """Alone, at every position of batches of other sizes, permuted: the same noise bits, token and log-prob."""
    n = 11
    logp, temp, streams, steps = _batch(n, V, V)
    tok, lp = S.sample(logp, temp, streams, steps)
    g = S.gumbel(S.keys(streams, steps), S.n_blocks(V) + S.BLOCK)
    for i in range(n):
        t1, l1 = S.sample(logp[i : i + 1], temp[i : i + 1], streams[i : i + 1], steps[i : i + 1])
        assert t1.item() == tok[i].item() and l1.view(torch.int32).item() == lp[i].view(torch.int32).item(), i
        g1 = S.gumbel(S.keys(streams[i : i + 1], steps[i : i + 1]), S.n_blocks(V) + S.BLOCK)
        assert torch.equal(g1.view(torch.int64), g[i : i + 1].view(torch.int64))
    for perm in (
        torch.randperm(n, generator=torch.Generator(device="cpu").manual_seed(1), device="cpu"),
        torch.arange(n - 1, -1, -1, device="cpu"),
    ):
        t2, l2 = S.sample(logp[perm], temp[perm], streams[perm], steps[perm])
        assert torch.equal(t2, tok[perm]) and torch.equal(l2.view(torch.int32), lp[perm].view(torch.int32))
    # inside a bigger batch padded with rows of garbage (NaN logits: a decode graph's dummy rows)
    junk = torch.full((5, V), float("nan"), device="cpu")
    big = torch.cat([junk[:2], logp, junk[2:]])
    t3, _ = S.sample(
        big,
        torch.cat([torch.ones(2, device="cpu"), temp, torch.ones(3, device="cpu")]),
        torch.cat([streams[:2], streams, streams[:3]]),
        torch.cat([steps[:2], steps, steps[:3]]),
    )
    assert torch.equal(t3[2 : 2 + n], tok)
    assert int(t3.min()) >= 0 and int(t3.max()) < V  # a NaN row still gives an id in range


def test_the_log_prob_is_the_policy_value_and_temperature_zero_is_greedy_lowest_id():
    logp, temp, streams, steps = _batch(11, 1000, 5)
    tok, lp = S.sample(logp, temp, streams, steps)
    assert torch.equal(lp.view(torch.int32), logp.gather(1, tok[:, None])[:, 0].view(torch.int32))
    for i in (0, 5):
        assert tok[i].item() == int(logp[i].argmax())
    tied = torch.full((1, 300), -5.0, device="cpu")
    tied[0, 17] = tied[0, 200] = -0.1
    t, _ = S.sample(tied, torch.zeros(1, device="cpu"), streams[:1], steps[:1])
    assert t.item() == 17


@pytest.mark.parametrize("block", [8, S.BLOCK])
def test_it_samples_softmax_over_temperature(block):
    """Chi-square of 40000 draws (one stream, 40000 steps) against softmax(logp / T), V 40: with block 8 the
    two-level draw spans 5 blocks, with the default one block (plain Gumbel-max). The 99.9 % point of
    chi2(39) is 72.1: a biased sampler (e.g. the block masses without the row max, or logp not divided by
    T) lands in the hundreds."""
    V, N, T = 40, 40000, 0.8
    g = torch.Generator(device="cpu").manual_seed(3)
    logp = torch.log_softmax(torch.randn(V, generator=g, device="cpu") * 2, -1)
    p = torch.softmax(logp.double() / T, -1)
    tok, _ = S.sample(
        logp.expand(N, V).contiguous(),
        torch.full((N,), T, device="cpu"),
        torch.full((N,), S.as_int64([S.stream_of(7, "")])[0], dtype=torch.int64, device="cpu"),
        torch.arange(N, device="cpu"),
        block=block,
    )
    cnt = torch.bincount(tok, minlength=V).double()
    chi2 = float(((cnt - N * p) ** 2 / (N * p)).sum())
    assert chi2 < 72.1, chi2
    # ... and the test can fail: T ignored (sampling softmax(logp)) is far off
    q = torch.softmax(logp.double(), -1)
    assert float(((cnt - N * q) ** 2 / (N * q)).sum()) > 200


def test_streams_seeded_and_unseeded():
    assert S.stream_of(7, "a") == S.stream_of(7, "b")  # a seed names the stream, whatever the id
    assert S.stream_of(None, "a") != S.stream_of(None, "b")
    assert S.stream_of(None, "7") != S.stream_of(7, "7")  # two domains
    assert all(0 <= S.stream_of(s, "") < 1 << 64 for s in (0, -1, 1 << 70))


def test_sample_token_is_one_row_of_sample():
    logp, temp, streams, steps = _batch(4, 1000, 9)
    tok, _ = S.sample(logp, temp, streams, steps)
    st = [v + (1 << 64) if v < 0 else v for v in streams.tolist()]
    assert [S.sample_token(logp[i], float(temp[i]), st[i], int(steps[i])) for i in range(4)] == tok.tolist()
    assert not math.isnan(S.uniform_ref(1, 2, 3))
