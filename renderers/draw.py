"""Lines -> one master page image (greyscale) plus the pixel box of every line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageDraw

from .config import RenderConfig
from .fonts import FontChain, is_rtl
from .layout import Layout, Line


class RenderError(ValueError):
    """The lines do not fit on one page."""


@dataclass(frozen=True, slots=True)
class LineBox:
    """Where a line was drawn: (x0, y0, x1, y1) in master pixels."""

    text: str
    style: str
    box: tuple[int, int, int, int]


def lines_height(lines: Sequence[Line]) -> int:
    return sum(line.height for line in lines)


def _draw_runs(draw: ImageDraw.ImageDraw, xy: tuple[float, float], text: str, chain: FontChain,
               stroke: int) -> None:
    faces = chain.faces
    if text.isascii():
        draw.text(xy, text, font=faces[0].font, fill=0, stroke_width=stroke, stroke_fill=0)
        return
    runs = chain.runs(text)
    x, y = xy
    for i, run in runs:
        face = faces[i]
        font = face.bidi if is_rtl(run) else face.font
        draw.text((x, y), run, font=font, fill=0, stroke_width=stroke, stroke_fill=0)
        if len(runs) > 1:
            x += font.getlength(run)


def line_boxes(lines: Sequence[Line], config: RenderConfig) -> list[LineBox]:
    """Where `draw_page` puts each line, without drawing: the layout alone decides it."""
    x0, x1, y = config.margin, config.size - config.margin, config.margin
    boxes = []
    for line in lines:
        boxes.append(LineBox(line.text, line.style, (x0, y, x1, y + line.height)))
        y += line.height
    return boxes


def draw_page(lines: Sequence[Line], layout: Layout) -> tuple[Image.Image, list[LineBox]]:
    """Draw `lines` top to bottom on a white square page; raises RenderError if they overflow."""
    cfg: RenderConfig = layout.config
    if lines_height(lines) > cfg.text_height:
        raise RenderError(
            f"{len(lines)} lines need {lines_height(lines)} px but the page has {cfg.text_height}; "
            "lay out fewer lines per page"
        )
    img = Image.new("L", (cfg.size, cfg.size), 255)
    draw = ImageDraw.Draw(img)
    boxes = line_boxes(lines, cfg)
    x0 = cfg.margin
    for line, lb in zip(lines, boxes):
        y = lb.box[1]
        chain = layout.chain(line.style)
        if line.style == "header":
            draw.rectangle((x0 - 6, y + 2, cfg.size - x0 + 6, y + line.height - 2), fill=cfg.header_fill)
            ty = y + (line.height - cfg.header_size) // 2 - 1
        else:
            ty = y + (line.height - cfg.font_size) // 2
        if line.text:
            _draw_runs(draw, (x0, ty), line.text, chain, cfg.stroke)
    return img, boxes
