"""transformers' Qwen3 as the independent reference, and as the negative control of decode parity."""

import pytest
import torch
from hf_ref import hf_checkpoint, hf_rollout, hf_teacher_forcing

import ws1_qwen3
from ws1_contract import aggregates, within_tolerance


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    hf = hf_checkpoint(d)
    return d, hf


def _dlogp(tf, rollout, contract):
    """dlogp aggregates of teacher forcing vs rollout with the contract's FP32 thresholds."""
    return aggregates(
        tf, rollout, thresholds=contract.aggregate_thresholds("float32"), clip_interval=contract.clip_interval
    )


def test_fp32_path_matches_transformers(ckpt):
    d, hf = ckpt
    ours = ws1_qwen3.from_pretrained(d, profile="reference")
    ids = torch.randint(0, 700, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(ids).logits
    with torch.no_grad():
        got = ours(ids)
    assert got.dtype == torch.float32 and got.shape == (3, 17, 700)
    err = float((got - want).abs().max())
    assert err <= 1e-4, err


def test_bf16_chain_within_contract_of_fp32_path(ckpt, contract, samples):
    d, _ = ckpt
    ref = ws1_qwen3.from_pretrained(d, profile="reference")
    bf = ws1_qwen3.from_pretrained(d, profile="cpu_bf16")
    small = [ws1_qwen3.Sample(s.rank, tuple(t % 700 for t in s.tokens), s.n_prompt) for s in samples]
    a = ws1_qwen3.teacher_forcing(bf, small, layout="packed")
    r = ws1_qwen3.teacher_forcing(ref, small, layout="packed")
    th = contract.resolve("forward_accuracy", "logprob", "bfloat16")
    cmp = within_tolerance(a.logp, r.logp, th.atol, th.rtol, "bf16 chain vs fp32 path")
    assert cmp.passed, cmp.detail
    assert cmp.max_abs > 0  # BF16 really differs from FP32: the check is not vacuous


def test_decode_parity_check_catches_transformers(ckpt, contract, samples):
    """Negative control: the decode-vs-prefill judgment run on transformers' own FP32 Qwen3 is red
    (its decode GEMMs and attention reduce in another order than its full forward)."""
    _, hf = ckpt
    small = [ws1_qwen3.Sample(s.rank, tuple(t % 700 for t in s.tokens), s.n_prompt) for s in samples]
    agg = _dlogp(hf_teacher_forcing(hf, small), hf_rollout(hf, small), contract)
    assert not agg.bitwise_equal and agg.tokens_different > 0, agg.detail
    assert agg.max_abs_dlogp < 1e-4  # small, but not zero: only a bitwise check sees it


@pytest.mark.slow
def test_8b_shapes_against_transformers(tmp_path, contract, samples):
    """The 8B shapes with 2 layers: FP32 logits vs transformers, BF16 vs FP32, HF decode drift."""
    shape = dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=2,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
    )
    hf = hf_checkpoint(tmp_path, **shape)
    ref = ws1_qwen3.from_pretrained(tmp_path, profile="reference")
    ids = torch.tensor([samples[3].tokens])
    with torch.no_grad():
        assert float((ref(ids) - hf(ids).logits).abs().max()) <= 1e-4
    bf = ws1_qwen3.from_pretrained(tmp_path, profile="cpu_bf16")
    th = contract.resolve("forward_accuracy", "logprob", "bfloat16")
    cmp = within_tolerance(
        ws1_qwen3.teacher_forcing(bf, samples).logp, ws1_qwen3.teacher_forcing(ref, samples).logp, th.atol, th.rtol
    )
    assert cmp.passed, cmp.detail
    agg = _dlogp(hf_teacher_forcing(hf, samples), hf_rollout(hf, samples), contract)
    assert not agg.bitwise_equal, agg.detail


@pytest.fixture(scope="module")
def tied_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf_tied")
    hf = hf_checkpoint(d, seed=3, tie_word_embeddings=True)
    return d, hf


def test_tied_transformers_checkpoint_loads_and_matches(tied_ckpt):
    """transformers' save_pretrained of a tied Qwen3 (no lm_head.weight, tie_word_embeddings true): ws1 reads it
    sharing the table, and its FP32 logits match transformers' within the untied test's 1e-4."""
    from safetensors.torch import load_file

    d, hf = tied_ckpt
    assert hf.lm_head.weight is hf.model.embed_tokens.weight
    assert "lm_head.weight" not in load_file(str(d / "model.safetensors"))
    ours = ws1_qwen3.from_pretrained(d, profile="reference")
    assert ours.config.tie_word_embeddings and ours.lm_head.weight is ours.model.embed_tokens.weight
    assert torch.equal(ours.lm_head.weight, hf.lm_head.weight)
    ids = torch.randint(0, 700, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        err = float((ours(ids) - hf(ids).logits).abs().max())
    assert err <= 1e-4, err
    bf = ws1_qwen3.from_pretrained(d, profile="cpu_bf16")  # the BF16 chain loads it too (rounded once)
    assert bf.lm_head.weight is bf.model.embed_tokens.weight and bf.lm_head.weight.dtype == torch.bfloat16


def test_ws1_tied_checkpoint_loads_in_transformers(tied_ckpt, tmp_path):
    """The reverse: ws1's save_pretrained of a tied model is a checkpoint transformers loads tied, with the same
    table; the logits agree (FP32) within 1e-4."""
    from transformers import Qwen3ForCausalLM

    d, _ = tied_ckpt
    ours = ws1_qwen3.from_pretrained(d, profile="reference")
    out = tmp_path / "ws1_tied"
    ws1_qwen3.save_pretrained(ours, out)
    hf = Qwen3ForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    assert hf.config.tie_word_embeddings and hf.lm_head.weight is hf.model.embed_tokens.weight
    assert torch.equal(hf.lm_head.weight, ours.model.embed_tokens.weight)
    ids = torch.randint(0, 700, (2, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        err = float((ours(ids) - hf(ids).logits).abs().max())
    assert err <= 1e-4, err
