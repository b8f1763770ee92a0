"""Render settings: one frozen record, hashed into every page digest."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field


class RenderConfig(BaseModel):
    """How a page is drawn. Same config + same fonts => the same pixels.

    >>> RenderConfig().size
    1280
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(1280, ge=256, le=4096, description="master page side in px (square)")
    margin: int = Field(24, ge=0, le=256)
    # 21 px fills a 1000-token prose page; benchmarks/density.py measured SMALL >= 98% there.
    font_size: int = Field(21, ge=6, le=96, description="body and code text, px at master size")
    header_size: int = Field(17, ge=6, le=96)
    line_spacing: float = Field(1.18, ge=1.0, le=3.0, description="line pitch / font size")
    tab_width: int = Field(4, ge=1, le=16)
    header_fill: int = Field(216, ge=0, le=255, description="grey of the role header band")
    fallback_fonts: tuple[str, ...] = Field(
        (), description="extra font files tried, in order, for glyphs the shipped fonts lack"
    )
    system_fallbacks: bool = Field(
        True, description="also try known system fonts (fonts-noto-cjk, fonts-droid-fallback)"
    )

    @property
    def line_height(self) -> int:
        return round(self.font_size * self.line_spacing)

    @property
    def header_height(self) -> int:
        return round(self.header_size * 1.6)

    @property
    def text_width(self) -> int:
        return self.size - 2 * self.margin

    @property
    def text_height(self) -> int:
        return self.size - 2 * self.margin

    @cached_property
    def digest(self) -> str:
        """Short stable hash of the settings (fonts are hashed separately by the FontSet)."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
