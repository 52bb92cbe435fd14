"""C6 operator checks against the project's own attention controls (ws1_ops.backends.controls): each
turns exactly the cases of its family red, on every host (the controls are the cpu kernels' bits)."""

import pytest

import ws1_ops
from ws1_matrix.kv_ops import DECODE_CASES, c6_operator_cases

DIMS = dict(hq=4, hkv=2, d=32)
CASES = [name for name, _, _ in DECODE_CASES]
B4 = [c for c in CASES if c.startswith("b4-")]
EXPECTED_RED = {
    # every decode case; plus b1-len8's chunked prefill, whose last 7-chunk holds one query (position 7):
    # at the op a one-query step is a decode step
    "variant_attn_decode_order": {f"{c}/decode" for c in CASES} | {"b1-len8/chunked7"},
    # every chunked case with a chunk of more than one query past position 0 (not b1-len8: its only
    # such chunk is the one-query step above)
    "variant_attn_chunk_tiles": {f"{c}/chunked7" for c in CASES if c != "b1-len8"},
    # the four-sequence cases, whose steps pack the sequences at other buffer rows than the prefill
    "variant_attn_pack_tiles": {f"{c}/{v}" for c in B4 for v in ("decode", "chunked7")},
    # a control of another family leaves C6 green
    "variant_m_split_k": set(),
}


@pytest.mark.parametrize("control", sorted(EXPECTED_RED))
def test_attention_control_turns_exactly_its_c6_cases_red(cpu, control):
    with ws1_ops.use_candidate(control):
        out = c6_operator_cases(**DIMS)
    assert len(out) == 12
    assert {o.name for o in out if not o.passed} == EXPECTED_RED[control]
