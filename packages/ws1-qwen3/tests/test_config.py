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
        ("tie_word_embeddings", True, "tie_word_embeddings"),
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


def test_bad_values():
    with pytest.raises(ConfigError, match="multiple of num_key_value_heads"):
        preset("tiny").replace(num_key_value_heads=3)
    with pytest.raises(ConfigError, match="hidden_size must be a positive int"):
        preset("tiny").replace(hidden_size=0)
    with pytest.raises(ConfigError, match="unknown model preset 'huge'"):
        preset("huge")
