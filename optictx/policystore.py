"""A memory's `Policy` as its store keeps it, and back, every field by its declaration
(`policy._about`): a reopen plans as the memory was made to.

A `plain` field is kept as its JSON value; an `object` one (a ladder, a fitter, a factsheet,
limits, cache pricing, tool names) as its fields, where it is one of optictx's own kinds. One a
store cannot keep (a ladder class of the caller's, a factsheet with its own finder) is kept by
its type's name, and reopening it without giving that field again is an error naming it, never
a silent default.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, OptictxError, StoreError
from .facts import Factsheet
from .limits import Limits
from .policy import Policy, keyword
from .promptcache import CACHE_PRICING, CachePricing
from .schedule import AgeLadder, OldestFirst
from .tiers import Tier
from .turns import short

# optictx's own kinds a store keeps by their fields.
_KINDS: dict[str, type] = {"AgeLadder": AgeLadder, "OldestFirst": OldestFirst, "Factsheet": Factsheet,
                           "CachePricing": CachePricing}


class _Unkept(OptictxError):
    """A value a store cannot keep (caught here: it is kept by its type's name)."""


def to_meta(policy: Policy) -> dict[str, Any]:
    """Every policy field, by the keyword `Memory` takes it by, as plain JSON data."""
    out: dict[str, Any] = {}
    for f in fields(policy):
        value = getattr(policy, f.name)
        if f.metadata["stored"] == "plain":
            out[keyword(f)] = value
            continue
        try:
            out[keyword(f)] = _encoded(value)
        except _Unkept:
            out[keyword(f)] = {"unkept": type(value).__qualname__}
    return out


def from_meta(meta: dict[str, Any], path: str | Path, given: Collection[str]) -> dict[str, Any]:
    """`Memory` keywords for the policy fields `meta` keeps, but those `given` (the caller's
    own, which replace them); StoreError naming `path` and the field where one is damaged, and
    ConfigError where one could not be kept and is not given."""
    out: dict[str, Any] = {}
    for f in fields(Policy):
        name = keyword(f)
        if name not in meta or name in given or "policy" in given:
            continue
        value = meta[name]
        if isinstance(value, dict) and set(value) == {"unkept"}:
            raise ConfigError(f"{path} was made with a {f.name} of its own ({short(value['unkept'])}), which a store "
                              f"cannot keep: give {name}= to Memory.open")
        try:
            out[name] = value if f.metadata["stored"] == "plain" else (
                Limits.model_validate(value) if f.name == "limits" else _decoded(value, f.name))
            if not f.metadata["check"](out[name]):
                raise StoreError(f"{f.metadata['wants']} is expected")
        except (OptictxError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StoreError(f"{path}: damaged settings: {name} is {short(value)} ({str(exc)[:120]})") from None
    return out


def _encoded(value: Any) -> Any:
    if isinstance(value, Tier):  # a str too: before plain strings
        return {"tier": value.value}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": str(value)}  # JSON holds no infinity
    if isinstance(value, tuple):
        return [_encoded(v) for v in value]
    if isinstance(value, Limits):  # as stores from before this module keep it
        return value.model_dump(mode="json")
    if isinstance(value, CachePricing) and CACHE_PRICING.get(value.name) == value:
        return {"pricing": value.name}
    kind = type(value).__qualname__
    if is_dataclass(value) and _KINDS.get(kind) is type(value):
        return {kind: {f.name: _encoded(getattr(value, f.name)) for f in fields(value)
                       if f.default is MISSING or getattr(value, f.name) != f.default}}
    raise _Unkept(kind)


def _decoded(value: Any, name: str) -> Any:
    if isinstance(value, list):
        return tuple(_decoded(v, name) for v in value)
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise StoreError(f"{name}: one kind is expected")
    (kind, inner), = value.items()
    if kind == "tier":
        return Tier(inner)
    if kind == "float":
        return float(inner)
    if kind == "pricing":
        return CACHE_PRICING[inner]
    if kind not in _KINDS or not isinstance(inner, dict):
        raise StoreError(f"{name}: no kind {short(kind)}")
    defaults = {f.name: f.default for f in fields(_KINDS[kind])}
    given = {k: _decoded(v, name) for k, v in inner.items()}
    wrong = [k for k, v in given.items() if k not in defaults or not _fits(v, defaults[k])]
    if wrong:
        raise StoreError(f"{name}: {', '.join(map(short, wrong))} not of {kind}'s kinds")
    return _KINDS[kind](**given)


def _fits(value: Any, default: Any) -> bool:
    """Whether `value` is of the kind of a field whose default is `default` (None: any kind)."""
    if default is None or value is None or default is MISSING:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))
