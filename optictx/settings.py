"""A memory's settings as its store keeps them, and back: `Memory.open` reopens with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .budget import Budget
from .errors import StoreError
from .limits import Limits
from .renderers import RenderConfig

_PLAIN = {"vision": str, "keep_recent": int, "tokens_per_page": int, "sticky_tiers": bool}
_MODELS = {"budget": Budget, "render": RenderConfig, "limits": Limits}


def to_meta(mem: Any) -> dict[str, Any]:
    """What `from_meta` needs to rebuild `mem`'s settings (plain JSON data)."""
    meta = {key: getattr(mem, key) for key in _PLAIN}
    meta["vision"] = mem.vision.name
    meta.update({key: getattr(mem, key).model_dump(mode="json") for key in _MODELS})
    return meta


def from_meta(meta: Any, path: str | Path) -> dict[str, Any]:
    """Memory keyword arguments from stored settings; StoreError naming `path` if they are damaged."""
    if not isinstance(meta, dict):
        raise StoreError(f"{path}: damaged settings (a {type(meta).__name__}, not an object)")
    out: dict[str, Any] = {}
    for key, kind in _PLAIN.items():
        if key in meta:
            value = meta[key]
            if type(value) is not kind:  # bool is an int: exact types only
                raise StoreError(f"{path}: damaged settings: {key} is {value!r:.60}, not a {kind.__name__}")
            out[key] = value
    for key, model in _MODELS.items():
        if key in meta:
            try:
                out[key] = model.model_validate(meta[key])
            except (ValidationError, ValueError, TypeError) as exc:
                raise StoreError(f"{path}: damaged settings: {key}: {_first_error(exc)}") from exc
    return out


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(map(str, err['loc'])) or 'value'}: {err['msg']}"
    return str(exc)
