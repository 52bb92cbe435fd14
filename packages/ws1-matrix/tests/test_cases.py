"""Case inputs from the manifest: rows are fixture tokens with logical keys, shapes follow the case,
the same values for every profile, and the comparators judge big tensors block by block exactly as
whole."""

import pytest
import torch

from ws1_contract import bitwise, load_contract, load_manifest, within_tolerance
from ws1_matrix import cases, compare


@pytest.fixture(scope="module")
def manifest():
    return load_manifest(contract=load_contract())


def test_rows_are_fixture_tokens(manifest):
    all59 = cases.fixture_rows(manifest, "primary", 59)
    assert torch.bincount(all59.sample).tolist() == [11, 16, 13, 19]
    assert all59.token[:3].tolist() == [100, 101, 102] and all59.position[11:13].tolist() == [0, 1]
    keys = all59.keys(torch.arange(59))
    assert torch.equal(keys, torch.sort(keys).values), "canonical order is (sample, position) order"
    active = cases.fixture_rows(manifest, "primary", 27)
    assert (active.position >= 8).all() and active.token[:3].tolist() == [200, 201, 202]
    assert cases.fixture_rows(manifest, "short", 4).position.tolist() == [4, 5, 6, 7]
    odd = cases.fixture_rows(manifest, "short", 5)
    assert "synthetic" in odd.source and odd.position.tolist() == [0, 1, 2, 3, 4]
    # a filler row's key is -1 (padding: dropped from parameter gradients)
    assert all59.keys(torch.tensor([3, -1]))[1].item() == -1


def test_multi_call_transforms(manifest):
    calls = cases.fixture_rows(manifest, "primary", 59).split_calls()
    assert [len(c) for c in calls["B1"]] == [11, 16, 13, 19]
    assert len(calls["chunked7"]) == 3 and sum(len(c) for c in calls["chunked7"]) == 59  # positions 0..18
    short = cases.fixture_rows(manifest, "short", 8).split_calls()
    assert "B1" not in short and [len(c) for c in short["chunked7"]] == [7, 1]


def test_inputs_follow_the_case_and_are_profile_independent(manifest):
    cpu = manifest.cases(profile="cpu_bf16", op="det_gemm", tier="short")[0]
    cuda = manifest.cases(profile="cuda_bf16", op="det_gemm", tier="short")[0]
    a = cases.build(cpu, manifest)
    x, w = a.inputs[0].clone(), a.params[0].clone()
    cases.forget()
    b = cases.build(cuda, manifest)
    assert x.shape == (8, 4096) and w.shape == (4096, 4096) and x.dtype == torch.bfloat16
    assert torch.equal(x, b.inputs[0]) and torch.equal(w, b.params[0])
    # masters: FP32 storage holding BF16 values, so the exec rounding is exact
    assert w.dtype == torch.float32 and torch.equal(w, w.bfloat16().float())
    cases.forget()


def test_embedding_ids_repeat_and_attention_lengths(manifest, small_env):
    small = load_manifest(contract=load_contract())  # the shrunk copy: V 1000, not a 2.5 GB table
    emb = cases.build(small.cases(profile="cpu_bf16", op="embedding", tier="short")[0], small)
    ids = emb.inputs[0]
    assert ids.unique().numel() < ids.numel(), "dE must sum several rows for one id"
    assert tuple(emb.params[0].shape) == (1000, 64)
    cases.forget()
    att = cases.build(manifest.cases(profile="cpu_bf16", op="attention", tier="primary")[0], manifest)
    assert att.lengths == [11, 16, 13, 19] and att.heads == (32, 8, 128) and att.padded_length == 20
    dec = cases.build(manifest.cases(profile="cpu_bf16", op="attention", tier="long")[0], manifest)
    assert dec.mode == "decode" and dec.lengths == [32] and dec.decode_pos == 31
    pk = cases.build(manifest.cases(profile="cpu_bf16", op="pack", tier="primary")[0], manifest)
    assert pk.lengths == [11, 16, 13, 19] and tuple(pk.x.shape) == (4, 20, 4096)
    cases.forget()


def test_block_comparators_equal_whole_comparators(monkeypatch):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(300, 7, generator=g)
    b = a.clone()
    b[211, 3] = torch.nextafter(b[211, 3], torch.tensor(9.0))
    monkeypatch.setattr(compare, "BLOCK_ELEMENTS", 64)
    assert len(compare.blocks(a)) > 10
    whole, split = bitwise(b, a, "t"), compare.bitwise_blocks(b, a, "t")
    assert not split.passed and split.n_diff == whole.n_diff == 1 and split.first_diff["index"] == [211, 3]
    assert compare.bitwise_blocks(a.clone(), a, "t").passed
    c = a + 0.5 * (torch.arange(300)[:, None] == 250)
    tw, ts = within_tolerance(c, a, 0.1, 0.0, "t"), compare.tolerance_blocks(c, a, 0.1, 0.0, "t")
    assert not ts.passed and ts.n_diff == tw.n_diff == 7 and ts.max_abs == tw.max_abs
    assert ts.first_diff["index"] == [250, 0]
    # digests: equal exactly when the bits are equal (-0.0 vs +0.0 differ)
    z = torch.zeros(300, 7)
    assert compare.digest(z) == compare.digest(z.clone()) and compare.digest(z) != compare.digest(-z)
