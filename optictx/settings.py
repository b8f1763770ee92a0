"""A memory's settings as its store keeps them, and back: `Memory.open` reopens with them
(`reopened`)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from . import policystore
from .budget import Budget
from .cost import PROFILES, CostModel
from .errors import ConfigError, StoreError
from .handles import new_key
from .renderers import RenderConfig
from .store import open_store
from .turns import short

# The memory's own settings; its policy's are `policystore.py`'s. A store from before a setting
# has none of it and reopens at the default.
_PLAIN = {"vision": str, "keep_recent": int, "tokens_per_page": int}
_MODELS = {"budget": Budget, "render": RenderConfig}
T = TypeVar("T")  # the memory class `reopened` builds


def stored_key(meta: Any, path: Any, given: str | None = None) -> str:
    """The memory key its store keeps (`handles.py`), else `given`, else a new one; a stored key
    that is not one is damaged settings, and a key given that is not the stored one is refused
    (either would change its pages' handles)."""
    key = meta.get("key") if isinstance(meta, dict) else None
    checked_key(given)
    if key is None:
        return given or new_key()
    if not _is_key(key):
        raise StoreError(f"{path}: damaged settings: key is {short(key)}, not 32 hex digits")
    if given is not None and given != key:
        raise ConfigError(f"key=...: {path} keeps another key, and its pages keep their handles; give none")
    return key


def checked_key(given: Any) -> str | None:
    """`given`, a memory key or None; ConfigError naming `key` when it is not one."""
    if given is not None and not _is_key(given):
        raise ConfigError(f"key={short(given)}: 32 hex digits (handles.new_key() makes one)")
    return given


def _is_key(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def to_meta(mem: Any) -> dict[str, Any]:
    """What `from_meta` needs to rebuild `mem`'s settings (plain JSON data), and its key."""
    meta = {key: kind(getattr(mem, key)) for key, kind in _PLAIN.items() if key != "vision"}
    meta["key"] = mem.key
    meta["vision"] = mem.vision.name
    meta.update({key: getattr(mem, key).model_dump(mode="json") for key in _MODELS})
    meta.update(policystore.to_meta(mem.policy))
    return meta


def reopened(cls: Callable[..., T], path: str | Path, overrides: dict[str, Any]) -> T:
    """`Memory.open`: the memory at `path` with its stored settings, `overrides` on top. The store
    is opened once and handed to the memory (a reopen is one open, not two), closed on failure."""
    store = open_store(path, create=False)
    try:
        meta = store.get_meta()
        return cls(store=store, **{**(from_meta(meta, path, set(overrides)) if meta is not None else {}), **overrides})
    except BaseException:
        store.close()
        raise


def from_meta(meta: Any, path: str | Path, given: Collection[str] = ()) -> dict[str, Any]:
    """Memory keyword arguments from stored settings, but those `given` (the caller's own);
    StoreError naming `path` if they are damaged."""
    if not isinstance(meta, dict):
        raise StoreError(f"{path}: damaged settings (a {type(meta).__name__}, not an object)")
    out: dict[str, Any] = policystore.from_meta(meta, path, given)
    for key, kind in _PLAIN.items():
        if key in meta:
            value = meta[key]
            if type(value) is not kind:  # bool is an int: exact types only
                raise StoreError(f"{path}: damaged settings: {key} is {short(value)}, not a {kind.__name__}")
            out[key] = value
    for key, model in _MODELS.items():
        if key in meta:
            try:
                out[key] = model.model_validate(meta[key])
            except (ValidationError, ValueError, TypeError) as exc:
                raise StoreError(f"{path}: damaged settings: {key}: {_first_error(exc)}") from exc
    # A memory file is data, not a config: it must not make optictx read whatever file it names.
    fonts = out["render"].fallback_fonts if "render" in out else ()
    bad = [f for f in fonts if Path(f).suffix.lower() not in _FONT_SUFFIXES]
    if bad:
        raise StoreError(f"{path}: damaged settings: render.fallback_fonts names files that are not fonts "
                         f"({', '.join(map(repr, bad))[:200]}); pass render= to Memory.open to override")
    return out


_FONT_SUFFIXES = (".ttf", ".otf", ".ttc", ".otc")


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(map(str, err['loc'])) or 'value'}: {err['msg']}"
    return str(exc)


def as_budget(value: Any, field: str = "budget") -> Budget:
    """A Budget, or an int taken as a token budget (`Memory(budget=8192)`); ConfigError otherwise."""
    if isinstance(value, Budget):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return Budget(tokens=value)
        except ValidationError as exc:
            raise ConfigError(f"{field}={value}: {_first_error(exc)}") from None
    raise ConfigError(f"{field} must be a Budget or a token count (int), got {type(value).__name__}")


def check_int(value: Any, field: str, lo: int, hi: int | None = None) -> int:
    """`value` as an int in [lo, hi]; ConfigError naming `field` otherwise (bools are not ints here)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{field} must be an int, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        raise ConfigError(f"{field}={value} is out of range [{lo}, {hi if hi is not None else 'inf'}]")
    return value


def as_render(value: Any, vision: CostModel | None = None, budget: Budget | None = None) -> RenderConfig:
    """The render config given, or (None) the one the vision model's profile draws its pages at
    (`VisionProfile.render`: a consumer that prices pixels takes larger pages) where the budget
    holds a few dozen of them, else the default."""
    if value is None:
        profile = PROFILES.get(vision.name) if vision is not None else None
        if profile is None or profile.render is None or (budget is not None and budget.limit < profile.render_budget):
            return RenderConfig()
        return profile.render
    if isinstance(value, RenderConfig):
        return value
    if isinstance(value, (str, Path)):
        return RenderConfig.load(value)
    raise ConfigError(f"render must be a RenderConfig or the path of its JSON file, got {type(value).__name__}")
