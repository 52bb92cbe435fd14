"""Weights: HF-format loading (config.json + safetensors shards + index), saving, the content hash,
and seeded synthetic weights.

Loading is all-or-nothing: every shard is read and every tensor checked — name, shape, that none
is missing and none is extra, the content hash when one is expected — into a fresh dict before a
model is built, so a bad directory raises one error naming the problem and nothing is half-loaded.

The content hash (``weights_sha256``) is independent of sharding and file order: sha256 over the
tensors in sorted name order, each contributing ``name``, ``dtype``, ``shape`` and its raw bytes.

Tied embeddings (``tie_word_embeddings: true``) are stored as transformers stores them: the table once, as
``model.embed_tokens.weight``, and no ``lm_head.weight``. A tied checkpoint that carries ``lm_head.weight``
anyway is read when that tensor is bitwise the table (it is dropped, and the hash is the model's tensors'),
and refused when it differs (the head would not be the table the config says it is).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import torch

from .config import ConfigError, Qwen3Config
from .model import Qwen3ForCausalLM, param_dtype


class WeightsError(ValueError):
    """A weights directory that cannot be loaded as it is: the message names the file or tensor."""


# tied embeddings: the one table's name, and the head's name a tied checkpoint does not carry
TIED_TABLE, TIED_HEAD = "model.embed_tokens.weight", "lm_head.weight"


def expected_shapes(c: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """HF parameter name -> shape, for every tensor of the model (3 + 11 per layer; 2 + 11 when tied: no
    ``lm_head.weight``, the head reads ``model.embed_tokens.weight``)."""
    H, F, D, V = c.hidden_size, c.intermediate_size, c.head_dim, c.vocab_size
    qd, kd = c.num_attention_heads * D, c.num_key_value_heads * D
    out = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = (V, H)
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        out.update(
            {
                p + "self_attn.q_proj.weight": (qd, H),
                p + "self_attn.k_proj.weight": (kd, H),
                p + "self_attn.v_proj.weight": (kd, H),
                p + "self_attn.o_proj.weight": (H, qd),
                p + "self_attn.q_norm.weight": (D,),
                p + "self_attn.k_norm.weight": (D,),
                p + "mlp.gate_proj.weight": (F, H),
                p + "mlp.up_proj.weight": (F, H),
                p + "mlp.down_proj.weight": (H, F),
                p + "input_layernorm.weight": (H,),
                p + "post_attention_layernorm.weight": (H,),
            }
        )
    return out


def content_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over (name, dtype, shape, raw bytes) of each tensor in sorted name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}|{str(t.dtype).replace('torch.', '')}|{list(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _shard_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            wm = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise WeightsError(f"{index}: not a safetensors index (no weight_map): {exc}") from None
        files = sorted(set(wm.values()))
        missing = [f for f in files if not (path / f).exists()]
        if missing:
            raise WeightsError(f"{path}: shard(s) named in the index are missing: {missing}")
        return [path / f for f in files]
    single = path / "model.safetensors"
    if single.exists():
        return [single]
    found = sorted(path.glob("*.safetensors"))
    if not found:
        raise WeightsError(f"{path}: no model.safetensors, no model.safetensors.index.json and no *.safetensors files")
    return found


def read_checkpoint(path: str | Path) -> tuple[Qwen3Config, dict[str, torch.Tensor]]:
    """(config, tensors) of an HF-format directory, checked against the config; nothing built yet."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    p = Path(path)
    if not p.is_dir():
        raise WeightsError(f"{p}: not a directory")
    cfg_file = p / "config.json"
    if not cfg_file.exists():
        raise WeightsError(f"{p}: no config.json")
    try:
        config = Qwen3Config.from_hf(json.loads(cfg_file.read_text()), name=p.name)
    except json.JSONDecodeError as exc:
        raise WeightsError(f"{cfg_file}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except ConfigError as exc:
        raise WeightsError(str(exc)) from None
    tensors: dict[str, torch.Tensor] = {}
    for f in _shard_files(p):
        try:
            part = load_file(str(f))
        except (SafetensorError, OSError, ValueError) as exc:
            raise WeightsError(f"{f}: unreadable safetensors shard: {exc}") from None
        dup = sorted(set(part) & set(tensors))
        if dup:
            raise WeightsError(f"{f}: tensor(s) {dup[:3]} also appear in another shard")
        tensors.update(part)
    _drop_tied_head(config, tensors)
    check_tensors(config, tensors)
    return config, tensors


def _drop_tied_head(config: Qwen3Config, tensors: dict[str, torch.Tensor]) -> None:
    """A tied checkpoint's redundant ``lm_head.weight``: dropped when bitwise the embedding table, else refused."""
    head, table = tensors.get(TIED_HEAD), tensors.get(TIED_TABLE)
    if not config.tie_word_embeddings or head is None or table is None:
        return  # untied, or nothing to drop (check_tensors names a missing table)
    if head.dtype != table.dtype or head.shape != table.shape or not torch.equal(head.view(-1), table.view(-1)):
        raise WeightsError(
            f"tensor {TIED_HEAD}: the config ties it to {TIED_TABLE} (tie_word_embeddings) but the checkpoint's "
            f"differs ({head.dtype} {list(head.shape)} vs {table.dtype} {list(table.shape)}, or other values)"
        )
    del tensors[TIED_HEAD]


def check_tensors(config: Qwen3Config, tensors: dict[str, torch.Tensor]) -> None:
    want = expected_shapes(config)
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing:
        raise WeightsError(
            f"missing tensor(s): {missing[:5]}{' ...' if len(missing) > 5 else ''} ({len(missing)} of {len(want)})"
        )
    if extra:
        raise WeightsError(f"unexpected tensor(s) for this config: {extra[:5]}{' ...' if len(extra) > 5 else ''}")
    for name, shape in want.items():
        t = tensors[name]
        if tuple(t.shape) != shape:
            raise WeightsError(f"tensor {name}: shape {list(t.shape)}, the config needs {list(shape)}")
        if not t.is_floating_point():
            raise WeightsError(f"tensor {name}: dtype {t.dtype} is not floating point")


def build(config: Qwen3Config, tensors: dict[str, torch.Tensor], profile: str, device="cpu") -> Qwen3ForCausalLM:
    """A model of ``profile`` holding ``tensors`` in the profile's parameter dtype (BF16 rounds to
    nearest-even once, here; the reference path keeps FP32 — an FP32 checkpoint stays exact)."""
    check_tensors(config, tensors)
    model = Qwen3ForCausalLM(config, profile, device=device)
    dt = param_dtype(profile)
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied table once, by its name model.embed_tokens.weight
            p.copy_(tensors[name].to(dt))  # the rounding to BF16 happens on the host: the same bits on every device
    return model


def from_pretrained(
    path: str | Path,
    profile: str = "cpu_bf16",
    *,
    expected_sha256: str | None = None,
    device: str | torch.device | None = None,
) -> Qwen3ForCausalLM:
    """Load an HF-format Qwen3 directory for ``profile`` (``"reference"``: the FP32 path).

    ``expected_sha256``: the content hash the weights must have (see :func:`content_sha256`);
    a mismatch raises before any model exists. The profile's device is resolved first, so an
    absent device fails before the (possibly long) read."""
    from .model import check_profile

    check_profile(profile)
    dev = _device_for(profile, device)
    config, tensors = read_checkpoint(path)
    digest = content_sha256(tensors)
    if expected_sha256 is not None and digest != expected_sha256:
        raise WeightsError(f"{path}: content sha256 {digest[:16]}… does not match the expected {expected_sha256[:16]}…")
    model = build(config, tensors, profile, dev)
    model.weights_sha256, model.source = digest, str(path)
    return model


def _device_for(profile: str, device) -> torch.device:
    import ws1_accel
    import ws1_ops

    from .model import REFERENCE

    if profile == REFERENCE or (profile not in ws1_accel.PROFILE_FAMILY and profile in ws1_ops.candidate_names()):
        return torch.device(device or "cpu")
    return ws1_accel.resolve_device(profile, device)


def save_pretrained(model: Qwen3ForCausalLM, path: str | Path, *, max_shard_bytes: int = 2 << 30) -> str:
    """Write config.json, safetensors shard(s) and (when sharded) the index. Returns the content hash."""
    from safetensors.torch import save_file

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    # named_parameters(), not state_dict(): a tied table once, as model.embed_tokens.weight (state_dict() would
    # list it under lm_head.weight too), as transformers writes a tied checkpoint
    tensors = {n: t.detach().contiguous().cpu() for n, t in model.named_parameters()}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensors[name]
        size += nbytes
    (p / "config.json").write_text(json.dumps(model.config.to_hf(), indent=2) + "\n")
    if len(shards) == 1:
        save_file(shards[0], str(p / "model.safetensors"), metadata={"format": "pt"})
    else:
        wm = {}
        for i, shard in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(p / fname), metadata={"format": "pt"})
            wm.update({n: fname for n in shard})
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        (p / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": wm}, indent=1)
        )
    return content_sha256(tensors)


# ---- synthetic weights ------------------------------------------------------------------------


def _seed_of(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def synthetic_tensor(seed: int, name: str, shape: tuple[int, ...], device: str | torch.device = "cpu") -> torch.Tensor:
    """One tensor of seeded synthetic weights, FP32, created on ``device``. Each tensor has its own
    generator (seeded by the run seed and its name), so it does not depend on which other tensors
    exist or their order.

    The generator is the device's own (CPU: Mersenne Twister; CUDA: Philox), so the values are a
    function of (seed, name, device type): a model is created where it runs (an 8B model on a GPU
    never passes through host memory), and no gate compares synthetic weights across devices.

    Matrices ~ N(0, 0.02²) as HF initializes Qwen3; norm weights 1 + N(0, 0.1²) so that their
    gradients and the per-channel scaling are exercised (a weight of exactly 1 hides bugs)."""
    device = torch.device(device)
    g = torch.Generator(device=device).manual_seed(_seed_of(seed, name))
    if len(shape) == 1:
        return 1.0 + 0.1 * torch.randn(shape, generator=g, device=device)
    return 0.02 * torch.randn(shape, generator=g, device=device)


def synthetic(
    config: Qwen3Config | str,
    profile: str = "cpu_bf16",
    *,
    seed: int = 20260812,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Qwen3ForCausalLM:
    """A model with seeded synthetic weights (``model.synthetic`` is True: never the formal gate),
    created on the profile's device (:func:`synthetic_tensor`)."""
    from .config import preset
    from .model import check_profile

    c = preset(config) if isinstance(config, str) else config
    check_profile(profile)
    dev = _device_for(profile, device)
    model = Qwen3ForCausalLM(c, profile, device=dev)
    dt = param_dtype(profile)
    named = list(model.named_parameters())
    it: Iterable = named
    if progress:
        from tqdm import tqdm

        it = tqdm(named, desc=f"synthetic weights ({c.name})", unit="tensor", leave=False)
    with torch.no_grad():
        for name, p in it:
            p.copy_(synthetic_tensor(seed, name, tuple(p.shape), dev).to(dt))
    model.synthetic, model.source = True, f"synthetic(seed={seed}, {dev.type})"
    return model
