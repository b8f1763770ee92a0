"""Tiers: how sharp a page is in the context, from TEXT down to GONE, and the image of each."""

from __future__ import annotations

from enum import Enum

from PIL import Image

from .errors import ConfigError


class Tier(str, Enum):
    """Fidelity levels, best first. Image tiers are named after DeepSeek-OCR's resolution modes."""

    TEXT = "text"
    GUNDAM = "gundam"
    LARGE = "large"
    BASE = "base"
    SMALL = "small"
    TINY = "tiny"
    GONE = "gone"

    rank: int  # higher is sharper: TEXT 6 ... GONE 0 (set below; a plain attribute: hot in the fitter)

    @property
    def side(self) -> int | None:
        """Side in px of the square image sent for this tier of a 1280-px page (DeepSeek-OCR's
        modes); None for TEXT and GONE."""
        return _SIDE.get(self)

    def size_at(self, master: tuple[int, int]) -> tuple[int, int] | None:
        """(width, height) in px of this tier's image of a page drawn `master` px: the same scale
        as at 1280 square (a page drawn larger or taller, for a consumer that prices pixels or
        tiles, shrinks by the same factors, so its text reads the same at each tier); None for
        TEXT and GONE."""
        side = _SIDE.get(self)
        if side is None:
            return None
        return tuple(m if side == MASTER else round(m * side / MASTER) for m in master)  # type: ignore[return-value]

    @property
    def is_image(self) -> bool:
        return self in _SIDE

    def __str__(self) -> str:
        return self.value


# GUNDAM sends the full master; the consumer tiles it (DeepSeek-OCR: 2x2 tiles of 640 + a 1024
# global view for a square 1280 page). The other sides are DeepSeek-OCR's native modes.
MASTER = 1280  # the page side DeepSeek-OCR's tier sizes are of
_SIDE = {Tier.GUNDAM: 1280, Tier.LARGE: 1280, Tier.BASE: 1024, Tier.SMALL: 640, Tier.TINY: 512}
for _i, _t in enumerate(Tier):
    _t.rank = 6 - _i
IMAGE_TIERS: tuple[Tier, ...] = tuple(_SIDE)


_FILTERS = {"lanczos": Image.Resampling.LANCZOS, "bicubic": Image.Resampling.BICUBIC, "box": Image.Resampling.BOX,
            "hamming": Image.Resampling.HAMMING}


def greys(img: Image.Image, levels: int) -> Image.Image:
    """`img` (greyscale) with `levels` evenly spaced greys (256: as it is): a page's glyph edges
    need no more to read the same (BENCHMARKS.md, "Bytes"), and fewer make far smaller files."""
    if levels >= 256:
        return img
    step = 255 / (levels - 1)
    return img.point([round(round(v / step) * step) for v in range(256)])


def tier_image(
    master: Image.Image, tier: Tier, *, downscale: str = "reduce-bilinear", gamma: float = 1.0, levels: int = 256
) -> Image.Image:
    """The master downscaled to the tier's side (the master itself when sizes match), in
    `levels` greys.

    An integer factor (1280 -> 640) is an exact box average (`reduce`), the rest of the way
    (640 -> 512, 1280 -> 1024) bilinear: Tesseract reads them as well as direct Lanczos at a
    fraction of the time (BENCHMARKS.md, "Building a 100k-token memory").
    """
    size = tier.size_at(master.size)
    if size is None:
        raise ConfigError(f"tier {tier.name} has no image; image tiers: {[t.name for t in IMAGE_TIERS]}")
    if master.size == size:
        return greys(master, levels)
    if downscale in _FILTERS:
        img = master.resize(size, _FILTERS[downscale])
    else:
        img, factor = master, master.width // size[0]
        if factor >= 2 and master.height // size[1] == factor:
            img = master.reduce(factor)
        if img.size != size:
            img = img.resize(size, Image.Resampling.BILINEAR)
    if gamma != 1.0:
        img = img.point([round(255 * (v / 255) ** gamma) for v in range(256)] * len(img.getbands()))
    return greys(img, levels)


GUNDAM_TILE = 640  # DeepSeek-OCR's Gundam: Small-sized tiles of the master ...
GUNDAM_GLOBAL = 1024  # ... and a Base-sized global view


def gundam_views(master: Image.Image) -> tuple[list[Image.Image], Image.Image, tuple[int, int]]:
    """DeepSeek-OCR's Gundam inputs for a page master: row-major 640-px tiles, the global view
    (the master scaled by bicubic, as transformers' UnlimitedOcrImageProcessor scales it, not the
    BASE tier image, which is scaled for legibility) and the tiles' grid (columns, rows)."""
    master = master.convert("RGB")
    cols, rows = max(1, master.width // GUNDAM_TILE), max(1, master.height // GUNDAM_TILE)
    tiles = [master.crop((c * GUNDAM_TILE, r * GUNDAM_TILE, (c + 1) * GUNDAM_TILE, (r + 1) * GUNDAM_TILE))
             for r in range(rows) for c in range(cols)]
    return tiles, master.resize((GUNDAM_GLOBAL, GUNDAM_GLOBAL), Image.Resampling.BICUBIC), (cols, rows)
