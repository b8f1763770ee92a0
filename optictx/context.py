"""Context: the fitted prompt, a plain value: its segments and pieces (`pieces.py`), the budget
and vision model it was fitted to, and how it relates to the last one (event, breakpoints)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from . import export
from .budget import Budget
from .cost import PROFILES, CostModel
from .errors import ConfigError
from .kv import KVGeometry
from .misread import Misread, check
from .packer import Page
from .pieces import PageSegment, Piece, Segment, TextSegment, pieces_of
from .tiers import Tier


@dataclass(frozen=True, eq=False)
class Context:
    """What `Memory.context()` returns. `tokens` is the sum of the segments' costs under `vision`.
    `verbatim`: the conversation as it came, every turn as itself in order (it fit the budget).
    `event`: how it relates to the last context of its memory for this budget and vision:
    "append" (that one with the new turns after it), "verbatim" (as it came, again), "first",
    "forced" or "paid" (a compaction: the budget forced it, or it pays under the consumer's cache
    prices); None when it was planned afresh (`Policy.cache` off)."""

    segments: tuple[Segment, ...]
    budget: Budget
    vision: CostModel
    gone: tuple[Page, ...] = ()
    verbatim: bool = False
    event: str | None = None
    breakpoints: tuple[int, ...] = ()

    def marked(self, event: str, breakpoints: tuple[int, ...]) -> Context:
        """This context with its event and `breakpoints`: prefix lengths, in pieces, that stay the
        same until the next compaction (the end of the system and pinned turns, of the frozen
        pages, of the whole prompt); the exporters mark them for a provider's prompt cache."""
        new = dataclasses.replace(self, event=event, breakpoints=breakpoints)
        if "pieces" in self.__dict__:  # derived from the segments alone: still true
            new.__dict__["pieces"] = self.pieces
        return new

    @cached_property
    def pieces(self) -> tuple[Piece, ...]:
        """The prompt in order as pieces, derived from the segments alone (every text they need is
        in them), on first use: a context that is never exported or prompted does not pay."""
        return pieces_of(self.segments)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.segments)

    @property
    def pages(self) -> list[PageSegment]:
        return [s for s in self.segments if isinstance(s, PageSegment)]

    @property
    def text_segments(self) -> list[TextSegment]:
        return [s for s in self.segments if isinstance(s, TextSegment)]

    @property
    def factsheet(self) -> str:
        """The verbatim exact strings kept beside the images, all placed parts joined ("" when
        none): dropped turns' before the first page, imaged turns' after the page showing them."""
        return "\n".join(s.text for s in self.text_segments if s.kind == "factsheet")

    def check(self, answer: str) -> list[Misread]:
        """The strings in `answer` (a model's reply to this context) that are probably misreadings
        of its page images: a character or two off one a page shows, and found nowhere in the
        context as they are (`misread.py`). Never changes the answer; a check, not a filter."""
        images = [(s.page, s.page.handle) for s in self.pages if s.tier.is_image]
        text = "\n".join([*(s.text for s in self.text_segments),
                          *(s.page.text for s in self.pages if s.tier is Tier.TEXT)])
        return check(answer, images, text)

    @property
    def kv_bytes(self) -> int | None:
        """KV cache bytes while decoding this context (prefix + window or max_new_tokens), when the
        decoder's geometry is known (from the budget, or a preset named like the vision model)."""
        kv = self.budget.kv or _kv_of(self.vision)
        if kv is None:
            return None
        return (self.tokens + self.budget.generation_reserve) * kv.bytes_per_position

    def decode_kv(self, generated: int, *, window: int | None = None, kv: KVGeometry | None = None) -> dict[str, Any]:
        """KV bytes this context holds after `generated` tokens, R-SWA vs full attention.

        `kv`: the decoder's geometry (`KVGeometry.from_config(model.config)`); by default the
        budget's, else the preset named like the vision model. `window`: the R-SWA window
        (default: the budget's `decode_window`, else 128).
        """
        kv = kv or self.budget.kv or _kv_of(self.vision)
        if kv is None:
            raise ConfigError(f"no KV geometry for {self.vision.name!r}: pass kv=KVGeometry.from_config(model.config)")
        return kv.decode_report(self.tokens, generated, window or self.budget.decode_window or 128)

    def report(self) -> dict[str, Any]:
        """Plain-data summary: tokens, budget, pages per tier, text vs page tokens."""
        tiers = Counter(s.tier.value for s in self.pages)
        if self.gone:
            tiers[Tier.GONE.value] = len(self.gone)
        page_tokens = sum(s.tokens for s in self.pages)
        factsheet = sum(s.tokens for s in self.text_segments if s.kind == "factsheet")
        return {
            "vision": self.vision.name,
            "tokens": self.tokens,
            "limit": self.budget.limit,
            "page_tokens": page_tokens,
            "text_tokens": self.tokens - page_tokens,
            "factsheet_tokens": factsheet,
            "pages": dict(sorted(tiers.items())),
            "turns_as_text": sum(1 for s in self.text_segments if s.turn is not None),
            "kv_bytes": self.kv_bytes,
        }

    def to_openai(self) -> list[dict[str, Any]]:
        """OpenAI chat messages: system, pinned, one user message with the pages, recent turns."""
        return export.to_openai(self)

    def to_responses(self) -> list[dict[str, Any]]:
        """Input items for OpenAI's Responses API: messages, function calls and their outputs, and
        one user message with the pages (input_image parts)."""
        return export.to_responses(self)

    def to_anthropic(self, *, cache: bool = False) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
        """(system, messages) for the Anthropic Messages API. `cache=True` marks `breakpoints` with
        `cache_control` (the system prompt then comes as a list of text blocks)."""
        return export.to_anthropic(self, cache=cache)


def _kv_of(vision: CostModel) -> KVGeometry | None:
    """The KV geometry of the vision model's decoder, where its profile knows it."""
    profile = PROFILES.get(vision.name)
    return profile.kv if profile is not None else None
