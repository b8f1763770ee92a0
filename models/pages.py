"""Page images -> the visual tokens of a DeepEncoder (Unlimited OCR / DeepSeek-OCR), per tier.

Tiny, Small, Base and Large send one global view at the tier's side; Gundam sends a 1024 global
view and 640-px tiles of the 1280 master (2 x 2 for a square page). The count of features the
encoder returns per page is what the `unlimited-ocr` cost model charges (tests/test_local_model.py).

The views are built here, not by transformers' `UnlimitedOcrImageProcessor`: that processor needs
torchvision, which has no build beside the CPU torch this project installs. For pages that are
already at the target size (every tier image is) it only rescales and normalizes, as done here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from optictx.context import PageSegment
from optictx.tiers import Tier

GUNDAM_GLOBAL = 1024  # DeepSeek-OCR's Gundam: a Base-sized global view ...
GUNDAM_TILE = 640  # ... and Small-sized tiles of the master


@dataclass(frozen=True)
class Views:
    """One page's encoder input: the global view, its local tiles (Gundam) and their grid."""

    global_view: torch.Tensor  # (3, side, side)
    local: torch.Tensor | None  # (tiles, 3, 640, 640)
    grid: tuple[int, int]  # (columns, rows); (0, 0) without tiles


def to_tensor(image: Image.Image) -> torch.Tensor:
    """RGB, scaled to [-1, 1] (mean 0.5, std 0.5: the processor's normalization)."""
    arr = np.asarray(image.convert("RGB"), dtype=np.float32)
    return torch.from_numpy(arr).permute(2, 0, 1) / 127.5 - 1.0


def views(seg: PageSegment, tier: Tier | None = None) -> Views:
    """The encoder input for `seg` at `tier` (default: its own tier)."""
    tier = tier or seg.tier
    if not tier.is_image:
        raise ValueError(f"a {tier.name} page has no image to encode")
    if tier is not Tier.GUNDAM:
        return Views(to_tensor(seg.image_at(tier)), None, (0, 0))
    master = seg.image_at(Tier.GUNDAM)
    cols, rows = master.width // GUNDAM_TILE, master.height // GUNDAM_TILE
    tiles = [master.crop((c * GUNDAM_TILE, r * GUNDAM_TILE, (c + 1) * GUNDAM_TILE, (r + 1) * GUNDAM_TILE))
             for r in range(rows) for c in range(cols)]
    return Views(to_tensor(seg.image_at(Tier.BASE)), torch.stack([to_tensor(t) for t in tiles]), (cols, rows))


@torch.no_grad()
def encode(model: Any, batch: list[Views]) -> list[torch.Tensor]:
    """Visual tokens (positions, hidden) of each page, through the model's own vision tower,
    projector, row newlines and view separator. Pages of one global size run as one batch."""
    out: list[torch.Tensor | None] = [None] * len(batch)
    by_side: dict[tuple[int, bool], list[int]] = {}
    for i, v in enumerate(batch):
        by_side.setdefault((v.global_view.shape[-1], v.local is not None), []).append(i)
    inner = model.model if hasattr(model, "model") else model
    dtype = next(inner.parameters()).dtype
    device = next(inner.parameters()).device
    for (_, tiled), idx in by_side.items():
        kwargs: dict[str, Any] = {}
        if tiled:
            kwargs = {"pixel_values_local": torch.cat([batch[i].local for i in idx]).to(device, dtype),  # type: ignore[misc]
                      "num_local_patches": [len(batch[i].local) for i in idx],  # type: ignore[arg-type]
                      "patches_grid": [list(batch[i].grid) for i in idx]}
        pixels = torch.stack([batch[i].global_view for i in idx]).to(device, dtype)
        features = inner.get_image_features(pixels, **kwargs).pooler_output
        for i, f in zip(idx, features):
            out[i] = f
    return out  # type: ignore[return-value]
