"""Peer comparison: optictx pages vs pixelprompt images of the same text, at Claude's prices.

pixelprompt (PyPI) renders text for Claude: dynamic-size images, a small monospace font, prose
minified. Both systems render the same texts; each image is priced by the `anthropic` cost model
and read back, by the same reader, at the size Claude looks at (its resize rule applied first).
Accuracy is against the text each system meant to draw (pixelprompt's minified text, our page
text), so neither is charged for the other's formatting choices. Rows are then paired at equal
cost: each pixelprompt setting against the optictx tier whose compression is nearest.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from PIL import Image

from ..cost import COST_MODELS, Anthropic
from ..images import PageImages
from ..readers import CachedReader, char_accuracy
from ..renderers import RenderConfig
from ..tiers import Tier
from ..tokens import get_tokenizer
from .fidelity import corpora, full_pages, write_csv

PRESET = {"prose": "prose", "code": "code", "tool": "code"}  # tool output is not all JSON: no compaction
OUR_TIERS = (Tier.LARGE, Tier.BASE, Tier.SMALL, Tier.TINY)


@dataclass(frozen=True)
class PeerRow:
    system: str
    setting: str
    corpus: str
    images: int
    text_tokens: int  # of the source text, the same for both systems
    image_tokens: int  # anthropic cost model
    compression: float
    char_acc: float


def _seen(image: Image.Image, model: Anthropic, font_px: float | None = None, glyph_px: float = 0) -> Image.Image:
    """`image` at the size Claude sees it; with `font_px`, then enlarged (the information stays
    what Claude sees) until its glyphs are `glyph_px` tall, as large as the reader gets ours."""
    size = model.seen_size(image.size)
    out = image if size == image.size else image.resize(size, Image.Resampling.LANCZOS)
    if font_px:
        f = glyph_px / (font_px * size[0] / image.width)
        out = out.resize((round(out.width * f), round(out.height * f)), Image.Resampling.LANCZOS)
    return out


def _pixelprompt(text: str, preset: str, font_size: int | None) -> tuple[list[Image.Image], str, int]:
    """pixelprompt's images of `text`, the text it drew (minified when the preset says so) and
    its font size in px."""
    from pixelprompt import PixelPrompt
    from pixelprompt import RenderConfig as PPConfig

    cfg = PPConfig.for_content(preset)
    if font_size is not None:
        cfg.font_size = font_size
    pp = PixelPrompt(cfg)
    drawn = pp.minify_text(text) if cfg.minify else text
    images = [im._image.convert("L") for im in pp.render(text)]  # pixelprompt has no public accessor
    return images, drawn, cfg.font_size


def compare(reader: CachedReader, *, pages: int = 3, font_sizes: Sequence[int | None] = (None, 12, 16),
            corpus_names: Sequence[str] = ("prose", "code", "tool")) -> list[PeerRow]:
    """Rows for optictx at each tier and pixelprompt at its preset font (None) and larger ones.

    A reader sees our glyphs (upscaled to its working width) at `font_size * width / master`
    px; pixelprompt's images are enlarged to the same glyph size, so Tesseract's appetite for big
    glyphs favours neither."""
    model: Anthropic = COST_MODELS["anthropic"]  # type: ignore[assignment]
    tok, texts = get_tokenizer(), corpora()
    rows = []
    for name in corpus_names:
        config = RenderConfig()
        layout, got = full_pages(config, texts[name], pages, config.tokens_per_page)
        source = "\n".join(p.text for p in got)
        n = tok.count(source)
        images = PageImages(layout)
        for tier in OUR_TIERS:
            seen = [_seen(images.at(p, tier), model) for p in got]
            f = seen[0].width / tier.side  # type: ignore[operator]
            boxes = [[tuple(round(v * f) for v in b) for b in images.boxes(p, tier)] for p in got]
            read = reader.read_batch(seen, boxes)
            cost = len(got) * model.page_tokens(tier)
            acc = statistics.mean(char_accuracy(p.text, r) for p, r in zip(got, read))
            rows.append(PeerRow("optictx", tier.value, name, len(got), n, cost, round(n / cost, 2), acc))
        for size in font_sizes:
            ims, drawn, font_px = _pixelprompt(source, PRESET[name], size)
            glyph = config.font_size * getattr(reader, "upscale_to", config.size) / config.size
            read = reader.read_batch([_seen(im, model, font_px, glyph) for im in ims])
            cost = sum(model.image_tokens(Tier.LARGE, im.size) for im in ims)
            label = f"{PRESET[name]} preset" + (f", font {size}" if size else "")
            rows.append(PeerRow("pixelprompt", label, name, len(ims), n, cost, round(n / cost, 2),
                                char_accuracy(drawn, "\n".join(read))))
    return rows


def equal_cost_pairs(rows: Sequence[PeerRow]) -> list[tuple[PeerRow, PeerRow]]:
    """Each pixelprompt row with the optictx row of its corpus nearest in compression."""
    pairs = []
    for peer in (r for r in rows if r.system == "pixelprompt"):
        ours = [r for r in rows if r.system == "optictx" and r.corpus == peer.corpus]
        pairs.append((peer, min(ours, key=lambda r: abs(r.compression - peer.compression))))
    return pairs


def write_outputs(rows: Sequence[PeerRow], out: str | Path, reader_name: str) -> dict[str, Path]:
    out = Path(out)
    paths = {"csv": out / "peer.csv", "md": out / "peer.md"}
    write_csv(paths["csv"], [asdict(r) for r in rows])
    lines = [f"Reader: {reader_name}, on each image at the size Claude sees it; cost: `anthropic` model "
             "(w*h/750 after its resize); compression = source text tokens (cl100k) / image tokens.", "",
             "| corpus | system | setting | images | image tokens | compression | char acc |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r.corpus, -r.compression)):
        lines.append(f"| {r.corpus} | {r.system} | {r.setting} | {r.images} | {r.image_tokens} | "
                     f"{r.compression}x | {r.char_acc:.2%} |")
    lines += ["", "At equal cost (nearest compression):", "",
              "| corpus | pixelprompt | optictx | compression (pp / ours) | char acc (pp / ours) |",
              "|---|---|---|---|---|"]
    for peer, ours in equal_cost_pairs(rows):
        lines.append(f"| {peer.corpus} | {peer.setting} | {ours.setting} | {peer.compression}x / "
                     f"{ours.compression}x | {peer.char_acc:.2%} / {ours.char_acc:.2%} |")
    paths["md"].write_text("\n".join(lines) + "\n")
    return paths
