"""A client's instructions drawn on pages (opt-in: `optictx serve --image-instructions`): its
system prompt's prose and its tools' descriptions, read on every call, drawn sharper than
history, so that what a reader must not misread stays easy to read.

The pages are sent at the size the consumer is sent history's TINY pages at (Claude: 1092 px
square, where a 2730-px page of history is seen; OpenAI's tile-priced models: 512 x 1024), but
drawn on a master only 2.25 times that size (history's is 2.5 times), so their glyphs are 1.11x
history's, and derived from it by bicubic (BENCHMARKS.md, "Instructions on pages").
Nothing on them refers to other lines: every line is drawn (references to lines already drawn
are history's, `repeats.py`).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from .cost import PROFILES
from .errors import ConfigError
from .images import encoded
from .renderers import Block, Columns, Layout, Line, RenderConfig, draw_page, keep_with, line_boxes
from .tiers import Tier, greys

__all__ = ["Drawn", "draw", "geometry"]

SHARPER = 2.25  # the master's side over the image's: history's TINY pages are drawn at 2.5x (1280 -> 512)
WHOLE = 9  # a master side that is a multiple of this shrinks by SHARPER (9 / 4) to whole pixels, and back


@dataclass(frozen=True)
class Drawn:
    """Instructions on pages for one consumer (`vision`): each page's image (`images.MEDIA_TYPE`, base64),
    the size it is sent at, and its lines as laid out (`Line.text`: what a reader should read)."""

    vision: str
    images: tuple[str, ...]
    sizes: tuple[tuple[int, int], ...]
    lines: tuple[tuple[Line, ...], ...]

    def boxes(self) -> list[list[tuple[int, int, int, int]]]:
        """Every line's box on each page's image, in its pixels (a reader reads line by line)."""
        config = geometry(self.vision)
        layouts = [Layout(_tall(config, round(size[1] * SHARPER))) for size in self.sizes]
        return [[tuple(int(v / SHARPER) for v in b.box) for b in line_boxes(page, layout)]  # type: ignore[misc]
                for page, layout in zip(self.lines, layouts)]

    def read(self, reader: Any) -> list[tuple[str, str]]:
        """Each page's text as drawn, and as `reader` (a `readers.Reader`) reads it, line by line."""
        images = [Image.open(io.BytesIO(base64.b64decode(data))) for data in self.images]
        return [("\n".join(line.text for line in lines), reader.read(image, boxes))
                for lines, image, boxes in zip(self.lines, images, self.boxes())]


def geometry(vision: str) -> RenderConfig:
    """The page a consumer's instructions are drawn on: SHARPER times the size its history's
    TINY images are sent at (columns as wide as history's, as near as whole columns go)."""
    profile = PROFILES.get(vision)
    if profile is None:
        raise ConfigError(f"vision {vision!r} is unknown; use one of {', '.join(PROFILES)}")
    history = profile.render or RenderConfig()
    sent = Tier.TINY.size_at(history.master)
    assert sent is not None  # TINY is an image tier
    width = round(sent[0] * SHARPER)
    columns = max(1, round(history.columns * width / history.master[0]))
    return _tall(history.model_copy(update={"size": width, "columns": columns, "repeats": False}),
                 round(sent[1] * SHARPER))


def draw(sections: Sequence[tuple[str, str]], vision: str) -> Drawn:
    """`sections` (a title, its text), in order, on pages for `vision`: each title a header, its
    text as prose; the last page no taller than its lines need (a consumer that prices pixels
    pays for no blank). The same sections give the same bytes (the proxy keeps them:
    `serve.instructions`, a client sends them on every call)."""
    config = geometry(vision)
    layout = Layout(config)  # a layout is a fraction of a millisecond: one per drawing, none shared
    pages = _paged([line for title, text in sections
                    for line in (*layout.lines(Block(title, "header")), *layout.lines(Block(text, "text")))], config)
    images, sizes = [], []
    for i, lines in enumerate(pages):
        cfg = config if i + 1 < len(pages) else _shortest(lines, config)
        master, _ = draw_page(lines, layout if cfg is config else Layout(cfg))
        image = greys(_shrunk(master), cfg.greys)
        images.append(encoded(image))
        sizes.append(image.size)
    return Drawn(vision, tuple(images), tuple(sizes), tuple(map(tuple, pages)))


def _shrunk(master: Image.Image) -> Image.Image:
    """The master at the size it is sent."""
    return master.resize((round(master.width / SHARPER), round(master.height / SHARPER)), Image.Resampling.BICUBIC)


def _tall(config: RenderConfig, height: int) -> RenderConfig:
    return config.model_copy(update={"height": None if height == config.size else height})


def _shortest(lines: Sequence[Line], config: RenderConfig) -> RenderConfig:
    """`config` at the least height that holds `lines` on one page."""
    full = config.master[1]
    height = max(256, 2 * config.margin + sum(line.height for line in lines) // config.columns)
    while height < full:
        height += -height % WHOLE
        shorter = _tall(config, height)
        if len(_paged(lines, shorter)) == 1:
            return shorter
        height += config.line_height
    return config


def _paged(lines: Sequence[Line], config: RenderConfig) -> list[list[Line]]:
    """`lines` in pages, as the renderer places them (`Columns`): a header never ends a column."""
    pages: list[list[Line]] = []
    page: list[Line] = []
    cols = Columns(config)
    for i, line in enumerate(lines):
        keep = keep_with(lines, i, config)
        if cols.place(line.height, keep) is None:
            pages.append(page)
            page, cols = [], Columns(config)
            cols.place(line.height, keep)
        page.append(line)
    if page:
        pages.append(page)
    return pages
