"""Negative controls of ours (csrc/controls.asc): the same kernel templates with a tile chosen by the batch
(baseK by M, the UB tile by the row count, attention's key tiles by the position in the packed buffer).
Each must FAIL the invariance check that the real kernel passes — on every host, since the emulated bits are
the same IEEE operations everywhere (-ffp-contract=off) — so a green invariance check means something."""

import pytest
import torch
from emu_cases import EPS, E, attention_inputs, make, same_bits

from ws1_ops.backends.controls import CONTROLS
from ws1_ops.invariance import check
from ws1_ops.registry import Kernel

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
    verdicts = {
        v.layout: v for v in check(lambda a, b, row_keys: E.variant_rms_norm_small_tile(a, b, EPS)[1], [x], [w])
    }
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
    # sequence 1 sits at buffer row 5: packed, its first key tile holds keys 0..122; alone, keys 0..127
    s, e = int(cu[1]), int(cu[2])
    one = torch.tensor([0, e - s])
    alone = E.variant_attention_buffer_tiles(q[s:e], k[s:e], v[s:e], one, one, qp[s:e], 0.125)
    assert not same_bits(alone[1], packed[1][s:e]), "the buffer-aligned key tiles were not caught (lse, FP32)"
    # sequence 0 sits at row 0: the same tiles either way, the same bits; and the real kernel is invariant
    first = E.variant_attention_buffer_tiles(
        q[:5], k[:5], v[:5], torch.tensor([0, 5]), torch.tensor([0, 5]), qp[:5], 0.125
    )
    assert same_bits(first[1], packed[1][:5])
    real_alone = E.attention(q[s:e], k[s:e], v[s:e], one, one, qp[s:e], 0.125)
    assert same_bits(real_alone[1], E.attention(q, k, v, cu, cu, qp, 0.125)[1][s:e])


def _cu(*lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])


@pytest.mark.parametrize("name", ["variant_attn_pack_tiles", "variant_attn_chunk_tiles", "variant_attn_decode_order"])
def test_ws1_attention_controls_stay_red_on_the_cube_kernel(name):
    # ws1_ops' three attention controls (they only wrap the base kernel's fwd, so they build on every family)
    # built on the Cube attention: each breaks the transform it names, where the real kernel holds
    base = Kernel("attention", "ascend_emu", "ws1_ascend_emu::attention", E.attention, E.attention_bwd)
    variant = CONTROLS[name].overrides["attention"](base)
    lens = [5, 40, 1, 33, 150]
    q, k, v, cu, qp = attention_inputs(lens)
    s, e = int(cu[4]), int(cu[5])  # the 150-token sequence, at buffer row 79

    def differs(fwd):
        if name == "variant_attn_pack_tiles":  # packed vs alone
            packed = fwd(q, k, v, cu, cu, qp, 0.125)[0][s:e]
            alone = fwd(q[s:e], k[s:e], v[s:e], _cu(150), _cu(150), qp[s:e], 0.125)[0]
        elif name == "variant_attn_chunk_tiles":  # a chunk [70, 131) vs the full prefill
            alone = fwd(
                q[s + 70 : s + 131], k[s : s + 131], v[s : s + 131], _cu(61), _cu(131), qp[s + 70 : s + 131], 0.125
            )[0]
            packed = fwd(q[s:e], k[s:e], v[s:e], _cu(150), _cu(150), qp[s:e], 0.125)[0][70:131]
        else:  # decode at 149 vs the prefill's row
            alone = fwd(q[e - 1 : e], k[s:e], v[s:e], _cu(1), _cu(150), qp[e - 1 : e], 0.125)[0]
            packed = fwd(q[s:e], k[s:e], v[s:e], _cu(150), _cu(150), qp[s:e], 0.125)[0][149:150]
        return not same_bits(packed, alone)

    assert differs(variant.fwd), f"{name} on the Cube attention was not caught"
    assert not differs(base.fwd), "the real kernel must pass the same check"
