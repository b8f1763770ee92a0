"""The optictx exception hierarchy: catch OptictxError for anything the library raises on purpose."""

from __future__ import annotations

import importlib
from types import ModuleType

from .renderers.errors import ConfigError, OptictxError

__all__ = ["BudgetError", "CheckpointError", "ConfigError", "ConversationFileError", "MissingExtraError", "ModelError",
           "OptictxError", "StoreError", "TurnError", "TurnTooLargeError", "need"]


class BudgetError(OptictxError, ValueError):
    """The context cannot fit the budget; `shortfall` says by how many tokens."""

    def __init__(self, message: str, *, shortfall: int = 0) -> None:
        super().__init__(message)
        self.shortfall = shortfall


class StoreError(OptictxError):
    """A memory file is missing, corrupt, or not an optictx memory."""


class TurnTooLargeError(OptictxError, ValueError):
    """A turn is over `Limits.max_turn_chars`; nothing was stored."""


class ConversationFileError(OptictxError, ValueError):
    """A conversation file (JSONL) is missing or malformed; the message names the line."""


class CheckpointError(OptictxError, FileNotFoundError):
    """A local model folder is missing or incomplete (optictx downloads no weights)."""


class ModelError(OptictxError, RuntimeError):
    """A local model and the context disagree (a bug to report, not bad input)."""


class MissingExtraError(OptictxError, ImportError):
    """An optional dependency is not installed; the message says which extra brings it."""


def need(module: str, extra: str) -> ModuleType:
    """Import `module` (an optional dependency), or say which optictx extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(f"{module} is not installed ({exc}): pip install 'optictx[{extra}]'") from exc


class TurnError(ConfigError):
    """A turn is malformed (role, content, tool fields, metadata); the message names the field."""
