"""Negative controls of ours (csrc/controls.asc): the same kernel templates with a tile chosen by the batch
(baseK by M, the UB tile by the row count, attention's key tiles by the position in the packed buffer).
Each must FAIL the invariance check that the real kernel passes — on every host, since the emulated bits are
the same IEEE operations everywhere (-ffp-contract=off) — so a green invariance check means something."""

import torch
from emu_cases import EPS, E, attention_inputs, make, same_bits

from ws1_ops.invariance import check

N = 70


def test_lm_head_with_baseK_chosen_by_M_is_caught():
    c = make("lm_head", n=N)  # K = 136: 3 chunks of 64 vs 5 of 32
    x, w = c.rows[0], c.params[0]
    # M >= 16: the variant runs the real kernel (same bits) ...
    assert same_bits(E.variant_lm_head_small_k(x, w), E.lm_head(x, w))
    # ... M < 16: baseK 32 instead of 64 -> other Mmad chunks -> other roundings of the FP32 sums
    verdicts = {v.layout: v for v in check(lambda a, b, row_keys: E.variant_lm_head_small_k(a, b), [x], [w])}
    assert not verdicts["M1"].passed and not verdicts["M7"].passed, "the baseK-by-M variant was not caught"
    assert verdicts["M16"].passed and verdicts["permuted"].passed  # only the small-M layouts change config
    real = check(lambda a, b, row_keys: E.lm_head(a, b), [x], [w])
    assert all(v.passed for v in real)


def test_rms_norm_with_tile_chosen_by_rows_is_caught():
    c = make("rms_norm", n=N)  # H = 4200 > 2048: the small tile cuts the row's sum of squares elsewhere
    x, w = c.rows[0], c.params[0]
    # judged on rstd (FP32): y's BF16 rounding would hide most of the different roundings
    verdicts = {v.layout: v for v in check(lambda a, b, row_keys: E.variant_rms_norm_small_tile(a, b, EPS)[1], [x], [w])}
    # M16 and M59 (<= 64 rows: the 4096 tile) against the canonical 70 rows (the 2048 tile); one row alone may
    # round to the same rstd by chance, 16 rows do not (fixed inputs, the same IEEE ops on every host)
    assert not verdicts["M16"].passed and not verdicts["M59"].passed, "the tile-by-rows variant was not caught"
    assert verdicts["permuted"].passed  # same row count as the canonical run: same tile, same bits
    assert same_bits(E.variant_rms_norm_small_tile(x[:10], w, EPS)[1], E.rms_norm(x[:10], w, EPS)[1])  # <= 64 rows
    real = check(lambda a, b, row_keys: E.rms_norm(a, b, EPS)[1], [x], [w])
    assert all(v.passed for v in real)


def test_attention_with_key_tiles_aligned_to_the_buffer_is_caught():
    lens = [5, 40, 1, 33]
    q, k, v, cu, qp = attention_inputs(lens)
    packed = E.variant_attention_buffer_tiles(q, k, v, cu, cu, qp, 0.125)
    # sequence 1 sits at buffer row 5: packed, its first key tile holds keys 0..26; alone, keys 0..31
    s, e = int(cu[1]), int(cu[2])
    one = torch.tensor([0, e - s])
    alone = E.variant_attention_buffer_tiles(q[s:e], k[s:e], v[s:e], one, one, qp[s:e], 0.125)
    assert not same_bits(alone[1], packed[1][s:e]), "the buffer-aligned key tiles were not caught (lse, FP32)"
    # sequence 0 sits at row 0: the same tiles either way, the same bits; and the real kernel is invariant
    first = E.variant_attention_buffer_tiles(q[:5], k[:5], v[:5], torch.tensor([0, 5]), torch.tensor([0, 5]), qp[:5], 0.125)
    assert same_bits(first[1], packed[1][:5])
    real_alone = E.attention(q[s:e], k[s:e], v[s:e], one, one, qp[s:e], 0.125)
    assert same_bits(real_alone[1], E.attention(q, k, v, cu, cu, qp, 0.125)[1][s:e])
