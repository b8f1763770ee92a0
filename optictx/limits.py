"""Limits: the hard caps that keep hostile or runaway input from exhausting a memory's host."""

from __future__ import annotations

import json

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from .errors import TurnTooLargeError
from .turns import Turn


class Limits(BaseModel):
    """`Memory(limits=Limits(...))`. The defaults admit any realistic agent traffic.

    A 10 MB tool output is within them: it is stored verbatim and drawn onto ~4,000 pages, of
    which the budget shows the newest (about 4 s to add on one core).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turn_chars: int = Field(
        16_000_000, ge=1,
        description="characters of one turn (text, tool-call arguments, other content parts as JSON); "
                    "a longer turn is refused with TurnTooLargeError before anything is stored")
    # It was `max_pages`, but it counts the client's own images too; the old name still loads
    # (settings stored by earlier versions, callers not yet moved).
    max_images: int | None = Field(
        None, ge=0, validation_alias=AliasChoices("max_images", "max_pages"),
        description="images in one context, pages and the client's own; pages give way, oldest first. "
                    "None: the vision model's documented images-per-request cap (Anthropic: 100), "
                    "else only the budget")

    def check(self, turn: Turn) -> None:
        size = turn_chars(turn)
        if size > self.max_turn_chars:
            raise TurnTooLargeError(
                f"a {turn.role} turn of {size:,} characters is over Limits.max_turn_chars={self.max_turn_chars:,}; "
                "nothing was stored. Store a summary or a file reference, or raise the limit.")

    def image_cap(self, model_max: int | None) -> int | None:
        """The most images in one context: `max_images` or the vision model's cap, whichever is lower."""
        caps = [c for c in (self.max_images, model_max) if c is not None]
        return min(caps) if caps else None


def turn_chars(turn: Turn) -> int:
    """Characters of every field a turn stores: content, name, tool ids and calls, metadata (with
    the unknown keys kept there), as JSON where they are not text."""
    n = sum(map(len, turn.texts[1:])) + sum(len(c.id) for c in turn.tool_calls)  # the tool calls
    n += len(turn.name or "") + len(turn.tool_call_id or "")
    if turn.metadata:
        n += len(json.dumps(turn.metadata, ensure_ascii=False))
    if isinstance(turn.content, str):
        return n + len(turn.content)
    for part in turn.content:
        is_text = part.get("type") == "text"
        n += len(part["text"]) if is_text else len(json.dumps(part, ensure_ascii=False))
    return n
