"""Page images: each page drawn once at the master size, tier images derived and cached by digest."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

from PIL import Image

from .errors import ConfigError
from .lru import LRU
from .packer import Page
from .renderers import Layout, draw_page, line_boxes
from .tiers import Tier, tier_image

# How a page image is sent: lossless WebP of its grey levels (`RenderConfig.greys`), which every
# API that takes images takes (Anthropic, OpenAI, Gemini: png, jpeg, gif, webp). On 1092-px pages
# of Claude Code sessions it is 0.34x the bytes of an 8-bit PNG and 0.73x of a 4-bit optimised
# PNG, in half the time of the latter (BENCHMARKS.md, "Bytes"); lossless, so a reader reads what
# it read. method 2 is as small as 4-6 here, in half their time; the same Pillow gives the same bytes.
MEDIA_TYPE = "image/webp"
ENCODING: dict[str, Any] = {"format": "WEBP", "lossless": True, "quality": 100, "method": 2}


def _size(value: Image.Image) -> int:
    """Bytes an image's pixels hold."""
    return value.width * value.height * len(value.getbands())


class PageImages:
    """Renders and caches page images. Keys are page digests, so equal pages share pixels."""

    def __init__(self, layout: Layout, *, max_bytes: int = 256 * 2**20) -> None:
        self.layout = layout
        # PNGs apart from pixels, half the bytes each: every request of a chat sends every page's
        # PNG again, and in one shared LRU a page's pixels (a MiB each) would push the PNGs out
        # (a tenth of that) whenever the pages outgrow the cache, so every request drew again.
        self._cache: LRU[tuple[Any, ...], Any] = LRU(max_bytes=max_bytes // 2, size_of=_size)
        self._png: LRU[tuple[Any, ...], str] = LRU(max_bytes=max_bytes - max_bytes // 2, size_of=len)
        self.renders = 0  # master renders done, for tests and benchmarks

    def master(self, page: Page) -> Image.Image:
        key = (page.digest, "master")
        img = self._cache.get(key)
        if img is None:
            img, _ = draw_page(page.lines, self.layout)
            self.renders += 1
            self._cache[key] = img
        return img

    def at(self, page: Page, tier: Tier) -> Image.Image:
        """The page at an image tier."""
        if not tier.is_image:
            raise ConfigError(f"{tier.name} has no image")
        cfg = self.layout.config
        if cfg.greys >= 256 and tier.size_at(cfg.master) == cfg.master:
            return self.master(page)
        key = (page.digest, tier)
        img = self._cache.get(key)
        if img is None:
            img = tier_image(self.master(page), tier, downscale=cfg.downscale, gamma=cfg.gamma, levels=cfg.greys)
            self._cache[key] = img
        return img

    def boxes(self, page: Page, tier: Tier) -> list[tuple[int, int, int, int]]:
        """Every line's box on the page's image at `tier`, in that image's pixels (for readers)."""
        size = tier.size_at(self.layout.config.master)
        if size is None:
            raise ConfigError(f"{tier.name} has no image")
        f = size[0] / self.layout.config.size
        return [(round(x0 * f), round(y0 * f), round(x1 * f), round(y1 * f))
                for x0, y0, x1, y1 in (b.box for b in line_boxes(page.lines, self.layout))]

    def read(self, reader: Any, pages: Sequence[Page], tier: Tier) -> list[str]:
        """What `reader` (a `readers.Reader`) reads on `pages` at `tier`, given each page's line
        boxes: without them a reader would read across the columns."""
        return reader.read_batch([self.at(p, tier) for p in pages], [self.boxes(p, tier) for p in pages])

    def image_base64(self, page: Page, tier: Tier) -> str:
        """The page at `tier` as the exporters embed it: MEDIA_TYPE, base64 text."""
        key = (page.digest, tier)
        data = self._png.get(key)
        if data is None:
            data = self._png[key] = encoded(self.at(page, tier))
        return data


def encoded(image: Image.Image) -> str:
    """An image as the exporters embed it: MEDIA_TYPE, base64 text."""
    buf = io.BytesIO()
    image.save(buf, **ENCODING)
    return base64.b64encode(buf.getvalue()).decode("ascii")
