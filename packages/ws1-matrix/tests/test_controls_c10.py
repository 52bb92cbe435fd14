"""Every negative control at the model level: run through C10's own cells (the invariance cells, the
train/infer parity runs, the C6 decode sweep), each control turns red exactly the comparisons of its
invariance family, and the cpu_bf16 kernels turn none red. The controls are variant kernels of ours
built from the cpu kernels (ws1_ops.backends.controls), so these sets are the same on every host.

Why each set is what it is (tiny preset, the manifest's fixtures; canonical = BN/full, right-padded to 20):
* m_split_k (split K when M > 8): every prefill cell has more than 8 rows per call; only the rollout's
  decode steps (M = 4 or 1) take the other path — train/infer parity is where batch size changes.
* threads_split: C10 runs at one thread count (thread transforms are C3/C4's), so nothing is red.
* row_parity (odd batch rows): the layouts that move a token to a row of other parity — left
  padding (pads of odd length), packing, and the rollout's batches.
* dw_batch_order (dW ignores the canonical order): gradients only, of the cells whose rows arrive in
  another order (B1's calls, the permutation); no log-prob changes.
* pad_leak_dw (dW over pad rows too): gradients of every cell whose padding differs from the canonical's.
* attn_pack_tiles (key tiles from the packed buffer's row 0): every layout puts sequences at other
  buffer rows, so every cell, the rollout and the batched sweep cases.
* attn_chunk_tiles (tiles from the chunk start): the chunked cells and chunked sweep cases (b1-len8's
  last chunk is a single query, which the variant treats as a decode step).
* attn_decode_order: the rollout's decode, every decode sweep case, and b1-len8's one-query chunk.
* logprob_lse_shift (every lse + 1e-4): an accuracy control — row-local, so no invariance comparison
  moves and logprob == batch_invariant_logp[t] keeps teacher forcing and the rollout bitwise equal.
"""

import pytest
import torch

import ws1_ops
from ws1_contract import bitwise
from ws1_matrix import parity
from ws1_matrix.chain_gate import CANONICAL, cell_plans, compare_grads, run_cell
from ws1_matrix.kv_ops import c6_operator_cases

ALL_CELLS = ("B1/full", "BN/chunked", "B1/chunked", "padded_left", "padded_right", "permuted", "packed")
PARITY = ("parity/B4", "parity/B1")
B4 = ("b4-varlen", "b4-padded-right20", "b4-padded-left20")


def _both(*cells):
    return {f"{c}/{k}" for c in cells for k in ("logp", "grads")}


EXPECTED = {
    "cpu_bf16": set(),
    "variant_m_split_k": set(PARITY),
    "variant_threads_split": set(),
    "variant_row_parity": _both("padded_left", "packed") | set(PARITY),
    "variant_dw_batch_order": {f"{c}/grads" for c in ("B1/full", "B1/chunked", "permuted")},
    "variant_pad_leak_dw": {
        f"{c}/grads" for c in ("B1/full", "B1/chunked", "padded_left", "padded_right", "permuted", "packed")
    },
    "variant_attn_pack_tiles": _both(*ALL_CELLS)
    | set(PARITY)
    | {f"sweep/{c}/{k}" for c in B4 for k in ("decode", "chunked7")},
    "variant_attn_chunk_tiles": _both("BN/chunked", "B1/chunked")
    | {f"sweep/{c}/chunked7" for c in ("b1-len32", "b1-len19", *B4)},
    "variant_attn_decode_order": set(PARITY)
    | {"sweep/b1-len8/chunked7"}
    | {f"sweep/{c}/decode" for c in ("b1-len8", "b1-len32", "b1-len19", *B4)},
    "variant_logprob_lse_shift": set(),
}


def test_every_control_has_its_model_level_expectation():
    assert set(EXPECTED) == {"cpu_bf16", *ws1_ops.candidate_names()} - {"torch_default"}


@pytest.mark.parametrize("candidate", sorted(EXPECTED))
def test_control_turns_exactly_its_c10_comparisons_red(tiny, samples, contract, candidate):
    plans = cell_plans(samples)
    tiny.profile = candidate
    try:
        c_logp, c_active, _, c_grads, _ = run_cell(tiny, *plans[CANONICAL], 27)
        canon = {n: g.detach().clone() for n, g in c_grads.items()}
        red = set()
        for name, (calls, kw) in plans.items():
            if name == CANONICAL:
                continue
            logp, _, _, grads, _ = run_cell(tiny, calls, kw, 27)
            if not bitwise(logp, c_logp).passed:
                red.add(f"{name}/logp")
            if not compare_grads(grads, canon, "full", name).passed:
                red.add(f"{name}/grads")
        tiny.zero_grad(set_to_none=True)
        for name, together in (("B4", True), ("B1", False)):
            agg = parity.judge(c_logp[c_active], parity.rollout_logp(tiny, samples, together=together), contract)
            if not agg.bitwise_equal:
                red.add(f"parity/{name}")
        with tiny.activate():
            red |= {f"sweep/{o.name}" for o in c6_operator_cases(device=torch.device("cpu")) if not o.passed}
    finally:
        tiny.profile = "cpu_bf16"
        tiny.zero_grad(set_to_none=True)
    assert red == EXPECTED[candidate], (candidate, sorted(red ^ EXPECTED[candidate]))
