"""C10 chain gate on `tiny`: green on cpu_bf16, red with a first_drift on plain PyTorch ops."""

import pytest
import torch

import ws1_qwen3
from ws1_contract import read_evidence
from ws1_matrix.__main__ import main
from ws1_matrix.drift import NODE_ORDER, Trace, drift_map, first_drift
from ws1_qwen3 import save_pretrained


def _ev(tmp, name="c10_chain_gate"):
    return read_evidence(tmp / "cpu_bf16" / f"{name}.json")


def test_c10_green_everything_bitwise(tmp_path):
    assert main(["c10", "cpu_bf16", "--evidence-dir", str(tmp_path)]) == 0
    ev = _ev(tmp_path)
    ids = {c["id"] for c in ev["cells"]}
    for cell in ("B1/full", "BN/chunked", "B1/chunked", "padded_left", "padded_right", "permuted", "packed"):
        assert f"cell/{cell}/logp" in ids and f"cell/{cell}/grads" in ids
    assert {"parity/B4", "parity/B1", "reference/forward_accuracy", "reference/gradient_accuracy", "first_drift"} <= ids
    assert len([i for i in ids if i.startswith("sweep/")]) == 12
    assert len([i for i in ids if i.startswith("observed/node/")]) == 11
    assert ev["mode"] == "synthetic" and ev["first_drift"] is None and ev["grad_compare"] == "full"
    assert ev["train_infer"] == {"max_abs_dlogp": 0.0, "bitwise": True}
    assert ev["gradient_invariance"] == {"min_bitwise": 25, "of": 25, "cells": 7}


def test_c10_tied_embeddings_green(tmp_path):
    """C10 on tiny-tied (the 0.6B / 1.7B / 4B head): every cell bitwise, the shared table's gradient among the 24,
    judged against the FP32 reference by lm_head's row; from synthetic weights and from a tied checkpoint."""
    assert main(["c10", "cpu_bf16", "--model", "tiny-tied", "--evidence-dir", str(tmp_path)]) == 0
    ev = _ev(tmp_path)
    assert ev["model"] == "tiny-tied" and ev["parameters"] == 24 and ev["first_drift"] is None
    assert ev["train_infer"] == {"max_abs_dlogp": 0.0, "bitwise": True}
    assert ev["gradient_invariance"] == {"min_bitwise": 24, "of": 24, "cells": 7}
    (grad_acc,) = [c for c in ev["cells"] if c["id"] == "reference/gradient_accuracy"]
    assert grad_acc["status"] == "green" and "24 of 24" in grad_acc["detail"]
    assert grad_acc["per_parameter_cosine"]["model.embed_tokens.weight"] > 0.999
    ck = tmp_path / "ck"
    save_pretrained(ws1_qwen3.synthetic("tiny-tied"), ck)
    assert main(["c10", "cpu_bf16", "--weights", str(ck), "--evidence-dir", str(tmp_path / "ck-ev")]) == 0


def test_c10_negative_control_is_red_with_first_drift(tmp_path):
    assert main(["c10", "cpu_bf16", "--candidate", "torch_default", "--evidence-dir", str(tmp_path)]) == 1
    ev = _ev(tmp_path, "c10_negative_control")
    assert not ev["passed"] and ev["candidate"] == "torch_default"
    fd = ev["first_drift"]
    assert (
        fd is not None and fd["tokens_differ"] > 0 and fd["node"] in NODE_ORDER
    )  # which node drifts first depends on torch's kernels on this host
    assert ev["drift_maps"] and all("map" in d for d in ev["drift_maps"])
    assert ev["train_infer"]["bitwise"] is False


def test_c10_digest_mode_and_checkpoint_mode(tmp_path, tiny):
    ck = tmp_path / "ck"
    save_pretrained(tiny, ck)
    assert (
        main(["c10", "cpu_bf16", "--weights", str(ck), "--grad-compare", "digest", "--evidence-dir", str(tmp_path)])
        == 0
    )
    ev = _ev(tmp_path)
    assert ev["mode"] == "checkpoint" and ev["grad_compare"] == "digest" and not ev["synthetic"]


def test_formal_mode_refuses_without_the_pinned_hash(tmp_path):
    assert main(["c10", "cpu_bf16", "--formal", "--evidence-dir", str(tmp_path)]) == 1
    cells = _ev(tmp_path)["cells"]
    assert [c["id"] for c in cells] == ["formal-weights"] and "pinned" in cells[0]["detail"]


def test_first_drift_names_the_first_node():
    a, b = Trace(), Trace()
    keys = torch.tensor([0, 1, 2, -1])
    x = torch.randn(4, 8)
    for t in (a, b):
        t(-1, "embedding", x, keys)
        t(0, "rope_k", x * 2, keys)
    y = x.clone()
    y[2, 3] += 1e-3
    a(0, "attention", x, keys)
    b(0, "attention", y, keys)
    a(0, "swiglu", x, keys)
    b(0, "swiglu", y, keys)
    fd = first_drift(a, b)
    assert fd["layer"] == 0 and fd["node"] == "attention" and fd["tokens_differ"] == 1 and fd["tokens"] == 3
    assert fd["first_key"] == {"sample_rank": 0, "position": 2}
    assert [r["tokens_differ"] for r in drift_map(a, b)] == [0, 0, 1, 1]
    assert first_drift(a, a) is None


@pytest.mark.slow
def test_c10_8b_l2(tmp_path):
    assert main(["c10", "cpu_bf16", "--model", "qwen3-8b-L2", "--evidence-dir", str(tmp_path)]) == 0
    assert _ev(tmp_path)["gradient_invariance"]["of"] == 25


class _Run:
    def __init__(self):
        self.cells = []

    def add(self, cell):
        self.cells.append(cell)


@pytest.fixture(scope="module")
def canonical_tiny():
    """tiny's canonical-cell candidate gradients (cpu_bf16) and its FP32 reference copy."""
    import ws1_qwen3
    from ws1_contract import load_manifest
    from ws1_matrix.chain_gate import CANONICAL, cell_plans, reference_copy, run_cell

    manifest = load_manifest()
    model = ws1_qwen3.synthetic("tiny", "cpu_bf16")
    plan = cell_plans(ws1_qwen3.fixture_samples(manifest))[CANONICAL]
    _, _, _, grads, _ = run_cell(model, *plan, manifest.active_tokens)
    return {n: g.detach().clone() for n, g in grads.items()}, reference_copy(model), plan, manifest.active_tokens


def _reference_cell(canonical_tiny, contract, edit=None):
    from ws1_matrix.chain_gate import run_cell_streaming

    grads, ref, plan, n_active = canonical_tiny
    cand = dict(grads)
    if edit is not None:
        edit(cand)
    run = _Run()
    run_cell_streaming(ref, plan, n_active, cand, contract, run)
    (cell,) = run.cells
    return cell


@pytest.mark.parametrize("how,scale", [("zeroed", 0.0), ("halved", 0.5), ("flipped", -1.0)])
def test_c10_reference_cell_sees_one_wrong_parameter_gradient(canonical_tiny, contract, how, scale):
    """The chain's gradient elements are ~1e-3, far under the gradient_accuracy atol (0.1): a zeroed,
    halved or sign-flipped gradient of one parameter passes the elementwise row alone. The
    contract's tensor-norm rule turns the cell red, naming the parameter."""
    from ws1_contract import within_tolerance

    name = "model.layers.1.mlp.down_proj.weight"
    grads, ref, _, _ = canonical_tiny
    th = contract.resolve("gradient_accuracy", "det_gemm", "bfloat16")
    # the elementwise row is blind: every element of this gradient is below atol
    assert within_tolerance(grads[name] * scale, grads[name].float(), th.atol, th.rtol).passed
    cell = _reference_cell(canonical_tiny, contract, lambda g: g.__setitem__(name, g[name] * scale))
    assert cell.status == "red" and f"first failure: {name}: " in cell.detail and "FAIL: rel L2" in cell.detail, (
        cell.detail
    )
    assert "24 of 25" in cell.detail


def test_c10_reference_cell_green_and_missing_gradient_red(canonical_tiny, contract):
    cell = _reference_cell(canonical_tiny, contract)
    assert cell.status == "green", cell.detail
    rel = cell.extra["per_parameter_rel_l2"]
    assert len(rel) == 25 and max(rel.values()) < 0.05 and min(cell.extra["per_parameter_cosine"].values()) > 0.999
    cell = _reference_cell(canonical_tiny, contract, lambda g: g.pop("lm_head.weight"))
    assert cell.status == "red" and "lm_head.weight: the candidate produced no gradient" in cell.detail, cell.detail
