"""Native images: the images a client puts in turns that stay text. They are priced by the same
cost model as pages, count against the budget and against the images-per-request cap."""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings

from PIL import Image

from .cost import CostModel
from .tiers import Tier
from .turns import Turn, image_url

IMAGE_PARTS = ("image_url", "input_image", "image")
# An image whose size cannot be read (a URL, an unreadable header) is priced as the largest most
# providers take before they scale down: never cheaper than it may turn out to be.
UNKNOWN_SIZE = (2048, 2048)
_DATA_URI = re.compile(r"^data:image/[\w.+-]+;base64,", re.S)
_HEADER_CHARS = 64 * 1024  # base64 of the first 48 KB: PNG, GIF and WebP headers, most JPEG SOFs


def image_sizes(turn: Turn) -> tuple[tuple[int, int] | None, ...]:
    """The size of each image part of the turn, None where it cannot be read without fetching
    or decoding it (only the header of a data URI is read: no pixel is decoded)."""
    if isinstance(turn.content, str):
        return ()
    return tuple(_size(p) for p in turn.content if p.get("type") in IMAGE_PARTS)


def images_cost(sizes: tuple[tuple[int, int] | None, ...], cost: CostModel) -> int:
    """What the images cost `cost`'s consumer (as a Gundam-mode image for DeepSeek-OCR)."""
    return sum(cost.image_tokens(Tier.GUNDAM, size or UNKNOWN_SIZE) for size in sizes)


def _size(part: dict) -> tuple[int, int] | None:
    url = image_url(part)
    if not (m := _DATA_URI.match(url)):
        return None
    head = url[m.end() : m.end() + _HEADER_CHARS]
    try:
        data = base64.b64decode(head[: len(head) // 4 * 4])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:  # reads the header only
                w, h = img.size
    except (binascii.Error, OSError, ValueError, Image.DecompressionBombError, SyntaxError):
        return None
    return (w, h) if w > 0 and h > 0 else None
