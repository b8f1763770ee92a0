"""Budget: how many positions the context may use, from a token count or a KV-cache size."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import ConfigError
from .kv import KVGeometry


class Budget(BaseModel):
    """`Budget(tokens=N)`, or `Budget(kv_bytes=B, kv=KVGeometry(...), decode_window=128)`.

    With an R-SWA decoder (`decode_window` set) the cache holds prefix + window positions, so the
    prefix may use B / bytes_per_position - window. With full attention it must leave room for
    `max_new_tokens` generated positions.

    >>> Budget(kv_bytes=61440 * 1128, kv=KVGeometry.preset("deepseek-ocr"), decode_window=128).limit
    1000
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: int | None = Field(None, ge=1)
    kv_bytes: int | None = Field(None, ge=1)
    kv: KVGeometry | None = None
    decode_window: int | None = Field(None, ge=1, description="R-SWA window n; None = full attention")
    max_new_tokens: int = Field(0, ge=0, description="room kept for generation under full attention")

    @model_validator(mode="after")
    def _check(self) -> Budget:
        if (self.tokens is None) == (self.kv_bytes is None):
            raise ConfigError("give exactly one of Budget(tokens=N) or Budget(kv_bytes=B, kv=KVGeometry(...))")
        if self.kv_bytes is not None and self.kv is None:
            raise ConfigError("Budget(kv_bytes=...) needs kv=KVGeometry(...), e.g. KVGeometry.preset('deepseek-ocr')")
        if self.limit < 1:
            raise ConfigError(f"this budget leaves {self.limit} positions for the context; raise it")
        return self

    @property
    def generation_reserve(self) -> int:
        """Positions kept free for decoding: the R-SWA window, else max_new_tokens."""
        return self.decode_window if self.decode_window is not None else self.max_new_tokens

    @property
    def limit(self) -> int:
        """The most context tokens (decoder positions) this budget allows."""
        if self.tokens is not None:
            return self.tokens - self.max_new_tokens
        kv, kv_bytes = self.kv, self.kv_bytes or 0  # _check: both set when tokens is not
        return kv_bytes // kv.bytes_per_position - self.generation_reserve  # type: ignore[union-attr]
