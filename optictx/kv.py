"""KV-cache geometry: bytes per cached position for a decoder. Torch-free (configs are duck-typed)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import ConfigError

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "float8_e4m3fn": 1,
                "float8_e5m2": 1, "int8": 1}


class KVGeometry(BaseModel):
    """Layers x KV heads x head dim x dtype: what one position costs in the KV cache.

    >>> KVGeometry.preset("deepseek-ocr").bytes_per_position
    61440
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    layers: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    dtype_bytes: int = Field(2, ge=1, le=8)

    @property
    def bytes_per_position(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes  # K and V

    def decode_bytes(self, prefix: int, generated: int, window: int | None = None) -> int:
        """Bytes the cache holds after `generated` tokens behind a `prefix`: with R-SWA (`window`
        set) prefix + min(window, generated) positions, with full attention prefix + generated.

        >>> g = KVGeometry.preset("unlimited-ocr")
        >>> g.decode_bytes(10_000, 100_000, window=128) / g.decode_bytes(10_000, 100_000)
        0.0920...
        """
        held = generated if window is None else min(window, generated)
        return (prefix + held) * self.bytes_per_position

    def decode_report(self, prefix: int, generated: int, window: int = 128) -> dict[str, int | float]:
        """R-SWA vs full attention for one decode: bytes held by each, and their ratio."""
        rswa, full = self.decode_bytes(prefix, generated, window), self.decode_bytes(prefix, generated)
        return {"prefix": prefix, "generated": generated, "window": window, "rswa_bytes": rswa,
                "full_bytes": full, "rswa_over_full": rswa / full if full else 1.0}

    @classmethod
    def preset(cls, name: str) -> KVGeometry:
        try:
            return KV_PRESETS[name]
        except KeyError:
            raise ConfigError(f"unknown KV preset {name!r}; valid names: {', '.join(KV_PRESETS)}") from None

    @classmethod
    def from_config(cls, config: Any, *, dtype_bytes: int | None = None) -> KVGeometry:
        """From a transformers config (or any object/dict with the same attribute names).

        Multimodal configs are searched for their text decoder (text_config / language_config).
        """
        cfg = _decoder_config(config)
        get = (lambda k: cfg.get(k)) if isinstance(cfg, dict) else (lambda k: getattr(cfg, k, None))
        layers, heads, hidden = get("num_hidden_layers"), get("num_attention_heads"), get("hidden_size")
        if not layers or not heads:
            raise ConfigError("config has no num_hidden_layers / num_attention_heads; pass KVGeometry(...)")
        kv_heads = get("num_key_value_heads") or heads
        head_dim = get("head_dim") or (hidden // heads if hidden else None)
        if not head_dim:
            raise ConfigError("config has neither head_dim nor hidden_size; pass KVGeometry(...)")
        if dtype_bytes is None:
            dtype = get("dtype") or get("torch_dtype") or "bfloat16"
            dtype_bytes = _DTYPE_BYTES.get(str(dtype).removeprefix("torch."), 2)
        return cls(layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes)


def _decoder_config(config: Any) -> Any:
    for key in ("text_config", "language_config", "llm_config"):
        sub = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if sub is not None:
            return sub
    return config


KV_PRESETS: MappingProxyType[str, KVGeometry] = MappingProxyType({
    # DeepSeek-OCR / Unlimited-OCR decoder: 12 layers, MHA 10 heads x 128, bf16 (its config.json)
    "deepseek-ocr": KVGeometry(layers=12, kv_heads=10, head_dim=128, dtype_bytes=2),
    "unlimited-ocr": KVGeometry(layers=12, kv_heads=10, head_dim=128, dtype_bytes=2),
})
