"""Tiers: how sharp a page is in the context, from TEXT down to GONE, and the image of each."""

from __future__ import annotations

from enum import Enum

from PIL import Image


class Tier(str, Enum):
    """Fidelity levels, best first. Image tiers are named after DeepSeek-OCR's resolution modes."""

    TEXT = "text"
    GUNDAM = "gundam"
    LARGE = "large"
    BASE = "base"
    SMALL = "small"
    TINY = "tiny"
    GONE = "gone"

    @property
    def rank(self) -> int:
        """Higher is sharper: TEXT 6 ... GONE 0. Decay never raises a page's rank with age."""
        return _RANK[self]

    @property
    def side(self) -> int | None:
        """Side in px of the square image sent for this tier; None for TEXT and GONE."""
        return _SIDE.get(self)

    @property
    def is_image(self) -> bool:
        return self in _SIDE

    def __str__(self) -> str:
        return self.value


# GUNDAM sends the full master; the consumer tiles it (DeepSeek-OCR: 2x2 tiles of 640 + a 1024
# global view for a square 1280 page). The other sides are DeepSeek-OCR's native modes.
_SIDE = {Tier.GUNDAM: 1280, Tier.LARGE: 1280, Tier.BASE: 1024, Tier.SMALL: 640, Tier.TINY: 512}
_RANK = {t: 6 - i for i, t in enumerate(Tier)}
IMAGE_TIERS: tuple[Tier, ...] = tuple(_SIDE)


def tier_image(master: Image.Image, tier: Tier) -> Image.Image:
    """The master downscaled to the tier's side (Lanczos). The master itself when sizes match."""
    side = tier.side
    if side is None:
        raise ValueError(f"tier {tier.name} has no image; image tiers: {[t.name for t in IMAGE_TIERS]}")
    if master.size == (side, side):
        return master
    return master.resize((side, side), Image.Resampling.LANCZOS, reducing_gap=3.0)


def gundam_views(
    master: Image.Image, tile: int = 640, global_side: int = 1024
) -> tuple[list[Image.Image], Image.Image]:
    """DeepSeek-OCR's Gundam inputs for a square page: row-major tiles plus the global view."""
    n = max(2, round(master.width / tile))
    big = master.resize((n * tile, n * tile), Image.Resampling.BICUBIC) if master.width != n * tile else master
    tiles = [big.crop((x * tile, y * tile, (x + 1) * tile, (y + 1) * tile)) for y in range(n) for x in range(n)]
    return tiles, master.resize((global_side, global_side), Image.Resampling.LANCZOS)
