"""apply_ws1: a transformers Qwen3ForCausalLM on WS1's kernels, in place — the bits of ws1_qwen3's own model.

Tiny synthetic weights are written as an HF checkpoint, loaded by transformers in BF16 and patched; the patched
model's log-probs, logits and parameter gradients are compared BITWISE with ``ws1_qwen3.teacher_forcing`` on
``ws1_qwen3.from_pretrained`` of the same directory. Negative control: the same comparisons with the patch on
the candidate ``variant_m_split_k`` (det_gemm splits K when M > 8) break.
"""

from __future__ import annotations

import pytest
import torch
from hf_ref import hf_config

import ws1_accel
import ws1_ops
import ws1_qwen3
from ws1_qwen3 import ConfigError, ModelInputError, PatchError, Sample, apply_ws1, token_logprobs

transformers = pytest.importorskip("transformers")

LAYOUTS = ("padded_right", "padded_left")


def bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bit patterns (+0 != -0, NaN compared by its bits)."""
    t = t.detach().contiguous()
    return t.view({torch.float32: torch.int32, torch.bfloat16: torch.int16}[t.dtype])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-hf")
    ws1_qwen3.save_pretrained(ws1_qwen3.synthetic("tiny", "cpu_bf16", seed=11), path)
    return path


@pytest.fixture(scope="module")
def samples():
    """The manifest's 4 samples (11..19 tokens) and a short one (6 tokens: M <= 8 when alone)."""
    return [*ws1_qwen3.fixture_samples(), Sample(rank=4, tokens=(3, 14, 15, 92, 65, 35), n_prompt=3)]


def load_hf(ckpt, profile: str | None = "cpu_bf16"):
    model = transformers.Qwen3ForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16)
    return apply_ws1(model, profile) if profile else model


def batch(samples, layout: str, extra: int = 3, seed: int = 0):
    """input_ids [B, S] (pads: random ids, so nothing may read them), attention_mask [B, S], labels [B, S] (the
    completion tokens; -100 elsewhere)."""
    S = max(s.length for s in samples) + extra
    ids = torch.randint(1000, (len(samples), S), generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(len(samples), S, dtype=torch.int64)
    labels = torch.full((len(samples), S), -100, dtype=torch.int64)
    for b, s in enumerate(samples):
        lead = S - s.length if layout == "padded_left" else 0
        ids[b, lead : lead + s.length] = torch.tensor(s.tokens)
        mask[b, lead : lead + s.length] = 1
        labels[b, lead + s.n_prompt : lead + s.length] = torch.tensor(s.completion)
    return ids, mask, labels


def grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in model.named_parameters()}


# ---- the bits of ws1_qwen3's model ---------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_logprobs_are_teacher_forcings_bits(ckpt, samples, layout):
    ref = ws1_qwen3.from_pretrained(ckpt, "cpu_bf16")
    tf = ws1_qwen3.teacher_forcing(ref, samples, layout=layout)
    hf = load_hf(ckpt)
    ids, mask, labels = batch(samples, layout)
    logp = token_logprobs(hf, ids, mask, labels=labels)
    assert logp.dtype == torch.float32 and logp.shape == ids.shape
    counted = labels != -100
    # row-major over (b, t) is teacher forcing's (rank, position) order: rank b is row b
    assert same_bits(logp[counted], tf.logp)
    assert not logp[~counted].any()  # nothing scored: exactly 0
    # a completion mask scores the same tokens
    assert same_bits(token_logprobs(hf, ids, mask, completion_mask=counted), logp)


def test_a_row_alone_has_its_bits_in_the_batch(ckpt, samples):
    hf = load_hf(ckpt)
    for layout in LAYOUTS:
        ids, mask, _ = batch(samples, layout)
        together = token_logprobs(hf, ids, mask)
        out = hf(ids, attention_mask=mask)
        for b, s in enumerate(samples):
            row = mask[b].bool()
            alone_ids = torch.tensor([s.tokens])
            alone = token_logprobs(hf, alone_ids)
            assert same_bits(together[b, row], alone[0])
            assert same_bits(out.logits[b, row], hf(alone_ids).logits[0])
            assert not out.logits[b, ~row].any()  # pad positions: zeros


def test_forward_is_the_ws1_models_forward(ckpt):
    ref = ws1_qwen3.from_pretrained(ckpt, "cpu_bf16")
    hf = load_hf(ckpt)
    ids = torch.randint(1024, (3, 10), generator=torch.Generator().manual_seed(1))
    out = hf(ids)
    assert isinstance(out, transformers.modeling_outputs.CausalLMOutputWithPast) and out.loss is None
    assert same_bits(out.logits, ref(ids))  # FP32 [B, S, V]
    assert same_bits(hf(ids, logits_to_keep=4).logits, out.logits[:, -4:])
    assert same_bits(hf(ids, logits_to_keep=torch.tensor([0, 7])).logits, out.logits[:, [0, 7]])
    (logits,) = hf(ids, return_dict=False)
    assert same_bits(logits, out.logits)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradients_are_the_ws1_models_canonical_gradients(ckpt, samples, layout):
    ref = ws1_qwen3.from_pretrained(ckpt, "cpu_bf16")
    tf = ws1_qwen3.teacher_forcing(ref, samples, layout=layout, grad=True)
    with ws1_ops.canonical_grads():
        tf.loss.backward()  # −Σ logp(completion) / n
    hf = load_hf(ckpt)
    ids, mask, labels = batch(samples, layout)
    logp = token_logprobs(hf, ids, mask, labels=labels)
    counted = labels != -100
    with ws1_ops.canonical_grads():
        (-logp[counted].sum() / int(counted.sum())).backward()
    want, got = grads(ref), grads(hf)
    assert list(got) == list(want)  # the same names, in the same order
    assert [name for name in want if not same_bits(got[name], want[name])] == []


def test_micro_batches_in_one_scope_give_the_whole_batchs_gradient(ckpt, samples):
    """Two micro-batches (distinct sample_ranks) backward inside one canonical_grads(): the bits of one batch."""
    ids, mask, labels = batch(samples, "padded_right")
    n = int((labels != -100).sum())
    whole, split = load_hf(ckpt), load_hf(ckpt)
    with ws1_ops.canonical_grads():
        logp = token_logprobs(whole, ids, mask, labels=labels)
        (-logp[labels != -100].sum() / n).backward()
    with ws1_ops.canonical_grads():
        for part in ([3, 0], [4, 2, 1]):
            logp = token_logprobs(split, ids[part], mask[part], labels=labels[part], sample_ranks=torch.tensor(part))
            (-logp[labels[part] != -100].sum() / n).backward()
    want, got = grads(whole), grads(split)
    assert [name for name in want if not same_bits(got[name], want[name])] == []


def test_parameters_are_the_same_objects_and_storage(ckpt, samples):
    hf = load_hf(ckpt, None)
    before = {name: (p, p.data_ptr()) for name, p in hf.named_parameters()}
    keys = list(hf.state_dict())
    apply_ws1(hf, "cpu_bf16")
    ids, mask, labels = batch(samples, "padded_left")
    with ws1_ops.canonical_grads():
        hf(ids, attention_mask=mask, labels=labels).loss.backward()
    after = {name: (p, p.data_ptr()) for name, p in hf.named_parameters()}
    assert list(after) == list(before)
    assert all(after[n][0] is before[n][0] and after[n][1] == before[n][1] for n in before)
    assert list(hf.state_dict()) == keys  # nothing registered beside them
    assert all(p.grad is not None for p in hf.parameters())


def test_parameters_are_read_at_call_time_and_module_hooks_fire(ckpt):
    """A parameter swapped in after apply_ws1 (as FSDP2's fully_shard does) is the one the next forward reads; each
    HF module is still entered through its __call__ (FSDP2 unshards in forward pre-hooks)."""
    hf = load_hf(ckpt)
    entered = []
    for name, module in hf.named_modules():
        if name.endswith(("self_attn", "mlp")) or name.split(".")[-1].isdigit() or name == "model":
            module.register_forward_pre_hook(lambda module, args, name=name: entered.append(name))
    ids = torch.randint(1024, (2, 6), generator=torch.Generator().manual_seed(2))
    before = hf(ids).logits
    layer = ("model.layers.{0}", "model.layers.{0}.self_attn", "model.layers.{0}.mlp")
    assert entered == ["model", *[n.format(i) for i in range(2) for n in layer]]
    proj = hf.model.layers[1].self_attn.q_proj
    proj.weight = torch.nn.Parameter(proj.weight.detach() * 2)
    assert not same_bits(hf(ids).logits, before)
    proj.weight = torch.nn.Parameter(proj.weight.detach() / 2)  # exact: a power of two
    assert same_bits(hf(ids).logits, before)


def test_loss_is_the_hf_convention(ckpt, samples):
    hf = load_hf(ckpt)
    ids, mask, labels = batch(samples, "padded_right")
    out = hf(ids, attention_mask=mask, labels=labels)
    assert out.loss.dtype == torch.float32 and out.loss.dim() == 0
    vocab = out.logits.shape[-1]
    torch_ce = torch.nn.functional.cross_entropy(
        out.logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    torch.testing.assert_close(out.loss, torch_ce, rtol=1e-6, atol=0)
    # its bits: minus the sum of the scored log-probs, row-major, over the count
    counted = labels != -100
    logp = token_logprobs(hf, ids, mask, labels=labels)
    assert same_bits(out.loss, -logp[counted].sum() / int(counted.sum()))
    assert same_bits(
        hf(ids, attention_mask=mask, labels=labels, num_items_in_batch=100).loss, -logp[counted].sum() / 100
    )
    loss, logits = hf(ids, attention_mask=mask, labels=labels, return_dict=False)
    assert same_bits(loss, out.loss) and same_bits(logits, out.logits)


def test_position_ids_pack_sequences_into_a_row(ckpt, samples):
    hf = load_hf(ckpt)
    ids, mask, labels = batch(samples[:2], "padded_right", extra=0)
    padded = token_logprobs(hf, ids, mask, labels=labels)
    a, b = samples[0], samples[1]
    packed_ids = torch.tensor([a.tokens + b.tokens])
    pos = torch.cat([torch.arange(a.length), torch.arange(b.length)])[None]
    packed_labels = torch.cat([labels[0, : a.length], labels[1, : b.length]])[None]
    packed = token_logprobs(hf, packed_ids, position_ids=pos, labels=packed_labels)
    assert same_bits(packed[0, : a.length], padded[0, : a.length])
    assert same_bits(packed[0, a.length :], padded[1, : b.length])
    # left padding with HF's cumsum positions: the positions the mask gives
    ids, mask, labels = batch(samples, "padded_left")
    cumsum = (mask.cumsum(1) - 1).clamp(min=0)
    assert same_bits(
        token_logprobs(hf, ids, mask, labels=labels, position_ids=cumsum), token_logprobs(hf, ids, mask, labels=labels)
    )


# ---- the negative control --------------------------------------------------------------------------


def test_a_variant_candidate_breaks_the_equalities(ckpt, samples):
    """The same comparisons with the patch on variant_m_split_k (det_gemm splits K when M > 8): red."""
    assert "variant_m_split_k" in ws1_ops.candidate_names()
    ref = ws1_qwen3.from_pretrained(ckpt, "cpu_bf16")
    tf = ws1_qwen3.teacher_forcing(ref, samples, layout="padded_right")
    hf = load_hf(ckpt, "variant_m_split_k")
    ids, mask, labels = batch(samples, "padded_right")
    logp = token_logprobs(hf, ids, mask, labels=labels)
    assert not same_bits(logp[labels != -100], tf.logp)
    short = samples[-1]  # 6 tokens: M <= 8 alone, M > 8 in the batch
    alone = token_logprobs(hf, torch.tensor([short.tokens]))
    together = token_logprobs(hf, ids, mask)
    assert not same_bits(together[-1, : short.length], alone[0])


# ---- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tied_embeddings_logprobs_and_gradients_are_the_ws1_models(tmp_path, samples, layout):
    """Qwen3-0.6B/1.7B/4B's layout: transformers ties lm_head.weight to embed_tokens.weight (one Parameter); the
    patched model's log-probs and its table's gradient (embedding + lm_head, combined in FP32 and rounded once
    inside canonical_grads) are the WS1 tied model's, bitwise."""
    ws1_qwen3.save_pretrained(ws1_qwen3.synthetic("tiny-tied", "cpu_bf16", seed=12), tmp_path)
    ref = ws1_qwen3.from_pretrained(tmp_path, "cpu_bf16")
    tf = ws1_qwen3.teacher_forcing(ref, samples, layout=layout, grad=True)
    with ws1_ops.canonical_grads():
        tf.loss.backward()
    hf = load_hf(tmp_path)
    assert hf.lm_head.weight is hf.model.embed_tokens.weight
    ids, mask, labels = batch(samples, layout)
    logp = token_logprobs(hf, ids, mask, labels=labels)
    counted = labels != -100
    assert same_bits(logp[counted], tf.logp)
    with ws1_ops.canonical_grads():
        (-logp[counted].sum() / int(counted.sum())).backward()
    want, got = grads(ref), grads(hf)
    assert list(got) == list(want) and "lm_head.weight" not in got
    assert [name for name in want if not same_bits(got[name], want[name])] == []


def random_hf(**over):
    return transformers.Qwen3ForCausalLM(hf_config(**over)).to(torch.bfloat16)


@pytest.mark.parametrize(
    "over, field",
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"use_sliding_window": True, "sliding_window": 4}, "use_sliding_window"),
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}}, "rope type"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"attention_dropout": 0.1}, "attention_dropout"),
    ],
)
def test_refuses_what_is_not_the_dense_chain(over, field):
    with pytest.raises((ConfigError, PatchError), match=field) as err:
        apply_ws1(random_hf(**over), "cpu_bf16")
    assert "\n" not in str(err.value)


def test_refuses_other_models_dtypes_and_profiles(ckpt):
    with pytest.raises(PatchError, match="takes a transformers Qwen3ForCausalLM, got Linear"):
        apply_ws1(torch.nn.Linear(2, 2), "cpu_bf16")
    with pytest.raises(PatchError, match=r"model.embed_tokens.weight is torch.float32"):
        apply_ws1(random_hf().float(), "cpu_bf16")
    with pytest.raises(ws1_accel.UnknownProfile):
        apply_ws1(random_hf(), "cpu_bf17")
    with pytest.raises(PatchError, match="FP32 reference"):
        apply_ws1(random_hf(), "reference")
    reason = ws1_accel.unavailable_reason("ascend_bf16")
    if reason is None:
        pytest.skip("this host has an NPU")
    with pytest.raises(ws1_accel.AcceleratorUnavailable) as err:
        apply_ws1(random_hf(), "ascend_bf16")
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_applying_twice(ckpt):
    hf = load_hf(ckpt)
    forward = hf.forward
    assert apply_ws1(hf, "cpu_bf16") is hf and hf.forward is forward  # the same profile: a no-op
    with pytest.raises(PatchError, match="already runs cpu_bf16; load it again to run variant_m_split_k"):
        apply_ws1(hf, "variant_m_split_k")


def test_refuses_unsupported_forward_arguments(ckpt):
    hf = load_hf(ckpt)
    ids = torch.randint(1024, (2, 5), generator=torch.Generator().manual_seed(3))
    refused = [
        ({"past_key_values": transformers.DynamicCache()}, "KV cache"),
        ({"use_cache": True}, "use_cache=True"),
        ({"inputs_embeds": torch.zeros(2, 5, 128)}, "inputs_embeds"),
        ({"output_attentions": True}, "output_attentions=True"),
        ({"output_hidden_states": True}, "output_hidden_states=True"),
        ({"cache_position": torch.arange(5)}, "cache_position"),
        ({"token_type_ids": ids}, "'token_type_ids'"),
        ({"labels": ids, "logits_to_keep": 1}, "labels with logits_to_keep"),
    ]
    for kwargs, what in refused:
        with pytest.raises(PatchError, match=what) as err:
            hf(ids, **kwargs)
        assert "\n" not in str(err.value)
    hf(ids, use_cache=False, output_attentions=False)  # the defaults' spelled-out values are fine
    with pytest.raises(ModelInputError, match="row 0: its tokens are not one contiguous run"):
        hf(ids, attention_mask=torch.tensor([[1, 0, 1, 1, 1], [1, 1, 1, 1, 1]]))
    with pytest.raises(ModelInputError, match="position_ids row 1: positions must count 0, 1, 2"):
        hf(ids, position_ids=torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]))
    with pytest.raises(ModelInputError, match=r"labels\[1, 0\] = 7 has no predicting token"):
        hf(ids, labels=torch.tensor([[-100] * 5, [7, -100, -100, -100, -100]]))
    with pytest.raises(ModelInputError, match="label 5000 is neither -100 nor in the vocabulary"):
        token_logprobs(hf, ids, labels=torch.full((2, 5), 5000))
    with pytest.raises(PatchError, match="is not patched"):
        token_logprobs(load_hf(ckpt, None), ids)
    with pytest.raises(ModelInputError, match="sample_ranks must be distinct"):
        token_logprobs(hf, ids, sample_ranks=torch.tensor([1, 1]))
