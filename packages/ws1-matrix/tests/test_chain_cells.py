"""The chain gate's cells on `tiny`: every layout gives the same selected log-probs and the same
parameter gradients, bit for bit; plain PyTorch ops (the negative control) do not."""

import pytest

import ws1_qwen3
from ws1_contract import bitwise
from ws1_matrix.chain_gate import cell_plans, run_cell


def judge(model, samples):
    """The C10 cells (c10.cell_plans): name -> what differs from BN/full (log-probs, parameter names)."""
    plans = cell_plans(samples)
    ref_lp, _, _, ref_g, _ = run_cell(model, *plans["BN/full"], 27)
    bad = {}
    for name, (calls, kw) in plans.items():
        lp, _, _, g, _ = run_cell(model, calls, kw, 27)
        diff = [n for n in g if not bitwise(g[n], ref_g[n]).passed]
        if not bitwise(lp, ref_lp).passed:
            diff.append("logp")
        if diff:
            bad[name] = diff
    return bad


def test_every_cell_bitwise_logp_and_all_gradients(tiny, samples):
    assert judge(tiny, samples) == {}
    assert len(list(tiny.parameters())) == tiny.config.n_parameter_tensors == 25


def test_tied_every_cell_bitwise_logp_and_all_gradients(samples):
    """Tied embeddings (tiny-tied): the shared table's gradient — the embedding's and lm_head's contributions
    combined in FP32, rounded once (ws1_ops.combine) — and every other one are bitwise the same in every layout."""
    m = ws1_qwen3.synthetic("tiny-tied", "cpu_bf16")
    assert judge(m, samples) == {}
    assert len(list(m.parameters())) == m.config.n_parameter_tensors == 24


def test_tied_negative_control_torch_default_is_red(samples):
    bad = judge(ws1_qwen3.synthetic("tiny-tied", "torch_default"), samples)
    assert len(bad) >= 4 and any("model.embed_tokens.weight" in v for v in bad.values()), bad


def test_negative_control_torch_default_is_red(samples):
    m = ws1_qwen3.synthetic("tiny", "torch_default")
    bad = judge(m, samples)
    assert len(bad) >= 4, bad  # plain torch: gradients change with the layout
    assert any("logp" in v for v in bad.values()) or any(len(v) > 3 for v in bad.values())


@pytest.mark.slow
def test_8b_l2_cells_bitwise(samples):
    m = ws1_qwen3.synthetic("qwen3-8b-L2")
    assert judge(m, samples) == {}
