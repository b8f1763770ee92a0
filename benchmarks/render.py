"""Rendering cost: optictx's page renderer vs a bare Pillow loop drawing the same lines.

Both draw the same laid-out lines of real pages (the sample agent conversation) with the same
fonts onto a 1280x1280 greyscale page; the baseline skips header bands, font fallback and the
line-box bookkeeping. Timings are the minimum of interleaved repeats.

    python benchmarks/render.py [--pages 30] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics

from _common import best_of
from optictx.renderers import Layout, RenderConfig, draw_page
from PIL import Image, ImageDraw

from optictx.packer import Packer
from optictx.sample import sample_conversation
from optictx.tokens import get_tokenizer
from optictx.turns import to_turn


def bare_pillow(lines, layout: Layout) -> Image.Image:
    cfg = layout.config
    img = Image.new("L", (cfg.size, cfg.size), 255)
    draw = ImageDraw.Draw(img)
    y = cfg.margin
    for line in lines:
        draw.text((cfg.margin, y), line.text, font=layout.chain(line.style).faces[0].font, fill=0)
        y += line.height
    return img


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    layout = Layout(RenderConfig())
    tok = get_tokenizer()
    packer = Packer(layout, tok, tokens_per_page=1000)
    for i, m in enumerate(sample_conversation()):
        packer.add(to_turn(m).model_copy(update={"id": i}))
    pages = packer.sealed[: args.pages]
    lines = [p.lines for p in pages]
    ours, base = [], []
    for _ in range(args.repeat):  # interleaved, so drift on a shared machine hits both alike
        base.append(best_of(lambda: [bare_pillow(ls, layout) for ls in lines], 1))
        ours.append(best_of(lambda: [draw_page(ls, layout) for ls in lines], 1))
    n = len(pages)
    b, o = min(base) / n * 1000, min(ours) / n * 1000
    mean_tokens = statistics.mean(tok.count(p.text) for p in pages)
    print(f"pages: {n} (mean {mean_tokens:.0f} cl100k tokens, font {layout.config.font_size}px)")
    print(f"bare Pillow loop : {b:6.2f} ms/page")
    print(f"optictx renderer : {o:6.2f} ms/page")
    print(f"ratio            : {o / b:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
