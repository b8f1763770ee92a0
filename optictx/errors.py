"""The optictx exception hierarchy: catch OptictxError for anything the library raises on purpose."""

from __future__ import annotations


class OptictxError(Exception):
    """Base class of optictx's own errors."""


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
