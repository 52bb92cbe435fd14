"""Negative controls of ours (csrc/controls.asc): the same kernel templates with a tile chosen by the batch.
Each must FAIL the invariance check that the real kernel passes — on every host, since the emulated bits are
the same IEEE operations everywhere (-ffp-contract=off) — so a green invariance check means something."""

from emu_cases import EPS, E, make, same_bits

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
