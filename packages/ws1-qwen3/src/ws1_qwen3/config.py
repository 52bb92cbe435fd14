"""Qwen3 dense configuration: an attrs class with presets and HF ``config.json`` conversion.

Only the dense Qwen3 architecture of docs/design.md §4 is accepted (SiLU MLP, QK-norm, no attention bias, no
sliding window, default RoPE), with untied embeddings (8B, 14B, 32B) or tied ones (0.6B, 1.7B, 4B:
``lm_head.weight`` is ``model.embed_tokens.weight``, docs/model.md "Tied embeddings"); anything else is refused
with the field named, rather than silently computed as something it is not.
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
    """Shapes of one Qwen3 dense model. ``pad_token_id`` pads batches (the fixtures' pad id);
    ``tie_word_embeddings``: the head reads the embedding table (one parameter [vocab, hidden], no ``lm_head.weight``
    of its own)."""

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
    tie_word_embeddings: bool = False

    def __attrs_post_init__(self):
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError(f"config.tie_word_embeddings must be a bool, got {self.tie_word_embeddings!r}")
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
        """embed_tokens, norm, lm_head (not when tied: it is embed_tokens) and 11 per layer."""
        return (2 if self.tie_word_embeddings else 3) + 11 * self.num_hidden_layers

    def n_parameters(self) -> int:
        H, F, D = self.hidden_size, self.intermediate_size, self.head_dim
        per_layer = H * D * (2 * self.num_attention_heads + 2 * self.num_key_value_heads) + 3 * H * F + 2 * H + 2 * D
        tables = 1 if self.tie_word_embeddings else 2  # the embedding table, and lm_head's unless tied
        return tables * self.vocab_size * H + H + self.num_hidden_layers * per_layer

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
        tied = d.get("tie_word_embeddings", False)  # transformers' Qwen3Config default: untied
        if not isinstance(tied, bool):
            raise ConfigError(f"config.json: tie_word_embeddings={tied!r} is not a bool")
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
            tie_word_embeddings=tied,
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
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": False,
            "use_sliding_window": False,
            "sliding_window": None,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": "bfloat16",
        }


def _dense(hidden: int, intermediate: int, layers: int, heads: int, tied: bool) -> dict[str, Any]:
    """One Qwen3 dense size as its Hugging Face ``config.json`` gives it (Qwen/Qwen3-<size>): vocab 151936,
    8 KV heads of dim 128, 40960 positions, RoPE θ 1e6, RMSNorm eps 1e-6 for every size; the pad id is the
    fixtures' (151643, ``<|endoftext|>``)."""
    return dict(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        pad_token_id=151643,
        tie_word_embeddings=tied,
    )


# the dense Qwen3 family: (hidden, intermediate, layers, query heads, tied); the small three tie their embeddings
_FAMILY = {
    "qwen3-0.6b": _dense(1024, 3072, 28, 16, tied=True),
    "qwen3-1.7b": _dense(2048, 6144, 28, 16, tied=True),
    "qwen3-4b": _dense(2560, 9728, 36, 32, tied=True),
    "qwen3-8b": _dense(4096, 12288, 36, 32, tied=False),  # docs/design.md §4: the manifest's model
    "qwen3-14b": _dense(5120, 17408, 40, 40, tied=False),
    "qwen3-32b": _dense(5120, 25600, 64, 64, tied=False),
}
_8B = _FAMILY["qwen3-8b"]
_TINY = dict(
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
)

PRESETS: dict[str, Qwen3Config] = {
    **{name: Qwen3Config(**shape, name=name) for name, shape in _FAMILY.items()},
    # the 8B shapes with 2 layers: every kernel at its real shape, on a CPU
    "qwen3-8b-L2": Qwen3Config(**{**_8B, "num_hidden_layers": 2}, name="qwen3-8b-L2"),
    # same architecture, small enough for CI; vocab >= 616 holds every fixture id, pad = vocab - 1
    "tiny": Qwen3Config(**_TINY, name="tiny"),
    # tiny with tied embeddings (the 0.6B / 1.7B / 4B head), for CI
    "tiny-tied": Qwen3Config(**_TINY, tie_word_embeddings=True, name="tiny-tied"),
}


def preset(name: str) -> Qwen3Config:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}") from None
