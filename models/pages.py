"""Page images -> the visual tokens of a local model's vision tower, per tier.

Unlimited OCR / DeepSeek-OCR (DeepEncoder): Tiny, Small, Base and Large send one global view at
the tier's side; Gundam sends a 1024 global view and 640-px tiles of the 1280 master (2 x 2 for a
square page). These views are built here, not by transformers' `UnlimitedOcrImageProcessor`: that
processor needs torchvision, which has no build beside the CPU torch this project installs. Where
torchvision is installed, `tests/test_local_model.py` compares them with the processor's: equal
at Tiny, Small, Base and Large (tier images are at their side already, so it only rescales and
normalizes) and for Gundam's tiles; Gundam's global view within 2 of 255 levels (both bicubic).

DeepSeek-OCR 2 (DeepEncoder V2): transformers' own torch-free `DeepseekOcr2ImageProcessorPil`
makes the views from the tier image: a 1024 global view (256 queries), plus 768-px crops (144
each) when the image is larger than 768 px, so Tiny and Small pages cost 257 positions and Base,
Large and Gundam 833.

The count of features the encoder returns per page is what the `unlimited-ocr` and
`deepseek-ocr-2` cost models charge (tests/test_local_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from PIL import Image

from optictx.tiers import Tier, gundam_views


@dataclass(frozen=True)
class Views:
    """One page's encoder input: the global view, its local tiles or crops, and the tiles' grid."""

    global_view: torch.Tensor  # (3, side, side)
    local: torch.Tensor | None  # (tiles, 3, 640, 640)
    grid: tuple[int, int]  # (columns, rows) of DeepEncoder tiles; (0, 0) otherwise (V2 needs only the count)


def to_tensor(image: Image.Image) -> torch.Tensor:
    """RGB, scaled to [-1, 1] (mean 0.5, std 0.5: the processor's normalization)."""
    arr = np.asarray(image.convert("RGB"), dtype=np.float32)
    return torch.from_numpy(arr).permute(2, 0, 1) / 127.5 - 1.0


def deepencoder_views(image: Image.Image, tier: Tier) -> Views:
    """DeepSeek-OCR / Unlimited OCR: one global view at the tier's side; Gundam's master as 640-px
    tiles plus a 1024 global view, both as transformers' UnlimitedOcrImageProcessor makes them."""
    if tier is not Tier.GUNDAM:
        return Views(to_tensor(image), None, (0, 0))
    tiles, global_view, grid = gundam_views(image)
    return Views(to_tensor(global_view), torch.stack([to_tensor(t) for t in tiles]), grid)


def deepencoder2_views(image: Image.Image, tier: Tier) -> Views:
    """DeepSeek-OCR 2: transformers' own views of the tier image (a 1024 global view, plus 768-px
    crops when the image is larger than 768 px)."""
    batch = _deepseek_ocr2_processor()(images=[image.convert("RGB")], return_tensors="pt")
    return Views(batch["pixel_values"][0], batch.get("pixel_values_local"), (0, 0))


@lru_cache(maxsize=1)
def _deepseek_ocr2_processor() -> Any:
    from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import DeepseekOcr2ImageProcessorPil

    return DeepseekOcr2ImageProcessorPil()


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
                      "num_local_patches": [len(batch[i].local) for i in idx]}  # type: ignore[arg-type]
            if batch[idx[0]].grid != (0, 0):  # DeepEncoder lays its tiles out on a grid
                kwargs["patches_grid"] = [list(batch[i].grid) for i in idx]
        pixels = torch.stack([batch[i].global_view for i in idx]).to(device, dtype)
        features = inner.get_image_features(pixels, **kwargs).pooler_output
        for i, f in zip(idx, features):
            out[i] = f
    return out  # type: ignore[return-value]
