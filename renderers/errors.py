"""The root of optictx's exceptions. It lives in the lowest room so every room raises its own
subclasses of it without importing upward; `optictx.errors` holds the rest of the hierarchy."""

from __future__ import annotations


class OptictxError(Exception):
    """Base class of every error optictx raises: catch it for anything the library refuses or
    cannot do. Subclasses also derive from the built-in they refine (ValueError, ...)."""


class ConfigError(OptictxError, ValueError, TypeError):
    """An argument or setting is out of range or of the wrong type; the message names it."""
