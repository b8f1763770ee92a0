"""Cost models: what one page image at a tier costs a consumer, in the tokens its decoder holds,
and the registry of vision profiles (`PROFILES`): per consumer its cost model, the model names
that are it, its prompt-cache rules and its KV geometry.

Each profile is one registry line with its source; the formulas are pinned by tests against the
published numbers (tests/test_cost.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from .errors import ConfigError
from .kv import KV_PRESETS, KVGeometry
from .renderers import RenderConfig
from .tiers import IMAGE_TIERS, MASTER, Tier
from .tokens import Tokenizer, get_tokenizer


@dataclass(frozen=True)
class CostModel:
    """Base: subclasses give `image_tokens` (decoder positions) and may give `paper_tokens`."""

    name: str
    max_images: int | None = None  # the consumer's documented images-per-request cap, if any
    max_request_bytes: int | None = None  # the most bytes of one request it takes, if documented (`weight.py`)

    def image_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        raise NotImplementedError

    def paper_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        """The count the model's paper or docs quote (may leave out separators); default: the same."""
        return self.image_tokens(tier, size)

    def tokenizer(self) -> Tokenizer:
        """Counts the consumer's text tokens; cl100k_base (offline) unless a subclass knows better."""
        return get_tokenizer()

    def tier_size(self, tier: Tier, master: int | tuple[int, int] = MASTER) -> tuple[int, int]:
        """The image size at `tier` of a page drawn `master` px (square where one number)."""
        size = tier.size_at((master, master) if isinstance(master, int) else master)
        if size is None:
            raise ConfigError(f"{tier.name} is not an image tier")
        return size

    def page_tokens(self, tier: Tier, master: int | tuple[int, int] = MASTER) -> int:
        """Decoder tokens for one page at `tier` (a page drawn `master` px, square where one number)."""
        return self.image_tokens(tier, self.tier_size(tier, master))

    def seen_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """The size the consumer looks at an image of `size` at, after any resize of its own."""
        return size

    def sent_as(self, master: int | tuple[int, int] = MASTER) -> dict[Tier, Tier]:
        """Image tiers the consumer sees no sharper than a smaller one, each with the least sharp
        tier it sees alike (Claude scales every page of 2730 px above TINY down to TINY's size):
        those are sent at that tier, as the consumer would have it, in fewer bytes and within
        any limit on larger images."""
        drawn = {t: self.tier_size(t, master) for t in IMAGE_TIERS}
        seen = {t: self.seen_size(size) for t, size in drawn.items()}
        least = {size: t for t, size in seen.items()}  # sharpest first: the least sharp tier is written last
        # Only a tier the consumer resizes: two it takes as drawn are two views (DeepSeek-OCR's
        # Gundam tiles a page LARGE sends whole).
        return {t: least[size] for t, size in seen.items() if least[size] is not t and size != drawn[t]}

    @property
    def image_detail(self) -> str | None:
        """OpenAI image_url `detail` to send, when the model distinguishes it."""
        return None


def _grid(w: int, h: int, tile: int, min_n: int, max_n: int) -> tuple[int, int]:
    """DeepSeek-OCR's tile grid (InternVL-style aspect match); (1, 1) means no local tiles."""
    if w <= tile and h <= tile:
        return 1, 1
    cands = sorted(
        {(i, j) for n in range(min_n, max_n + 1) for i in range(1, n + 1) for j in range(1, n + 1)
         if min_n <= i * j <= max_n},
        key=lambda ij: ij[0] * ij[1],
    )
    aspect, best, best_diff = w / h, (1, 1), math.inf
    for i, j in cands:
        diff = abs(aspect - i / j)
        if diff < best_diff:
            best, best_diff = (i, j), diff
        elif diff == best_diff and w * h > 0.5 * tile * tile * i * j:
            best = (i, j)
    return best


@dataclass(frozen=True)
class DeepSeekOCR(CostModel):
    """DeepSeek-OCR / Unlimited-OCR DeepEncoder: 16x16 patches, 16x compression, row newlines.

    Positions = q·(q+1) for the global view + (h_t·q')·(w_t·q'+1) for tiles + 1 separator,
    q = side/64 (vLLM get_num_image_tokens). Paper tokens leave out newlines and the separator.
    """

    tile: int = 640
    global_side: int = 1024
    max_crops: int = 6  # vLLM's MAX_CROPS; the HF infer() default allows 9

    def _views(self, tier: Tier, size: tuple[int, int]) -> tuple[int, tuple[int, int]]:
        w, h = size
        if tier is Tier.GUNDAM:
            return self.global_side, _grid(w, h, self.tile, 2, self.max_crops)
        return (tier.side or max(w, h)), (1, 1)

    def image_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        side, (wt, ht) = self._views(tier, size)
        q = side // 64
        local = 0 if (wt, ht) == (1, 1) else (ht * self.tile // 64) * (wt * self.tile // 64 + 1)
        return q * (q + 1) + local + 1

    def paper_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        side, (wt, ht) = self._views(tier, size)
        local = 0 if (wt, ht) == (1, 1) else wt * ht * (self.tile // 64) ** 2
        return (side // 64) ** 2 + local


@dataclass(frozen=True)
class DeepSeekOCR2(CostModel):
    """DeepSeek-OCR 2 (DeepEncoder V2): 256 global queries + 144 per 768 crop + 1 separator."""

    tile: int = 768
    max_crops: int = 6

    def _crops(self, size: tuple[int, int]) -> int:
        wt, ht = _grid(*size, self.tile, 2, self.max_crops)
        return 0 if (wt, ht) == (1, 1) else wt * ht

    def image_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        return 256 + 144 * self._crops(size) + 1

    def paper_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        return 256 + 144 * self._crops(size)


# OpenAI takes at most 50 MB of image bytes in one request (its vision guide, "Image input
# requirements"; read 2026-12-06): the whole context is held to it, text included.
OPENAI_IMAGE_BYTES = 50_000_000


@dataclass(frozen=True)
class OpenAITiles(CostModel):
    """GPT-4o family: fit 2048², short side to 768, then base + per_tile·(512-px tiles)."""

    max_request_bytes: int | None = OPENAI_IMAGE_BYTES
    base: int = 85
    per_tile: int = 170
    detail: Literal["high", "low"] = "high"

    def image_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        if self.detail == "low":
            return self.base
        w, h = size
        s = min(1.0, 2048 / max(w, h))
        w, h = w * s, h * s
        s = min(1.0, 768 / min(w, h))
        w, h = w * s, h * s
        return self.base + self.per_tile * math.ceil(w / 512) * math.ceil(h / 512)

    @property
    def image_detail(self) -> str:
        return self.detail


@dataclass(frozen=True)
class OpenAIPatches(CostModel):
    """GPT-4.1-mini family: 32-px patches, at most `max_patches`, times a per-model multiplier."""

    max_request_bytes: int | None = OPENAI_IMAGE_BYTES
    multiplier: float = 1.62
    max_patches: int = 1536

    def patches(self, size: tuple[int, int]) -> int:
        w, h = size
        n = math.ceil(w / 32) * math.ceil(h / 32)
        if n <= self.max_patches:
            return n
        shrink = math.sqrt(32 * 32 * self.max_patches / (w * h))
        sw, sh = w * shrink, h * shrink
        # Then shrink again so the width is a whole number of patches (OpenAI's documented rule).
        shrink2 = math.floor(sw / 32) / (sw / 32)
        return math.ceil(sw * shrink2 / 32) * math.ceil(sh * shrink2 / 32)

    def image_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        return math.ceil(self.patches(size) * self.multiplier)

    def paper_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        return self.patches(size)


@dataclass(frozen=True)
class Anthropic(CostModel):
    """Claude: w·h/750 after scaling down (aspect kept) to a 1568-px long edge and ~1.19 MP."""

    max_edge: int = 1568
    max_pixels: int = 1092 * 1092
    max_images: int | None = 100  # Anthropic docs: 100 images per request (200k-context models)
    # A Messages API request may weigh 32 MB ("Images and vision"); 100 of Claude's 1092-px pages
    # at 4 bits a pixel (16 greys, uncompressed) would be 80 MB of base64.
    max_request_bytes: int | None = 32_000_000

    def seen_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """The size Claude looks at after its resize (what a legibility test should read)."""
        w, h = size
        s = min(1.0, self.max_edge / max(w, h), math.sqrt(self.max_pixels / (w * h)))
        return math.floor(w * s), math.floor(h * s)

    def image_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        w, h = self.seen_size(size)
        return math.ceil(w * h / 750)


@dataclass(frozen=True)
class Gemini(CostModel):
    """Gemini 2.x: 258 when both sides <= 384 px, else 258 per 768-px tile."""

    def image_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        w, h = size
        if w <= 384 and h <= 384:
            return 258
        return 258 * math.ceil(w / 768) * math.ceil(h / 768)


@dataclass(frozen=True)
class QwenVL(CostModel):
    """Qwen2/2.5-VL: smart_resize to multiples of 28 within pixel bounds, one token per 28x28,
    plus <|vision_start|> and <|vision_end|>."""

    factor: int = 28
    min_pixels: int = 56 * 56
    max_pixels: int = 14 * 14 * 4 * 1280

    def grid(self, size: tuple[int, int]) -> tuple[int, int]:
        w, h = size
        f = self.factor
        hb, wb = max(f, round(h / f) * f), max(f, round(w / f) * f)
        if hb * wb > self.max_pixels:
            beta = math.sqrt(h * w / self.max_pixels)
            hb, wb = math.floor(h / beta / f) * f, math.floor(w / beta / f) * f
        elif hb * wb < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (h * w))
            hb, wb = math.ceil(h * beta / f) * f, math.ceil(w * beta / f) * f
        return wb // f, hb // f

    def paper_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        gw, gh = self.grid(size)
        return gw * gh

    def image_tokens(self, tier: Tier, size: tuple[int, int]) -> int:
        return self.paper_tokens(tier, size) + 2


# Pages for a consumer that prices pixels, not images (Anthropic: tokens = w*h/750, "Images and
# vision"): drawn 2730 px square with today's glyphs, so TINY (the 1280 page's 512, scaled alike)
# is 1092 x 1092, the largest square Claude takes without resizing it (~1.19 MP), and the text on
# it is the size TINY text always was. One such page costs what 4.5 TINY pages of 1280 cost, holds
# as much, counts once against the 100 images a request may carry, and its five columns are 39
# characters wide, where most code lines fit (BENCHMARKS.md, "Pages that keep a program's shape").
# Its tiers are derived from the master by bicubic: at 2730 -> 1092 px the glyphs' stems stay
# sharper than a box average then bilinear leaves them, and the pages read better by both readers
# and are smaller files (BENCHMARKS.md, "Claude's tiers derived by bicubic").
PIXEL_PRICED = RenderConfig(size=2730, margin=48, columns=5, gutter=40, tokens_per_page=5000, downscale="bicubic")
# Pages for a consumer that prices 512-px tiles after fitting 2048 px and scaling the short side
# down to 768, plus one base charge per image (OpenAI, "Calculating costs" in its vision guide):
# drawn 1280 x 2560 with today's glyphs, so TINY is 512 x 1024, two tiles and one base charge
# (425 tokens on gpt-4o) for the text of two 512-px pages (510), in two columns of 47 characters
# where four of 22 were. Four tiles tall (512 x 2048) is cheaper per tile still, but a page that
# holds twice as much seals twice as late, and short sessions then compact later and pay more
# (BENCHMARKS.md, "Tall pages for OpenAI").
TILE_PRICED = RenderConfig(height=2560, columns=2, tokens_per_page=2200)


@dataclass(frozen=True)
class VisionProfile:
    """What optictx knows of one consumer of page images, under one name (`Memory(vision=NAME)`):
    what a page costs it, which model names are it (the proxy's `--vision auto`, `optictx bill`),
    its provider's prompt-cache rules (`promptcache.CACHE_PRICING`), and its decoder's KV
    geometry where it runs locally. Adding a model is adding one profile."""

    cost: CostModel
    models: tuple[str, ...] = ()  # substrings of lower-cased model names priced as it; the longest match wins
    cache: str = "local"
    kv: KVGeometry | None = None
    render: RenderConfig | None = None  # the page geometry its pages are drawn at (None: RenderConfig())
    # ... for memories whose budget is at least this: a page of that geometry costs ~1,600 tokens
    # (Claude), and a budget of a few of them would have nothing to fade or drop but whole pages.
    render_budget: int = 32_000

    @property
    def name(self) -> str:
        return self.cost.name


PROFILES: MappingProxyType[str, VisionProfile] = MappingProxyType({p.name: p for p in (
    # DeepSeek-OCR's vLLM deepseek_ocr.py get_num_image_tokens (MAX_CROPS=6): features + row newlines + separator
    VisionProfile(DeepSeekOCR("deepseek-ocr"), ("deepseek-ocr",), kv=KV_PRESETS["deepseek-ocr"]),
    # Unlimited-OCR keeps DeepSeek-OCR's DeepEncoder; only the decoder changes (R-SWA)
    VisionProfile(DeepSeekOCR("unlimited-ocr"), ("unlimited-ocr", "unlimited_ocr"), kv=KV_PRESETS["unlimited-ocr"]),
    # DeepSeek-OCR 2's DeepEncoder V2 (transformers deepseek_ocr2): 256 + 144 per 768 crop, + separator
    VisionProfile(DeepSeekOCR2("deepseek-ocr-2"), ("deepseek-ocr-2", "deepseek-ocr2")),
    # OpenAI vision guide, "Calculating costs" (tiles). Cached input: 0.5x (gpt-4o), 0.25x
    # (gpt-4.1), 0.1x (gpt-5), so each has its own name.
    VisionProfile(OpenAITiles("openai:gpt-4o"), ("gpt-", "chatgpt", "o1", "o3"), cache="openai:gpt-4o",
                  render=TILE_PRICED),
    VisionProfile(OpenAITiles("openai:gpt-4o:low", detail="low"), cache="openai:gpt-4o"),
    VisionProfile(OpenAITiles("openai:gpt-4.1"), ("gpt-4.1",), cache="openai:gpt-4.1", render=TILE_PRICED),
    # GPT-5 family: priced as gpt-4o's tiles (an assumption: not checked against OpenAI's table here)
    VisionProfile(OpenAITiles("openai:gpt-5"), ("gpt-5",), cache="openai:gpt-5", render=TILE_PRICED),
    # OpenAI vision guide, patch-based image tokenization (multipliers 1.62 and 2.46); nano and
    # o4-mini names are priced as mini (the cheaper guess of the two)
    VisionProfile(OpenAIPatches("openai:gpt-4.1-mini", multiplier=1.62), ("gpt-4.1-mini", "gpt-4.1-nano", "o4-mini"),
                  cache="openai:gpt-4.1"),
    VisionProfile(OpenAIPatches("openai:gpt-4.1-nano", multiplier=2.46), cache="openai:gpt-4.1"),
    # Anthropic "Images and vision" docs: w*h/750 after the long-edge resize
    VisionProfile(Anthropic("anthropic"), ("claude",), cache="anthropic", render=PIXEL_PRICED),
    # Gemini API token docs (2.x): 258 per 768-px tile
    VisionProfile(Gemini("gemini"), ("gemini",), cache="gemini"),
    # transformers image_processing_qwen2_vl smart_resize defaults (one token per 28x28 px)
    VisionProfile(QwenVL("qwen2.5-vl"), ("qwen2.5-vl", "qwen2_5_vl")),
)})
COST_MODELS: MappingProxyType[str, CostModel] = MappingProxyType({n: p.cost for n, p in PROFILES.items()})


def vision_of_model(model: str) -> str | None:
    """The profile a model name pays as (`VisionProfile.models`, the longest match), or None."""
    name = model.lower()
    found = [(len(key), p.name) for p in PROFILES.values() for key in p.models if key in name]
    return max(found)[1] if found else None


def get_cost_model(spec: str | CostModel) -> CostModel:
    """A cost model by registry name, or the object itself.

    >>> get_cost_model("deepseek-ocr").page_tokens(Tier.SMALL)
    111
    """
    if isinstance(spec, CostModel):
        return spec
    if isinstance(spec, str):
        try:
            return COST_MODELS[spec]
        except KeyError:
            raise ConfigError(f"unknown vision {spec!r}; valid names: {', '.join(COST_MODELS)}") from None
    raise ConfigError(f"vision must be a registry name or a CostModel, got {type(spec).__name__}")
