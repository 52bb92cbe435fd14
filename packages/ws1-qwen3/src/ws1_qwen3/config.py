"""Qwen3 dense configuration: an attrs class with presets and HF ``config.json`` conversion.

Only the dense Qwen3 architecture of docs/design.md §4 is accepted (SiLU MLP, QK-norm, untied embeddings,
no attention bias, no sliding window, default RoPE); anything else is refused with the field named,
rather than silently computed as something it is not.
"""

from __future__ import annotations

from typing import Any

import attrs


class ConfigError(ValueError):
    """A config that is not the dense Qwen3 architecture, or has an invalid value."""


def _positive(instance, attribute, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"config.{attribute.name} must be a positive int, got {value!r}")


@attrs.frozen
class Qwen3Config:
    """Shapes of one Qwen3 dense model. ``pad_token_id`` pads batches (the fixtures' pad id)."""

    vocab_size: int = attrs.field(validator=_positive)
    hidden_size: int = attrs.field(validator=_positive)
    intermediate_size: int = attrs.field(validator=_positive)
    num_hidden_layers: int = attrs.field(validator=_positive)
    num_attention_heads: int = attrs.field(validator=_positive)
    num_key_value_heads: int = attrs.field(validator=_positive)
    head_dim: int = attrs.field(validator=_positive)
    max_position_embeddings: int = attrs.field(validator=_positive)
    rope_theta: float = 1e6
    rms_norm_eps: float = 1e-6
    pad_token_id: int | None = None
    name: str = "custom"

    def __attrs_post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"config: num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ConfigError(f"config.head_dim must be even (RoPE rotates pairs), got {self.head_dim}")
        if not self.rope_theta > 0 or not self.rms_norm_eps > 0:
            raise ConfigError(
                f"config: rope_theta ({self.rope_theta}) and rms_norm_eps ({self.rms_norm_eps}) must be > 0"
            )
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(
                f"config.pad_token_id {self.pad_token_id} is outside the vocabulary [0, {self.vocab_size})"
            )

    @property
    def pad_id(self) -> int:
        """The pad id batches use: the config's, else vocab_size − 1 (the fixtures' rule for small vocabularies)."""
        return self.pad_token_id if self.pad_token_id is not None else self.vocab_size - 1

    @property
    def n_parameter_tensors(self) -> int:
        return 3 + 11 * self.num_hidden_layers

    def n_parameters(self) -> int:
        H, F, D = self.hidden_size, self.intermediate_size, self.head_dim
        per_layer = H * D * (2 * self.num_attention_heads + 2 * self.num_key_value_heads) + 3 * H * F + 2 * H + 2 * D
        return 2 * self.vocab_size * H + H + self.num_hidden_layers * per_layer

    def replace(self, **kw) -> Qwen3Config:
        return attrs.evolve(self, **kw)

    # ---- HF config.json ----------------------------------------------------------------------

    @classmethod
    def from_hf(cls, d: dict[str, Any], name: str = "checkpoint") -> Qwen3Config:
        """From a transformers ``config.json`` dict (4.x ``rope_theta`` or 5.x ``rope_parameters``)."""
        arch = d.get("architectures") or ["Qwen3ForCausalLM"]
        if d.get("model_type", "qwen3") != "qwen3" or "Qwen3ForCausalLM" not in arch:
            raise ConfigError(
                f"config.json: model_type {d.get('model_type')!r} / architectures {arch} "
                "is not a dense Qwen3ForCausalLM"
            )
        refuse = {
            "hidden_act": (d.get("hidden_act", "silu"), "silu"),
            "tie_word_embeddings": (bool(d.get("tie_word_embeddings", False)), False),
            "attention_bias": (bool(d.get("attention_bias", False)), False),
            "use_sliding_window": (bool(d.get("use_sliding_window", False)), False),
        }
        for key, (got, want) in refuse.items():
            if got != want:
                raise ConfigError(
                    f"config.json: {key}={got!r} is not supported (the dense Qwen3 chain has {key}={want!r})"
                )
        rope = d.get("rope_parameters") or {}
        scaling = d.get("rope_scaling")
        rope_type = rope.get("rope_type", (scaling or {}).get("rope_type", (scaling or {}).get("type", "default")))
        if rope_type not in (None, "default"):
            raise ConfigError(f"config.json: rope type {rope_type!r} is not supported (default RoPE only)")
        theta = rope.get("rope_theta", d.get("rope_theta", 1e6))
        missing = [
            k
            for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
            if k not in d
        ]
        if missing:
            raise ConfigError(f"config.json: missing {missing}")
        heads = d["num_attention_heads"]
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim", d["hidden_size"] // heads),
            max_position_embeddings=d.get("max_position_embeddings", 40960),
            rope_theta=float(theta),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            pad_token_id=d.get("pad_token_id"),
            name=name,
        )

    def to_hf(self) -> dict[str, Any]:
        """A transformers-readable ``config.json`` dict (both rope spellings, for 4.x and 5.x)."""
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "hidden_act": "silu",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_theta": self.rope_theta, "rope_type": "default"},
            "tie_word_embeddings": False,
            "attention_bias": False,
            "use_sliding_window": False,
            "sliding_window": None,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": "bfloat16",
        }


_8B = dict(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    rope_theta=1e6,
    rms_norm_eps=1e-6,
    pad_token_id=151643,
)

PRESETS: dict[str, Qwen3Config] = {
    # docs/design.md §4: the manifest's model
    "qwen3-8b": Qwen3Config(**_8B, name="qwen3-8b"),
    # the 8B shapes with 2 layers: every kernel at its real shape, on a CPU
    "qwen3-8b-L2": Qwen3Config(**{**_8B, "num_hidden_layers": 2}, name="qwen3-8b-L2"),
    # same architecture, small enough for CI; vocab >= 616 holds every fixture id, pad = vocab - 1
    "tiny": Qwen3Config(
        vocab_size=1024,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        pad_token_id=None,
        name="tiny",
    ),
}


def preset(name: str) -> Qwen3Config:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}") from None
