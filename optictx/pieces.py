"""The parts of a fitted prompt: segments (what it holds: turns, the caption, pages, factsheet
parts, with their token costs) and pieces (the same prompt in the order the exporters and local
models write it, each with a stable key: the unit of prefix reuse). Plain values, shared by the
context, the planner and the exporters."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from PIL import Image

from .images import PageImages
from .packer import Page
from .tiers import Tier
from .turns import Role, Turn

CAPTION = (
    "Earlier conversation, rendered as page images, oldest first, each after a label '[page <handle>: "
    "turns #<first>-#<last>]'. A page shows turns with a header '#<turn id> <ROLE>'; a line '= <n> lines, "
    "#<turn id>: ...' stands for lines that page already shows above it; a line '#<turn id>: ...' after a page "
    "repeats exact strings of that turn verbatim; the messages after the pages continue from where they end."
)
# Where a page may refer to lines of another (`packer.names_pages`).
_ON_PAGES = ("that page already shows above it;", "shown above it, on that page or on page <handle> "
             "('= <n> lines, <handle> #<turn id>: ...');")


def caption(tools: Sequence[str] = (), names_pages: bool = False) -> str:
    """The caption before the pages; with the tools the model has for them (`Policy.tools`: the
    names of `search` and `recall`, as the model's tool list spells them), how to get exact words;
    `names_pages`: whether a page may refer to another's lines."""
    text = CAPTION.replace(*_ON_PAGES) if names_pages else CAPTION
    if not tools:
        return text
    search = next((t for t in tools if t.endswith("search")), None)
    recall = next((t for t in tools if t.endswith("recall")), None)
    how = [f"for an exact string call {search} first (it gives the lines that hold it)" if search else "",
           f"{recall} a page's handle for more" if recall else ""]
    return text + " Pages may be misread: " + "; ".join(h for h in how if h) + "."


def left_out(turn_ids: Sequence[int]) -> str:
    """What the caption adds when a hard budget cannot hold every message of the person's that
    stays text in place (`turnindex.WORDS`): how many of the oldest were left out, and where
    (one size whatever the count: it is planned before the count is known)."""
    n = len(turn_ids)
    return (f" The person's {n} earliest message{'s' if n > 1 else ''} (turns #{turn_ids[0]} to #{turn_ids[-1]}) "
            "are left out for the budget; the pages around them hold their turn headers.")


SegmentKind = Literal["system", "pinned", "caption", "factsheet", "label", "copies", "inline", "recent"]


@dataclass(frozen=True)
class TextSegment:
    """Text the consumer reads as text: a native turn (`inline`: one that stays text in place,
    between the pages), the caption above the pages, a page's label beside its image
    (`handles.label`), a part of the factsheet, or the lines a page's references stand for on a
    page not sent (`copies`, `Plan.again`). `drawn`: a
    recent turn as a page draws it (its lines in `PageSegment.text` once it moves onto the open
    page), else None."""

    kind: SegmentKind
    text: str
    tokens: int
    turn: Turn | None = None
    drawn: str | None = field(default=None, repr=False)

    @property
    def turn_ids(self) -> tuple[int, ...]:
        return (self.turn.id,) if self.turn is not None and self.turn.id is not None else ()


@dataclass(frozen=True, eq=False)
class PageSegment:
    """One page in the context: an image at `tier`, or its drawn text when `tier` is TEXT.

    The page holds its own lines; `images` only draws and caches pixels from them (shared with the
    memory, thread-safe), so a context stays valid whatever the memory does next."""

    page: Page
    tier: Tier
    tokens: int
    paper_tokens: int
    images: PageImages = field(repr=False)

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
        return self.images.at(self.page, self.tier) if self.tier.is_image else None

    def image_at(self, tier: Tier) -> Image.Image:
        return self.images.at(self.page, tier)

    @property
    def boxes(self) -> list[tuple[int, int, int, int]]:
        """Every line's box on `image`, for readers: `reader.read(seg.image, seg.boxes)` reads the
        columns one after the other instead of across them."""
        return self.images.boxes(self.page, self.tier) if self.tier.is_image else []

    def image_base64(self) -> str:
        """The image as sent (`images.MEDIA_TYPE`), base64 text."""
        return self.images.image_base64(self.page, self.tier)


Segment = TextSegment | PageSegment

PieceKind = Literal["system", "pinned", "caption", "factsheet", "label", "copies", "page", "open", "inline",
                    "recent"]


@dataclass(frozen=True, eq=False)
class Piece:
    """One piece of the prompt: a turn, the caption, a factsheet line, a page, or one turn's lines
    on the open page. The prompt only grows at its end while pieces keep their keys.

    `text` is the piece's own text ("" for an image page); `prompt` is how a flat text prompt
    writes it (after the placeholders of an image page); text pieces of one `segment` (an index
    into `Context.segments`) joined by newlines give that segment's text."""

    kind: PieceKind
    role: Role  # who said it: the turn's role; "system" for the caption, factsheet and pages
    text: str
    prompt: str
    segment: int
    turn: Turn | None = None  # system, pinned, inline and recent pieces
    page: PageSegment | None = None  # page pieces

    @property
    def image(self) -> PageSegment | None:
        """The page, when this piece is sent as an image."""
        return self.page if self.page is not None and self.page.tier.is_image else None

    @cached_property
    def key(self) -> str:
        """Equal keys, equal tokens: an image page by its pixels and tier, text by its prompt."""
        if self.image is not None:
            return f"p:{self.image.page.digest}:{self.image.tier.value}"
        return "t:" + hashlib.sha256(self.prompt.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def common_run(a: Sequence[str], b: Sequence[str]) -> int:
    """How many keys at the start of `a` and `b` are equal: the unit of prefix reuse."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def common_prefix(a: Sequence[Piece], b: Sequence[Piece]) -> int:
    """How many pieces at the start of `a` and `b` have equal keys (their KV is the same)."""
    return common_run([p.key for p in a], [p.key for p in b])


def pieces_of(segments: Sequence[Segment]) -> tuple[Piece, ...]:
    out: list[Piece] = []
    for i, seg in enumerate(segments):
        if isinstance(seg, PageSegment):
            if seg.tier.is_image:
                out.append(Piece("page", "system", "", "\n", i, page=seg))
            elif seg.page.sealed:
                out.append(Piece("page", "system", seg.text, f"PAGE: {seg.text}\n", i, page=seg))
            else:  # the open page grows turn by turn: one piece per turn keeps the old pieces' keys
                for _, entries in itertools.groupby(seg.page.entries, key=lambda e: e.turn_id):
                    text = "\n".join(e.line.text for e in entries)
                    out.append(Piece("open", "system", text, text + "\n", i, page=seg))
        elif seg.kind == "recent" and seg.drawn is not None:  # as the open page will show it
            role = seg.turn.role if seg.turn is not None else "user"
            out.append(Piece("recent", role, seg.text, seg.drawn + "\n", i, turn=seg.turn))
        elif seg.kind == "factsheet":  # a line per piece: a new line joins at the end
            out.extend(Piece("factsheet", "system", line, line + "\n", i) for line in seg.text.split("\n"))
        else:
            role = seg.turn.role if seg.turn is not None else "system"
            out.append(Piece(seg.kind, role, seg.text, f"{role.upper()}: {seg.text}\n", i, turn=seg.turn))
    return tuple(out)
