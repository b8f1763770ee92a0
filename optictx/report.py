"""Human-readable views of a context: the plan table (turn -> tier) and a contact sheet PNG."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PIL import Image, ImageDraw, ImageFont, ImageOps

from .context import Context
from .packer import Page
from .renderers.fonts import SANS_BOLD
from .tiers import Tier
from .turns import Turn

_TIER_SHADE = {Tier.TEXT: (40, 120, 60), Tier.GUNDAM: (30, 90, 160), Tier.LARGE: (50, 110, 180),
               Tier.BASE: (80, 130, 190), Tier.SMALL: (200, 140, 40), Tier.TINY: (190, 80, 50),
               Tier.GONE: (120, 120, 120)}


def turn_placement(ctx: Context, turns: Sequence[Turn]) -> list[tuple[Turn, str, int]]:
    """(turn, where it is in the context, its tokens there) for every turn, in order.

    A turn on a page is charged its share of that page's cost, by lines.
    """
    where: dict[int, tuple[str, float]] = {}
    for s in ctx.text_segments:
        for tid in s.turn_ids:
            where[tid] = (f"text ({s.kind})", s.tokens)
    for page, tier, cost in _cells(ctx):
        n = len(page.entries) or 1
        for tid in page.turn_ids:
            share = sum(1 for e in page.entries if e.turn_id == tid) / n * cost
            label, tokens = where.get(tid, ("", 0.0))
            place = f"p{page.index} {tier.value}"
            where[tid] = (f"{label}, {place}" if label else place, tokens + share)
    return [(t, *_rounded(where.get(t.id, ("?", 0)))) for t in turns if t.id is not None]


def _cells(ctx: Context) -> list[tuple[Page, Tier, int]]:
    cells = [(s.page, s.tier, s.tokens) for s in ctx.pages] + [(p, Tier.GONE, 0) for p in ctx.gone]
    return sorted(cells, key=lambda c: c[0].index)


def _rounded(item: tuple[str, float]) -> tuple[str, int]:
    return item[0], round(item[1])


def printable(text: str) -> str:
    """`text` safe for a terminal: control, format and line-separator characters escaped (a turn
    holding ESC sequences must not drive the terminal that prints it)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def plan_table(ctx: Context, turns: Sequence[Turn], text_tokens: int) -> str:
    """A Markdown table of every turn's place in the context, then the totals."""
    rows = ["| turn | role | placed | tokens | preview |", "|---:|---|---|---:|---|"]
    for t, place, tokens in turn_placement(ctx, turns):
        calls = ", ".join(c.function.name for c in t.tool_calls)
        preview = printable(" ".join(t.text.split())[:48] or calls).replace("|", "\\|")
        rows.append(f"| {t.id} | {t.role} | {place} | {tokens} | {preview} |")
    r = ctx.report()
    ratio = text_tokens / ctx.tokens if ctx.tokens else float("nan")
    rows += ["", f"Context: {ctx.tokens} tokens of {r['limit']} under `{r['vision']}`; transcript as text: "
             f"{text_tokens} tokens; ratio {ratio:.2f}x. Pages per tier: {r['pages']}."]
    return "\n".join(rows)


def contact_sheet(ctx: Context, *, columns: int = 8, thumb: int = 200) -> Image.Image:
    """All pages of the context (GONE ones greyed) as labelled thumbnails, oldest first."""
    cells = _cells(ctx)
    segments = {s.page.index: s for s in ctx.pages}
    rows = max(1, -(-len(cells) // columns))
    label_h = 22
    sheet = Image.new("RGB", (columns * (thumb + 8) + 8, rows * (thumb + label_h + 8) + 8), (250, 250, 250))
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.truetype(str(SANS_BOLD), 13)
    for k, (page, tier, tokens) in enumerate(cells):
        x = 8 + (k % columns) * (thumb + 8)
        y = 8 + (k // columns) * (thumb + label_h + 8)
        image = segments[page.index].image if tier is not Tier.GONE else None
        if image is not None:
            # Downscale from the tier image so the blur the consumer sees shows in the thumbnail;
            # a tall page (`RenderConfig.height`) keeps its shape.
            img = ImageOps.contain(image, (thumb, thumb), Image.Resampling.LANCZOS).convert("RGB")
            sheet.paste(img, (x + (thumb - img.width) // 2, y + label_h))
        else:
            fill = (235, 245, 235) if tier is Tier.TEXT else (215, 215, 215)
            draw.rectangle((x, y + label_h, x + thumb - 1, y + label_h + thumb - 1), fill=fill)
            draw.text((x + 8, y + label_h + 8), "as text" if tier is Tier.TEXT else "forgotten",
                      font=font, fill=(90, 90, 90))
        draw.rectangle((x, y, x + thumb - 1, y + label_h - 2), fill=_TIER_SHADE[tier])
        draw.text((x + 4, y + 3), f"p{page.index} {tier.value.upper()} {tokens} tok", font=font, fill="white")
    return sheet


def memory_stats(ctx: Context, *, turns: int, text_tokens: int, sealed: int) -> dict[str, Any]:
    """`Memory.stats`: text tokens of the whole transcript, tokens of `ctx`, the ratio, pages per tier."""
    return {
        "turns": turns,
        "text_tokens": text_tokens,
        "context_tokens": ctx.tokens,
        "ratio": round(text_tokens / ctx.tokens, 2) if ctx.tokens else None,
        "pages": ctx.report()["pages"],
        "sealed_pages": sealed,
        "vision": ctx.vision.name,
    }
