"""Model families: one frozen entry per transformers `model_type` OpticalModel runs, like
gpt-fast's `transformer_configs`. Everything that differs between families lives here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image

from optictx.errors import ConfigError
from optictx.pieces import PageSegment
from optictx.readers import OCR_PROMPTS
from optictx.tiers import Tier

from .pages import Views, deepencoder2_views, deepencoder_views


@dataclass(frozen=True)
class Family:
    model_type: str  # transformers' config.model_type
    model_class: str  # the transformers class that loads its checkpoints
    vision: str  # the cost model whose page positions its encoder produces: Memory(vision=...)
    also_fits: tuple[str, ...]  # other cost models that charge the same positions
    views: Callable[[Image.Image, Tier], Views]  # a page's image at a tier -> the encoder's input
    rswa: bool  # decode under R-SWA by default (the family was trained for it)
    ocr_prompt: str  # what it was trained to transcribe a page with

    @property
    def visions(self) -> tuple[str, ...]:
        return (self.vision, *self.also_fits)


FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("unlimited_ocr", "UnlimitedOcrForConditionalGeneration", "unlimited-ocr", ("deepseek-ocr",),
           deepencoder_views, rswa=True, ocr_prompt=OCR_PROMPTS["deepseek"]),
    # Trained with full attention: R-SWA only when asked (OpticalModel(rswa=True)).
    Family("deepseek_ocr2", "DeepseekOcr2ForConditionalGeneration", "deepseek-ocr-2", (),
           deepencoder2_views, rswa=False, ocr_prompt=OCR_PROMPTS["deepseek"]),
)}


def family_of(model_type: str) -> Family:
    """The family of a transformers `model_type`; ValueError listing the supported ones."""
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise ConfigError(f"a {model_type!r} model is not supported; OpticalModel runs {sorted(FAMILIES)}") from None


def views(seg: PageSegment, tier: Tier | None = None, *, family: str = "unlimited_ocr") -> Views:
    """The encoder input for `seg` at `tier` (default: its own tier), for a model whose config
    has this `model_type` (`families.FAMILIES`)."""
    tier = tier or seg.tier
    if not tier.is_image:
        raise ConfigError(f"a {tier.name} page has no image to encode")
    return family_of(family).views(seg.image_at(tier), tier)
