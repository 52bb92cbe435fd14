"""HF-format loading: round trips, the content hash, and every way a directory can be wrong."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import ws1_qwen3
from ws1_qwen3 import WeightsError, content_sha256, from_pretrained, read_checkpoint, save_pretrained


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny):
    d = tmp_path_factory.mktemp("ckpt")
    digest = save_pretrained(tiny, d)
    return d, digest


def params(m):
    return {n: p.detach() for n, p in m.named_parameters()}


def test_roundtrip_single_and_sharded(saved, tiny, tmp_path):
    d, digest = saved
    m = from_pretrained(d, "cpu_bf16", expected_sha256=digest)
    assert m.weights_sha256 == digest and not m.synthetic
    for n, p in params(tiny).items():
        assert torch.equal(params(m)[n].view(torch.int16), p.view(torch.int16)), n
    sharded = tmp_path / "sharded"
    assert save_pretrained(tiny, sharded, max_shard_bytes=200_000) == digest  # hash ignores sharding
    assert (sharded / "model.safetensors.index.json").exists()
    assert len(list(sharded.glob("*.safetensors"))) > 1
    assert from_pretrained(sharded, expected_sha256=digest).weights_sha256 == digest


def test_reference_profile_loads_fp32(saved):
    m = from_pretrained(saved[0], "reference")
    assert {p.dtype for p in m.parameters()} == {torch.float32}


def test_wrong_hash_refused(saved):
    with pytest.raises(WeightsError, match="does not match the expected"):
        from_pretrained(saved[0], expected_sha256="0" * 64)


def _copy(src, dst, edit=None):
    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    t = load_file(str(src / "model.safetensors"))
    if edit:
        edit(t)
    save_file(t, str(dst / "model.safetensors"))
    return dst


def test_missing_extra_misshaped_tensor_named(saved, tmp_path):
    src = saved[0]
    with pytest.raises(WeightsError, match=r"missing tensor\(s\): \['model.layers.1.mlp.up_proj.weight'\]"):
        read_checkpoint(_copy(src, tmp_path / "a", lambda t: t.pop("model.layers.1.mlp.up_proj.weight")))
    with pytest.raises(WeightsError, match=r"unexpected tensor\(s\) for this config: \['model.layers.9.extra'\]"):
        read_checkpoint(_copy(src, tmp_path / "b", lambda t: t.__setitem__("model.layers.9.extra", torch.zeros(2))))

    def shrink(t):
        t["model.norm.weight"] = t["model.norm.weight"][:-1].clone()

    with pytest.raises(WeightsError, match=r"tensor model.norm.weight: shape \[127\], the config needs \[128\]"):
        read_checkpoint(_copy(src, tmp_path / "c", shrink))


def test_missing_or_corrupt_shard_and_config(saved, tmp_path, tiny):
    d = tmp_path / "sh"
    save_pretrained(tiny, d, max_shard_bytes=200_000)
    shards = sorted(d.glob("model-*.safetensors"))
    shards[1].unlink()
    with pytest.raises(WeightsError, match=r"shard\(s\) named in the index are missing"):
        read_checkpoint(d)
    e = tmp_path / "corrupt"
    _copy(saved[0], e)
    (e / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(WeightsError, match="unreadable safetensors shard"):
        read_checkpoint(e)
    f = tmp_path / "noconf"
    f.mkdir()
    with pytest.raises(WeightsError, match="no config.json"):
        read_checkpoint(f)
    (f / "config.json").write_text("{oops")
    with pytest.raises(WeightsError, match="not JSON"):
        read_checkpoint(f)
    g = tmp_path / "tied"
    _copy(saved[0], g)
    cfg = json.loads((g / "config.json").read_text())
    cfg["tie_word_embeddings"] = True
    (g / "config.json").write_text(json.dumps(cfg))
    # tied, but the checkpoint's lm_head.weight is not the table: refused, naming the tensor
    with pytest.raises(WeightsError, match=r"lm_head.weight: the config ties it to model.embed_tokens.weight"):
        read_checkpoint(g)
    with pytest.raises(WeightsError, match="not a directory"):
        read_checkpoint(tmp_path / "nowhere")


def test_content_hash_sees_one_bit(tiny):
    t = {n: p.detach().clone() for n, p in tiny.named_parameters()}
    h = content_sha256(t)
    w = t["model.norm.weight"].view(torch.int16)
    w[0] ^= 1
    assert content_sha256(t) != h


def test_synthetic_is_seeded_and_marked():
    a = ws1_qwen3.synthetic("tiny", seed=1)
    b = ws1_qwen3.synthetic("tiny", seed=1)
    c = ws1_qwen3.synthetic("tiny", seed=2)
    assert a.synthetic and a.source == "synthetic(seed=1, cpu)"
    assert content_sha256(params(a)) == content_sha256(params(b)) != content_sha256(params(c))


def test_tied_roundtrip_writes_and_reads_the_table_once(tmp_path):
    """A tied model is saved as transformers saves one (the table once, no lm_head.weight; tie_word_embeddings true)
    and loads back sharing it, bit for bit, single-file and sharded, on both parameter dtypes."""
    tied = ws1_qwen3.synthetic("tiny-tied")
    d = tmp_path / "tied"
    digest = save_pretrained(tied, d)
    assert json.loads((d / "config.json").read_text())["tie_word_embeddings"] is True
    names = set(load_file(str(d / "model.safetensors")))
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names and len(names) == 24
    m = from_pretrained(d, "cpu_bf16", expected_sha256=digest)
    assert m.config == tied.config.replace(name="tied") and m.lm_head.weight is m.model.embed_tokens.weight
    for n, p in params(tied).items():
        assert torch.equal(params(m)[n].view(torch.int16), p.view(torch.int16)), n
    sharded = tmp_path / "sharded"
    assert save_pretrained(tied, sharded, max_shard_bytes=100_000) == digest
    assert "lm_head.weight" not in json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    assert from_pretrained(sharded, expected_sha256=digest).weights_sha256 == digest
    ref = from_pretrained(d, "reference")
    assert ref.lm_head.weight is ref.model.embed_tokens.weight and ref.lm_head.weight.dtype == torch.float32


def test_tied_checkpoint_with_a_redundant_head(tmp_path):
    """Some exporters write lm_head.weight beside a tied table: read when it is bitwise the table (dropped: the same
    model and hash), refused with one line naming it when it differs (in one bit, or in dtype)."""
    tied = ws1_qwen3.synthetic("tiny-tied")
    d = tmp_path / "tied"
    digest = save_pretrained(tied, d)

    def add_head(t):
        t["lm_head.weight"] = t["model.embed_tokens.weight"].clone()

    same = read_checkpoint(_copy(d, tmp_path / "same", add_head))[1]
    assert "lm_head.weight" not in same and content_sha256(same) == digest

    def add_other_head(t):
        add_head(t)
        t["lm_head.weight"].view(torch.int16)[5, 7] ^= 1

    msg = r"^tensor lm_head.weight: the config ties it to model.embed_tokens.weight \(tie_word_embeddings\)"
    with pytest.raises(WeightsError, match=msg):
        read_checkpoint(_copy(d, tmp_path / "other", add_other_head))

    def add_fp32_head(t):
        t["lm_head.weight"] = t["model.embed_tokens.weight"].float()

    with pytest.raises(WeightsError, match=msg):
        read_checkpoint(_copy(d, tmp_path / "fp32", add_fp32_head))
    # an untied config still needs its own head
    with pytest.raises(WeightsError, match=r"missing tensor\(s\): \['lm_head.weight'\]"):
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": False}))
        read_checkpoint(d)
