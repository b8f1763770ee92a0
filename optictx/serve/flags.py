"""`optictx serve`'s command line, made from ServeConfig's fields: each setting has one default
and one description, in config.py, and one flag here (`--max-body-bytes` for `max_body_bytes`).
The proxy key comes from the environment only (OPTICTX_PROXY_KEY), never from a flag that `ps`
would show."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from ..cost import COST_MODELS
from .config import ServeConfig

_SECRET = "proxy_key"


def _kind(annotation: Any) -> Any:
    if set(get_args(annotation)) == {float, type(None)}:
        return _float_or_none
    if set(get_args(annotation)) == {int, type(None)}:  # a number, or no flag: the default None
        return int
    return next((t for t in (bool, int, float) if annotation is t), str)


def _float_or_none(text: str) -> float | None:
    """A number, or `none` for a setting that takes None (`--risk none`: no bound)."""
    return None if text.strip().lower() == "none" else float(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name, field in ServeConfig.model_fields.items():
        if name == _SECRET:
            continue
        flag, kind, default = "--" + name.replace("_", "-"), _kind(field.annotation), field.default
        about = field.description or ""
        if kind is bool:  # a switch away from the default
            flag = flag if not default else "--no-" + flag[2:]
            parser.add_argument(flag, dest=name, action="store_false" if default else "store_true",
                                help=about if not default else f"do not {about}")
            continue
        shown = "" if default is None else f" (default {default})"
        extra = {"choices": ["auto", *COST_MODELS]} if name == "vision" else (
            {"choices": list(get_args(field.annotation))} if get_origin(field.annotation) is Literal else {})
        parser.add_argument(flag, type=kind, default=default, help=about + shown, **extra)


# With no upstream named, both APIs go to their providers' public endpoints.
PUBLIC = {"upstream": "https://api.openai.com/v1", "anthropic_upstream": "https://api.anthropic.com"}
IN_MEMORY = ":memory:"  # `--store :memory:`: nothing outlives the process


def default_store() -> Path:
    """Where `optictx serve` keeps its memories when no `--store` is given: the user's data
    directory (XDG_DATA_HOME, else ~/.local/share), so a restart keeps search, recall and the
    dashboard."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "optictx" / "serve"


def config_from(args: argparse.Namespace) -> ServeConfig:
    """The settings the flags and the environment give (ConfigError naming a bad one)."""
    fields = {name: getattr(args, name) for name in ServeConfig.model_fields if name != _SECRET}
    if not fields["upstream"] and not fields["anthropic_upstream"]:
        fields.update(PUBLIC)
    store = fields["store"]
    store = None if store == IN_MEMORY else (store or default_store())
    return ServeConfig.make(**{**fields, "store": store}, proxy_key=os.environ.get("OPTICTX_PROXY_KEY") or None)
