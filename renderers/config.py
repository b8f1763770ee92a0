"""Render settings: one frozen record, hashed into every page digest."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError

Downscale = Literal["reduce-bilinear", "lanczos", "bicubic", "box", "hamming"]


class RenderConfig(BaseModel):
    """How a page is drawn. Same config + same fonts => the same pixels.

    >>> RenderConfig().size
    1280
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(1280, ge=256, le=4096, description="master page width in px (and height, unless `height`)")
    # A page taller than wide, for a consumer that prices tiles (OpenAI: a 512 x 1024 page is two
    # 512-px tiles and one base charge, for two tiles' text). None: square.
    height: int | None = Field(None, ge=256, le=16384, description="master page height in px (None: `size`)")
    margin: int = Field(24, ge=0, le=256)
    # 21 px fills a ~1,100-token prose page (four columns) and still reads at SMALL and TINY
    # (BENCHMARKS.md, "Text density", "Denser pages").
    font_size: int = Field(21, ge=6, le=96, description="body and code text, px at master size")
    header_size: int = Field(17, ge=6, le=96)
    # 1.14 (a 24-px pitch): two more lines a column than 1.18 and still read at TINY by both
    # readers; at 1.1 Tesseract fell to ~93% on some sessions (BENCHMARKS.md, "Denser pages").
    line_spacing: float = Field(1.14, ge=1.0, le=3.0, description="line pitch / font size")
    tab_width: int = Field(4, ge=1, le=16)
    header_fill: int = Field(216, ge=0, le=255, description="grey of the role header band")
    fallback_fonts: tuple[str, ...] = Field(
        (), description="extra font files tried, in order, for glyphs the shipped fonts lack"
    )
    system_fallbacks: bool = Field(
        True, description="also try known system fonts (fonts-noto-cjk, fonts-droid-fallback)"
    )
    body_font: Literal["sans", "mono"] = Field("sans", description="DejaVu face for prose (code is always mono)")
    stroke: int = Field(0, ge=0, le=3, description="extra stroke width in px at master size (bolder glyphs)")
    gamma: float = Field(1.0, ge=0.25, le=4.0, description="applied to downscaled tiers: > 1 darkens grey edges")
    # 16 greys read as 256 do (Tesseract on 1092-px pages of Claude Code sessions: 90.84% against
    # 90.89%; 8 greys lose 0.9 points) and make files half the size (BENCHMARKS.md, "Bytes").
    greys: int = Field(16, ge=2, le=256, description="grey levels of a page's images at every tier (256: all)")
    downscale: Downscale = Field(
        "reduce-bilinear", description="how tiers are derived from the master: exact box average by the integer "
        "factor then bilinear the rest of the way, or one Pillow filter all the way",
    )
    # Four columns: agent traffic is short lines (tool output, code), which fill a column's
    # height long before its width; with the pitch above a Claude Code page holds 12-16% more
    # than three columns at 1.18 did (BENCHMARKS.md, "Denser pages").
    columns: int = Field(4, ge=1, le=8, description="text columns per page; short lines (code, logs) pack denser")
    gutter: int = Field(28, ge=0, le=256, description="px between columns")
    compact_json: bool = Field(True, description="draw multi-line JSON documents with no layout whitespace, "
                               "breaking lines between items")
    compact_indent: bool = Field(True, description="code laid out as a program: four-space (or tab) "
                                 "indentation drawn at half its depth, the same on every line")
    repeats: bool = Field(True, description="a run of lines that repeats lines the same page shows is drawn as "
                          "one line naming the copy (read by the packer)")
    code_layout: Literal["program", "chars"] = Field(
        "program", description="code and tool output: 'program' wraps between tokens, indents and marks "
        "continuations, draws line-number gutters compact (codewrap.py); 'chars' breaks at the column's last character")
    # Read by the packer, not the renderer: it is here so one file (what `optictx tune` writes)
    # describes a whole page design, and the page digest covers it.
    # 1100: the most at which a page of prose is still full at 21 px (four columns at the pitch
    # above hold ~1,120), so the font stays the one fitted to the density; pages of agent
    # traffic mostly close on their height first.
    tokens_per_page: int = Field(1100, ge=16, le=100_000, description="text tokens a page holds at most")

    @property
    def program(self) -> bool:
        """Whether code is laid out as a program (`code_layout`), calls' code included."""
        return self.code_layout == "program"

    @property
    def line_height(self) -> int:
        return round(self.font_size * self.line_spacing)

    @property
    def header_height(self) -> int:
        return round(self.header_size * 1.6)

    @property
    def handle_size(self) -> int:
        """The page handle's type (`optictx.handles`), twice the text's: at TINY an eight-letter
        id must be read without a slip (at 1.5 times, Tesseract misread 2 of 7 at 512 px)."""
        return round(self.font_size * 1.75)

    @property
    def handle_height(self) -> int:
        return round(self.handle_size * self.line_spacing)

    @property
    def text_width(self) -> int:
        """The width of one column: lines wrap at it."""
        return (self.size - 2 * self.margin - (self.columns - 1) * self.gutter) // self.columns

    def column_x(self, column: int) -> int:
        return self.margin + column * (self.text_width + self.gutter)

    @property
    def master(self) -> tuple[int, int]:
        """The master page's (width, height) in px."""
        return self.size, self.height or self.size

    @property
    def text_height(self) -> int:
        return self.master[1] - 2 * self.margin

    @classmethod
    def load(cls, path: str | Path) -> RenderConfig:
        """A config saved with `save` (or written by `optictx tune`); ValueError names a bad file."""
        try:
            return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValidationError) as exc:
            raise ConfigError(f"{path}: not a RenderConfig JSON file ({exc})") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    @property
    def digest(self) -> str:
        """Short stable hash of the settings (fonts are hashed separately by the FontSet)."""
        return _digest(self)


@lru_cache(maxsize=256)
def _digest(config: RenderConfig) -> str:
    # Not a cached_property: `model_copy(update=...)` copies the instance dict, and with it a
    # cached digest of the settings it was copied from.
    # A square page leaves `height` out, so its digest (and every stored page keyed by it) is
    # what it was before pages could be tall.
    blob = json.dumps(config.model_dump(mode="json", exclude={"height"} if config.height is None else None),
                      sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
