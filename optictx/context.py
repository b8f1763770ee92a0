"""Context: the fitted prompt, as ordered segments with their token costs, plus exporters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from PIL import Image

from .budget import Budget
from .cost import CostModel
from .images import PageImages
from .kv import KV_PRESETS, KVGeometry
from .packer import Page
from .tiers import Tier
from .turns import Turn

CAPTION = (
    "Earlier conversation, rendered as page images, oldest first. Each page shows turns with a "
    "header '#<turn id> <ROLE>'; a line '#<turn id>: ...' after a page repeats exact strings of "
    "that turn verbatim; the messages after the pages continue from where they end."
)

SegmentKind = Literal["system", "pinned", "caption", "factsheet", "recent"]


@dataclass(frozen=True)
class TextSegment:
    """Text the consumer reads as text: a native turn, or the caption above the pages."""

    kind: SegmentKind
    text: str
    tokens: int
    turn: Turn | None = None
    _drawn: Callable[[], str] | None = field(default=None, repr=False, compare=False)

    @property
    def drawn(self) -> str | None:
        """A recent turn as a page draws it (its lines in `PageSegment.text` once it moves onto
        the open page), or None. A prompt that writes recent turns this way does not change when
        one moves onto the open page (`optictx.models.build_inputs`)."""
        return self._drawn() if self._drawn is not None else None

    @property
    def turn_ids(self) -> tuple[int, ...]:
        return (self.turn.id,) if self.turn is not None and self.turn.id is not None else ()


@dataclass(frozen=True, eq=False)
class PageSegment:
    """One page in the context: an image at `tier`, or its drawn text when `tier` is TEXT."""

    page: Page
    tier: Tier
    tokens: int
    paper_tokens: int
    _images: PageImages = field(repr=False)

    @property
    def text(self) -> str:
        """Exactly the text drawn on the page."""
        return self.page.text

    @property
    def turn_ids(self) -> tuple[int, ...]:
        return self.page.turn_ids

    @property
    def image(self) -> Image.Image | None:
        """The page image at its tier (None for a TEXT page, which is sent as text)."""
        return self._images.at(self.page, self.tier) if self.tier.is_image else None

    def image_at(self, tier: Tier) -> Image.Image:
        return self._images.at(self.page, tier)

    @property
    def boxes(self) -> list[tuple[int, int, int, int]]:
        """Every line's box on `image`, for readers: `reader.read(seg.image, seg.boxes)` reads the
        columns one after the other instead of across them."""
        return self._images.boxes(self.page, self.tier) if self.tier.is_image else []

    def png_base64(self) -> str:
        return self._images.png_base64(self.page, self.tier)


Segment = TextSegment | PageSegment


@dataclass(frozen=True, eq=False)
class Context:
    """What `Memory.context()` returns. `tokens` is the sum of the segments' costs under `vision`."""

    segments: tuple[Segment, ...]
    budget: Budget
    vision: CostModel
    gone: tuple[Page, ...] = ()

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

    @property
    def kv_bytes(self) -> int | None:
        """KV cache bytes while decoding this context (prefix + window or max_new_tokens), when the
        decoder's geometry is known (from the budget, or a preset named like the vision model)."""
        kv = self.budget.kv or KV_PRESETS.get(self.vision.name)
        if kv is None:
            return None
        return (self.tokens + self.budget.generation_reserve) * kv.bytes_per_position

    def decode_kv(self, generated: int, *, window: int | None = None, kv: KVGeometry | None = None) -> dict[str, Any]:
        """KV bytes this context holds after `generated` tokens, R-SWA vs full attention.

        `kv`: the decoder's geometry (`KVGeometry.from_config(model.config)`); by default the
        budget's, else the preset named like the vision model. `window`: the R-SWA window
        (default: the budget's `decode_window`, else 128).
        """
        kv = kv or self.budget.kv or KV_PRESETS.get(self.vision.name)
        if kv is None:
            raise ValueError(f"no KV geometry for {self.vision.name!r}: pass kv=KVGeometry.from_config(model.config)")
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
        from .export import to_openai

        return to_openai(self)

    def to_anthropic(self) -> tuple[str, list[dict[str, Any]]]:
        """(system, messages) for the Anthropic Messages API."""
        from .export import to_anthropic

        return to_anthropic(self)
