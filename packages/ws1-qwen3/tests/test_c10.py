"""C10 chain gate on `tiny`: green on cpu_bf16, red with a first_drift on plain PyTorch ops."""

import pytest
import torch

from ws1_contract import read_evidence
from ws1_qwen3 import save_pretrained
from ws1_qwen3.__main__ import main
from ws1_qwen3.drift import Trace, drift_map, first_drift


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


def test_c10_negative_control_is_red_with_first_drift(tmp_path):
    assert main(["c10", "cpu_bf16", "--candidate", "torch_default", "--evidence-dir", str(tmp_path)]) == 1
    ev = _ev(tmp_path, "c10_negative_control")
    assert not ev["passed"] and ev["candidate"] == "torch_default"
    fd = ev["first_drift"]
    assert fd is not None and fd["tokens_differ"] > 0 and fd["node"] in ("attention", "rope_k", "swiglu", "lm_head")
    assert ev["drift_maps"] and all("map" in d for d in ev["drift_maps"])
    assert ev["train_infer"]["bitwise"] is False


def test_c10_digest_mode_and_checkpoint_mode(tmp_path, tiny):
    ck = tmp_path / "ck"
    save_pretrained(tiny, ck)
    assert main(["c10", "cpu_bf16", "--weights", str(ck), "--grad-compare", "digest", "--evidence-dir", str(tmp_path)]) == 0
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
