"""first_drift names the node that drifted: every kernel call of the chain is traced, by role, in order.

Each case installs a variant of one node kind's cpu kernel (a monkeypatched registry entry, restored
after the test) that flips the lowest bit of one row's output — for one role (GEMM / norm, chosen by
its weight tensor) or one input shape (rope of q vs k) — and runs it in one layout only (``packed``;
the canonical ``BN/full`` runs the real kernel). first_drift must name exactly that (layer, node).
"""

import dataclasses

import pytest
import torch

from ws1_matrix import parity
from ws1_matrix.chain_gate import CANONICAL, cell_plans
from ws1_matrix.drift import HEAD_NODES, LAYER_NODES, NODE_KIND, NODE_ORDER, Trace, first_drift, tracing
from ws1_matrix.model_nodes import silu_identity
from ws1_ops import registry
from ws1_qwen3.teacher import teacher_forcing

LAST = 1  # tiny has 2 decoder layers: role-selected variants hit the last one (the layer must be right too)


def _flip_row0(y: torch.Tensor) -> torch.Tensor:
    """y with the lowest bit of every element of row 0 flipped (one ulp each)."""
    y = y.contiguous().clone()
    ints = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[y.dtype]
    y.view(ints)[0] ^= 1
    return y


def _install(monkeypatch, op: str, hit):
    """Replace the cpu kernel of ``op`` by one whose output is flipped when ``hit(*args)``."""
    registry.load_family("cpu")
    k = registry._KERNELS[(op, "cpu")]

    def fwd(*args):
        out = k.fwd(*args)
        if not hit(*args):
            return out
        return (_flip_row0(out[0]), *out[1:]) if isinstance(out, tuple) else _flip_row0(out)

    monkeypatch.setitem(registry._KERNELS, (op, "cpu"), dataclasses.replace(k, fwd=fwd))


def _is(w):
    return lambda *a: a[1].data_ptr() == w.data_ptr()


def _cases(model):
    L, A, M, c = (
        model.model.layers[LAST],
        model.model.layers[LAST].self_attn,
        model.model.layers[LAST].mlp,
        model.config,
    )
    head, always = c.num_hidden_layers, lambda *a: True
    return {  # (layer, node) expected -> (op, when the variant flips)
        (-1, "embedding"): ("embedding", always),
        (LAST, "input_layernorm"): ("rms_norm", _is(L.input_layernorm.weight)),
        (LAST, "q_proj"): ("det_gemm", _is(A.q_proj.weight)),
        (LAST, "q_norm"): ("qk_norm", _is(A.q_norm.weight)),
        (LAST, "k_proj"): ("det_gemm", _is(A.k_proj.weight)),
        (LAST, "k_norm"): ("qk_norm", _is(A.k_norm.weight)),
        (LAST, "v_proj"): ("det_gemm", _is(A.v_proj.weight)),
        (0, "rope_q"): ("rope", lambda x, *a: x.shape[1] == c.num_attention_heads),
        (0, "rope_k"): ("rope", lambda x, *a: x.shape[1] == c.num_key_value_heads),
        (0, "attention"): ("attention", always),
        (LAST, "o_proj"): ("det_gemm", _is(A.o_proj.weight)),
        (LAST, "post_attention_layernorm"): ("rms_norm", _is(L.post_attention_layernorm.weight)),
        (LAST, "gate_proj"): ("det_gemm", _is(M.gate_proj.weight)),
        (LAST, "up_proj"): ("det_gemm", _is(M.up_proj.weight)),
        (0, "swiglu"): ("swiglu", always),
        (LAST, "down_proj"): ("det_gemm", _is(M.down_proj.weight)),
        (head, "final_norm"): ("rms_norm", _is(model.model.norm.weight)),
        (head, "lm_head"): ("lm_head", always),
        (head, "logprob"): ("logprob", always),
    }


def _trace(model, plan):
    calls, kw = plan
    with tracing(model) as tr:
        for samples in calls:
            teacher_forcing(model, samples, **kw)
    return tr


@pytest.fixture(scope="module")
def canonical(tiny, samples):
    plans = cell_plans(samples)
    return plans, _trace(tiny, plans[CANONICAL])


def test_every_chain_node_is_traced_in_order(tiny, canonical):
    plans, c_trace = canonical
    L = tiny.config.num_hidden_layers
    want = {(-1, "embedding")} | {(i, n) for i in range(L) for n, _ in LAYER_NODES if n != "silu"}
    want |= {(L, n) for n, _ in HEAD_NODES if n != "batch_invariant_logp"}
    assert set(c_trace.rows) == want
    assert c_trace.order() == sorted(want, key=lambda ln: (ln[0], NODE_ORDER.index(ln[1])))
    # all eleven node kinds have a place in the chain order (silu: traced by its C9/C10 check)
    assert set(NODE_KIND.values()) - {"residual_add"} == set(
        __import__("ws1_ops").REQUIRED_NODES
    )  # every required node is traced
    assert first_drift(_trace(tiny, plans["packed"]), c_trace) is None  # the real kernels: no drift
    with pytest.raises(ValueError, match="unknown node"):
        Trace()(0, "mlp", torch.zeros(1, 1), torch.zeros(1, dtype=torch.int64))


def test_the_report_has_a_column_for_every_node():
    from ws1_contract.report import drift_columns

    assert drift_columns({"nodes": list(NODE_ORDER), "map": []}) == list(NODE_ORDER)


def test_first_drift_names_each_perturbed_node(tiny, canonical, monkeypatch):
    plans, c_trace = canonical
    named = {}
    for (layer, node), (op, hit) in _cases(tiny).items():
        with monkeypatch.context() as mp:
            _install(mp, op, hit)
            fd = first_drift(_trace(tiny, plans["packed"]), c_trace)
        named[(layer, node)] = fd and (fd["layer"], fd["node"], fd["kind"])
    assert named == {ln: (*ln, NODE_KIND[ln[1]]) for ln in named}


def test_first_drift_names_batch_invariant_logp_in_the_rollout(tiny, samples, canonical, monkeypatch):
    """batch_invariant_logp runs only in the rollout (decode path): C10's parity cells compare the
    rollout's trace with teacher forcing's, where the selected log-prob is the same chain point."""
    _, c_trace = canonical
    head = tiny.config.num_hidden_layers
    with tracing(tiny) as tr:
        parity.rollout_logp(tiny, samples, together=True)
    assert first_drift(tr, c_trace) is None
    _install(monkeypatch, "batch_invariant_logp", lambda *a: True)
    with tracing(tiny) as tr:
        parity.rollout_logp(tiny, samples, together=True)
    fd = first_drift(tr, c_trace)
    assert (fd["layer"], fd["node"], fd["kind"]) == (head, "batch_invariant_logp", "batch_invariant_logp")


def test_first_drift_names_silu_where_it_runs(tiny, monkeypatch):
    """silu never runs in the chain (the MLP's fused swiglu does): it runs in silu(g) == swiglu(g, 1)."""
    drifts = []
    assert silu_identity(tiny, drifts)[0] and drifts == []
    _install(monkeypatch, "silu", lambda *a: True)
    ok, _ = silu_identity(tiny, drifts)
    assert not ok and [(d["cell"], d["layer"], d["node"], d["kind"]) for d in drifts] == [
        ("observed/silu", 0, "silu", "silu")
    ]
