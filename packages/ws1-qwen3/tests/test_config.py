import pytest

from ws1_qwen3 import PRESETS, ConfigError, Qwen3Config, preset


def test_presets_match_the_manifest():
    from ws1_contract import load_manifest

    m = load_manifest()
    c = preset("qwen3-8b")
    for key, want in m.model.config.items():
        if hasattr(c, key):
            assert getattr(c, key) == want, key
    assert c.n_parameter_tensors == m.model.parameter_tensors == 399
    assert preset("qwen3-8b-L2").replace(num_hidden_layers=36, name="qwen3-8b") == c
    t = preset("tiny")
    assert t.vocab_size >= 616 and t.pad_id == t.vocab_size - 1
    assert c.pad_id == 151643


def test_hf_roundtrip_and_both_rope_spellings():
    for c in PRESETS.values():
        d = c.to_hf()
        assert Qwen3Config.from_hf(d, name=c.name) == c
        old = {k: v for k, v in d.items() if k != "rope_parameters"}
        assert Qwen3Config.from_hf(old, name=c.name).rope_theta == c.rope_theta


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("tie_word_embeddings", "yes", "tie_word_embeddings='yes' is not a bool"),
        ("attention_bias", True, "attention_bias"),
        ("use_sliding_window", True, "use_sliding_window"),
        ("hidden_act", "gelu", "hidden_act"),
        ("rope_parameters", {"rope_theta": 1e6, "rope_type": "yarn"}, "rope type 'yarn'"),
        ("model_type", "llama", "not a dense Qwen3"),
    ],
)
def test_other_architectures_are_refused_by_name(key, value, match):
    d = preset("tiny").to_hf()
    d[key] = value
    with pytest.raises(ConfigError, match=match):
        Qwen3Config.from_hf(d)


# the dense Qwen3 family as the Qwen/Qwen3-<size> config.json files give it:
# (hidden, intermediate, layers, query heads, tied); every size has vocab 151936, 8 KV heads of dim 128,
# 40960 positions, RoPE theta 1e6, RMSNorm eps 1e-6. Parameter counts (with the tables) as Qwen3's report gives them.
FAMILY = {
    "qwen3-0.6b": (1024, 3072, 28, 16, True, 0.6e9),
    "qwen3-1.7b": (2048, 6144, 28, 16, True, 1.7e9),
    "qwen3-4b": (2560, 9728, 36, 32, True, 4.0e9),
    "qwen3-8b": (4096, 12288, 36, 32, False, 8.2e9),
    "qwen3-14b": (5120, 17408, 40, 40, False, 14.8e9),
    "qwen3-32b": (5120, 25600, 64, 64, False, 32.8e9),
}


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_the_dense_family_presets(name):
    hidden, intermediate, layers, heads, tied, params = FAMILY[name]
    c = preset(name)
    got = (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads, c.tie_word_embeddings)
    assert got == (hidden, intermediate, layers, heads, tied)
    assert (c.vocab_size, c.num_key_value_heads, c.head_dim, c.max_position_embeddings) == (151936, 8, 128, 40960)
    assert (c.rope_theta, c.rms_norm_eps, c.pad_id, c.name) == (1e6, 1e-6, 151643, name)
    assert c.n_parameter_tensors == (2 if tied else 3) + 11 * layers
    assert abs(c.n_parameters() - params) < 0.05e9, c.n_parameters()
    assert c.to_hf()["tie_word_embeddings"] is tied


def test_tiny_tied_is_tiny_with_the_table_shared():
    tied = preset("tiny-tied")
    assert tied.tie_word_embeddings and not preset("tiny").tie_word_embeddings
    assert tied.replace(tie_word_embeddings=False, name="tiny") == preset("tiny")
    assert tied.n_parameter_tensors == 24 and preset("tiny").n_parameter_tensors == 25
    assert preset("tiny").n_parameters() - tied.n_parameters() == tied.vocab_size * tied.hidden_size


def test_transformers_default_is_untied():
    """A config.json without the key is untied (transformers' Qwen3Config default), one with it is read as given."""
    d = preset("tiny").to_hf()
    del d["tie_word_embeddings"]
    assert not Qwen3Config.from_hf(d).tie_word_embeddings
    d["tie_word_embeddings"] = True
    assert Qwen3Config.from_hf(d).tie_word_embeddings


def test_bad_values():
    with pytest.raises(ConfigError, match="multiple of num_key_value_heads"):
        preset("tiny").replace(num_key_value_heads=3)
    with pytest.raises(ConfigError, match="hidden_size must be a positive int"):
        preset("tiny").replace(hidden_size=0)
    with pytest.raises(ConfigError, match="unknown model preset 'huge'"):
        preset("huge")
    with pytest.raises(ConfigError, match="config.tie_word_embeddings must be a bool, got 1"):
        preset("tiny").replace(tie_word_embeddings=1)
