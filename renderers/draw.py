"""Lines -> one master page image (greyscale) plus the pixel box of every line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageDraw

from .atlas import GlyphInk
from .config import RenderConfig
from .errors import OptictxError
from .fonts import FontChain, is_rtl
from .layout import Layout, Line


class RenderError(OptictxError, ValueError):
    """The lines do not fit on one page."""


@dataclass(frozen=True, slots=True)
class LineBox:
    """Where a line was drawn: (x0, y0, x1, y1) in master pixels."""

    text: str
    style: str
    box: tuple[int, int, int, int]


def _draw_runs(img: Image.Image, draw: ImageDraw.ImageDraw, xy: tuple[int, int], text: str, chain: FontChain,
               stroke: int, ink: GlyphInk) -> None:
    faces = chain.faces
    if text.isascii():
        if stroke:
            draw.text(xy, text, font=faces[0].font, fill=0, stroke_width=stroke, stroke_fill=0)
        else:
            ink.draw(img, xy, text, faces[0].font)
        return
    runs = chain.runs(text)
    x, y = xy
    for i, run in runs:
        face = faces[i]
        font = face.bidi if is_rtl(run) else face.font
        draw.text((x, y), run, font=font, fill=0, stroke_width=stroke, stroke_fill=0)
        if len(runs) > 1:
            x += font.getlength(run)


class Columns:
    """Fills a page's columns top to bottom, left to right: where the next line goes, or that the
    page is full. The packer and the renderer share it, so they agree on every page break."""

    def __init__(self, config: RenderConfig) -> None:
        self.config = config
        self.column, self.y = 0, 0

    def copy(self) -> Columns:
        other = Columns(self.config)
        other.column, other.y = self.column, self.y
        return other

    def place(self, height: int, keep_with: int = 0) -> tuple[int, int] | None:
        """(column, y) for a line of `height` px, starting a new column when it, plus `keep_with`
        px that must follow it in the same column (a header's first body line), does not fit;
        None when the page is full. A full page is left as it was."""
        cap = self.config.text_height
        column, y = self.column, self.y
        if y and y + height + keep_with > cap:
            column, y = column + 1, 0
        if column >= self.config.columns or y + height > cap:
            return None
        self.column, self.y = column, y + height
        return column, y


_SIDE_INK = 2  # px a glyph may reach past its advance on either side (a 'j', an italic fallback)


def keep_with(lines: Sequence[Line], i: int, config: RenderConfig) -> int:
    """The room line `i` needs below it in its column (`Columns.place`): a header keeps the line
    after it with it."""
    return config.line_height if lines[i].style == "header" and i + 1 < len(lines) else 0


def _places(lines: Sequence[Line], config: RenderConfig) -> list[tuple[int, int]]:
    """(x, y) of the top left of every line's room; RenderError when they do not fit on a page."""
    cols, places = Columns(config), []
    for i, line in enumerate(lines):
        spot = cols.place(line.height, keep_with(lines, i, config))
        if spot is None:
            raise RenderError(f"{len(lines)} lines do not fit on a page of {config.columns} column(s) of "
                              f"{config.text_height} px; lay out fewer lines per page")
        places.append((config.column_x(spot[0]), config.margin + spot[1]))
    return places


def line_boxes(lines: Sequence[Line], layout: Layout) -> list[LineBox]:
    """Where `draw_page` puts each line, without drawing: the layout alone decides it. Each box
    holds everything drawn on its line, so it reaches a little into the next line's room (a blank
    line's box is its own room: nothing is drawn there, and the next line's text must not be read
    as its).
    Raises RenderError when the lines do not fit on one page."""
    cfg = layout.config
    side = _SIDE_INK + cfg.stroke

    def reach(line: Line) -> int:
        return max(line.height, layout.ink_bottom(line.style)) if line.text else line.height

    width, height = cfg.master
    return [LineBox(line.text, line.style, (max(0, x - side), y, min(width, x + cfg.text_width + side),
                                            min(height, y + reach(line))))
            for line, (x, y) in zip(lines, _places(lines, cfg))]


# Light enough that a reader's binarisation takes it for paper (Tesseract reads a page with these
# bars as it reads one without them; at 96 grey it lost 2.3 points), dark enough to see.
MARK_GREY = 190


def _hook(draw: ImageDraw.ImageDraw, x: int, y: int, line: Line, layout: Layout) -> None:
    """The mark of a continuation (`codewrap.py`): a bar in the gutter left of the column, from
    the line above down beside this one, so a reader sees where a wrapped line goes on. It lies
    outside every line's box, where readers look for text: a mark is not a character."""
    cfg = layout.config
    thick = max(2, cfg.font_size // 6)
    right = x - _SIDE_INK - cfg.stroke - 2
    draw.rectangle((right - thick + 1, y - cfg.line_height // 3, right, y + cfg.line_height * 3 // 4), fill=MARK_GREY)


def draw_page(lines: Sequence[Line], layout: Layout) -> tuple[Image.Image, list[LineBox]]:
    """Draw `lines` top to bottom on a white page; raises RenderError if they overflow."""
    cfg: RenderConfig = layout.config
    boxes = line_boxes(lines, layout)
    img = Image.new("L", cfg.master, 255)
    draw = ImageDraw.Draw(img)
    for line, (x, y) in zip(lines, _places(lines, cfg)):
        if line.style == "header":
            draw.rectangle((x - 6, y + 2, x + cfg.text_width + 6, y + line.height - 2), fill=cfg.header_fill)
        if line.style == "rule":  # a rule line's run of dashes, drawn as what it is
            mid = y + line.height // 2
            draw.rectangle((x, mid - 1, x + cfg.text_width, mid), fill=96)
            continue
        if line.style == "wrap":
            _hook(draw, x, y, line, layout)
        if line.text:
            _draw_runs(img, draw, (x, y + layout.text_top(line.style)), line.text, layout.chain(line.style),
                       cfg.stroke, layout.ink)
    return img, boxes
