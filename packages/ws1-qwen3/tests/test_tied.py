"""Tied embeddings (Qwen3-0.6B / 1.7B / 4B) on `tiny-tied`: one shared parameter; the same forward as an untied
model whose head is a copy of the table; the shared gradient is the FP32 sum of the embedding's and the head's
canonical contributions, rounded once; decode equals teacher forcing. Layout invariance of every gradient: ws1-matrix
(test_chain_cells.py, test_c10.py)."""

import pytest
import torch

import ws1_ops
import ws1_qwen3
from ws1_contract import bitwise
from ws1_qwen3 import teacher_forcing
from ws1_qwen3.rollout import rollout_logp

TABLE = "model.embed_tokens.weight"


@pytest.fixture(scope="module")
def tied():
    return ws1_qwen3.synthetic("tiny-tied", "cpu_bf16")


def untied_twin(model):
    """An untied `tiny` with the tied model's weights, its lm_head a copy (own storage) of the table."""
    twin = ws1_qwen3.Qwen3ForCausalLM(model.config.replace(tie_word_embeddings=False), model.profile)
    with torch.no_grad():
        src = dict(model.named_parameters())
        for name, p in twin.named_parameters():
            p.copy_(src[TABLE if name == "lm_head.weight" else name])
    return twin


def test_one_parameter_one_storage_listed_once(tied):
    table = tied.model.embed_tokens.weight
    assert tied.lm_head.weight is table and ws1_ops.is_tied(table)
    names = [n for n, _ in tied.named_parameters()]
    assert TABLE in names and "lm_head.weight" not in names and len(names) == tied.config.n_parameter_tensors == 24
    assert len({p.data_ptr() for p in tied.parameters()}) == 24
    assert sum(p.numel() for p in tied.parameters()) == tied.config.n_parameters()
    assert "lm_head.weight" not in tied.state_dict() and len(tied.state_dict()) == 24
    assert list(tied.lm_head.parameters()) == []  # the head holds no parameter: nothing can replace it apart
    # synthetic weights: the table is the untied preset's embedding (seeded by name), the head reads it
    assert torch.equal(table, ws1_qwen3.synthetic("tiny").model.embed_tokens.weight)
    assert not ws1_ops.is_tied(untied_twin(tied).model.embed_tokens.weight)


def test_the_head_follows_the_table_when_it_is_replaced():
    """A conversion that gives the embedding module a new Parameter (.to(float32) here) moves the head with it:
    still one tensor, still marked tied once the head has run."""
    m = ws1_qwen3.synthetic("tiny-tied", "cpu_bf16").to(torch.float32)
    assert m.lm_head.weight is m.model.embed_tokens.weight and m.lm_head.weight.dtype == torch.float32
    m.model.embed_tokens.weight = torch.nn.Parameter(m.model.embed_tokens.weight.detach().bfloat16())
    assert m.lm_head.weight is m.model.embed_tokens.weight and not ws1_ops.is_tied(m.lm_head.weight)
    m(torch.zeros(1, 3, dtype=torch.int64))
    assert ws1_ops.is_tied(m.model.embed_tokens.weight)


def test_forward_is_the_untied_forward_with_the_table_as_head(tied, samples):
    twin = untied_twin(tied)
    ids = torch.randint(0, 1000, (2, 9), generator=torch.Generator().manual_seed(0))
    assert bitwise(tied(ids), twin(ids)).passed
    for layout in ws1_qwen3.LAYOUTS:
        a, b = teacher_forcing(tied, samples, layout=layout), teacher_forcing(twin, samples, layout=layout)
        assert bitwise(a.logp, b.logp).passed, layout


def test_decode_equals_teacher_forcing(tied, samples):
    tf = teacher_forcing(tied, samples, layout="packed")
    for kw in ({}, {"chunk": 7}, {"cache": "paged", "block_size": 4}):
        assert bitwise(rollout_logp(tied, samples, **kw), tf.logp[tf.active]).passed, kw


def test_the_shared_gradient_is_the_fp32_sum_rounded_once(tied, samples, monkeypatch):
    """docs/model.md "Tied embeddings": grad(table) = bf16(fp32 dE + fp32 dW_lm_head), each contribution the
    op's canonical reduction — what an untied twin gets for embed_tokens and lm_head before rounding. Every other
    parameter's gradient is the twin's, bit for bit."""
    parts = []
    combine = ws1_ops.grads.combine

    def spy(contributions, dtype):
        parts.append([(op, g.clone()) for op, g in contributions])
        return combine(contributions, dtype)

    monkeypatch.setattr(ws1_ops.grads, "combine", spy)
    twin = untied_twin(tied)
    for model in (tied, twin):
        model.zero_grad(set_to_none=True)
        tf = teacher_forcing(model, samples, layout="padded_right", padded_length=20, grad=True)
        with ws1_ops.canonical_grads():
            tf.loss.backward()
    (contributions,) = parts  # the tied model's table, once; the twin combines nothing
    assert [op for op, _ in contributions] == ["embedding", "lm_head"]
    (_, d_embedding), (_, d_head) = contributions
    assert d_embedding.dtype == d_head.dtype == torch.float32
    table = tied.model.embed_tokens.weight
    assert table.grad.dtype == torch.bfloat16
    assert bitwise(table.grad, (d_embedding + d_head).to(torch.bfloat16)).passed
    assert bitwise(twin.model.embed_tokens.weight.grad, d_embedding.to(torch.bfloat16)).passed
    assert bitwise(twin.lm_head.weight.grad, d_head.to(torch.bfloat16)).passed
    # adding the two BF16-rounded gradients in BF16 (autograd's accumulation) would give other bits
    assert not bitwise(table.grad, twin.model.embed_tokens.weight.grad + twin.lm_head.weight.grad).passed
    twin_grads = dict(twin.named_parameters())
    for name, p in tied.named_parameters():
        if name != TABLE:
            assert bitwise(p.grad, twin_grads[name].grad, name).passed


def test_backward_outside_canonical_grads_is_refused(tied, samples):
    tied.zero_grad(set_to_none=True)
    tf = teacher_forcing(tied, samples, layout="packed", grad=True)
    with pytest.raises(ws1_ops.OpInputError, match=r"^lm_head: the weight is tied"):
        tf.loss.backward()


def test_the_reference_path_sums_in_fp32(tied, samples):
    """The FP32 reference (plain autograd, FP32 parameters): one shared parameter too; its gradient is autograd's
    FP32 sum of the two contributions, the reference the chain gate judges the BF16 gradient against."""
    ref = ws1_qwen3.Qwen3ForCausalLM(tied.config, ws1_qwen3.REFERENCE)
    with torch.no_grad():
        src = dict(tied.named_parameters())
        for name, p in ref.named_parameters():
            p.copy_(src[name].float())
    assert ref.lm_head.weight is ref.model.embed_tokens.weight and ref.lm_head.weight.dtype == torch.float32
    twin = untied_twin(ref)
    for model in (ref, twin):
        teacher_forcing(model, samples, layout="packed", grad=True).loss.backward()
    both = twin.model.embed_tokens.weight.grad + twin.lm_head.weight.grad
    assert bitwise(ref.model.embed_tokens.weight.grad, both).passed
