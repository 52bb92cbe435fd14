"""The model on `tiny`: rollout decode equals teacher forcing bit for bit (plain PyTorch ops, the
negative control, do not); forward entry points; one-line errors. The chain gate's layout cells
are tested in ws1-matrix (test_chain_cells.py)."""

import pytest
import torch

import ws1_qwen3
from ws1_contract import bitwise
from ws1_qwen3 import ModelInputError, Sample, teacher_forcing
from ws1_qwen3.rollout import rollout_logp


def test_decode_equals_teacher_forcing(tiny, samples):
    tf = teacher_forcing(tiny, samples, layout="packed")
    for kw in ({}, {"together": False}, {"chunk": 7}, {"cache": "paged", "block_size": 4}):
        assert bitwise(rollout_logp(tiny, samples, **kw), tf.logp[tf.active]).passed, kw


def test_decode_negative_control(samples):
    m = ws1_qwen3.synthetic("tiny", "torch_default")
    tf = teacher_forcing(m, samples, layout="packed")
    assert not bitwise(rollout_logp(m, samples), tf.logp[tf.active]).passed


def test_forward_logits_shape_and_rows_independent(tiny):
    ids = torch.randint(0, 1000, (3, 9), generator=torch.Generator().manual_seed(0))
    out = tiny(ids)
    assert out.dtype == torch.float32 and out.shape == (3, 9, 1024)
    alone = tiny(ids[1:2])
    assert torch.equal(out[1:2].view(torch.int32), alone.view(torch.int32))


def test_forward_packed_equals_each_sequence_alone(tiny):
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 1000, (n,), generator=g) for n in (5, 11, 3)]
    cu = torch.tensor([0, 5, 16, 19])
    packed = tiny.forward_packed(torch.cat(seqs), cu)
    assert packed.shape == (19, 1024) and packed.dtype == torch.float32
    for s, a in zip(seqs, cu[:-1].tolist()):
        alone = tiny(s[None])[0]
        assert torch.equal(packed[a : a + s.numel()].view(torch.int32), alone.view(torch.int32))
    with pytest.raises(ModelInputError, match="strictly increasing"):
        tiny.forward_packed(torch.cat(seqs), torch.tensor([0, 5, 5, 19]))


def test_loss_is_mean_negative_logp_of_active(tiny, samples):
    tf = teacher_forcing(tiny, samples, layout="packed")
    assert tf.active.sum() == 27 and tf.keys.shape == (27,)
    assert torch.allclose(tf.loss, -tf.logp[tf.active].sum() / 27)
    every = teacher_forcing(tiny, samples, layout="packed", all_tokens=True)
    assert every.keys.shape == (sum(s.length - 1 for s in samples),)
    assert bitwise(every.logp[every.active], tf.logp).passed


def test_bad_inputs_one_line_errors(tiny, samples):
    with pytest.raises(ModelInputError, match="token id 5000 is outside the vocabulary"):
        teacher_forcing(tiny, [Sample(0, (1, 2, 5000), 1)])
    with pytest.raises(ModelInputError, match="exceeds max_position_embeddings"):
        teacher_forcing(tiny, [Sample(0, tuple([1] * 2049), 1)])
    with pytest.raises(ModelInputError, match="unknown layout 'diagonal'"):
        teacher_forcing(tiny, samples, layout="diagonal")
    with pytest.raises(ModelInputError, match="ranks must be distinct"):
        teacher_forcing(tiny, [samples[0], samples[0]])
    with pytest.raises(ModelInputError, match="padded_length 10 is shorter"):
        teacher_forcing(tiny, samples, padded_length=10)
    with pytest.raises(ModelInputError, match="n_prompt"):
        Sample(0, (1, 2), 3)
    with pytest.raises(ModelInputError, match=r"int64 \[B, S\]"):
        tiny(torch.zeros(3, dtype=torch.int64))


def test_absent_device_and_unknown_profile_fail_closed():
    import ws1_accel

    with pytest.raises(ws1_accel.AcceleratorUnavailable):
        ws1_qwen3.synthetic("tiny", "ascend_bf16")
    with pytest.raises(ws1_accel.UnknownProfile):
        ws1_qwen3.synthetic("tiny", "tpu_bf16")


def test_the_residual_add_by_promotion_is_h_plus_y_float():
    """The model adds a BF16 op output to the FP32 residual stream with torch.add's type promotion (one
    kernel): the bits of ``h + y.float()``, forward and both gradients (y's rounded to BF16 by autograd)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    for _ in range(5):
        h = (torch.randn(64, 333, generator=g, device="cpu") * 10).requires_grad_()
        y = (torch.randn(64, 333, generator=g, device="cpu") * 10).bfloat16().requires_grad_()
        dout = torch.randn(64, 333, generator=g, device="cpu") * 1e3
        a, b = h + y.float(), torch.add(h, y)
        assert b.dtype == torch.float32 and torch.equal(a.view(torch.int32), b.view(torch.int32))
        (ha, ya), (hb, yb) = torch.autograd.grad(a, (h, y), dout), torch.autograd.grad(b, (h, y), dout)
        assert torch.equal(ha.view(torch.int32), hb.view(torch.int32))
        assert yb.dtype == torch.bfloat16 and torch.equal(ya.view(torch.int16), yb.view(torch.int16))


def test_decoder_layer_refuses_a_bf16_residual(tiny):
    """The residual stream between decoder layers is FP32; a BF16 one (a wrapper's cast: FSDP2's default
    MixedPrecisionPolicy) is refused, one line, not run on rounded inputs."""
    from ws1_qwen3.model import ForwardContext

    layer = tiny.model.layers[0]
    context = ForwardContext(tiny.ops(), None, None, None, None, tiny.config.rms_norm_eps)
    with pytest.raises(
        ws1_qwen3.ModelInputError, match="decoder layer 0: the residual stream arrived as torch.bfloat16"
    ):
        layer(torch.zeros(2, tiny.config.hidden_size, dtype=torch.bfloat16), context)
