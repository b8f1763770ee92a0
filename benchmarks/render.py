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
from PIL import Image, ImageDraw

from optictx.packer import Packer
from optictx.renderers import Layout, RenderConfig, draw_page
from optictx.sample import prose_corpus, sample_conversation
from optictx.tokens import get_tokenizer
from optictx.turns import Turn, to_turn


def bare_pillow(lines, layout: Layout) -> Image.Image:
    cfg = layout.config
    fonts = {style: layout.chain(style).faces[0].font for style in ("header", "text", "code")}
    img = Image.new("L", (cfg.size, cfg.size), 255)
    draw = ImageDraw.Draw(img)
    y = cfg.margin
    for line in lines:
        if line.style != "rule":  # a drawn rule is not text: the floor draws nothing for it
            draw.text((cfg.margin, y), line.text, font=fonts[line.style], fill=0)
        y += line.height
    return img


def pages_of(turns, layout: Layout, n: int):
    packer = Packer(layout, get_tokenizer())  # the render config's tokens per page
    for t in turns:
        packer.add(t)
        if len(packer.sealed) >= n:
            break
    return packer.sealed[:n]


def compare(name: str, pages, layout: Layout, repeat: int) -> None:
    # Per page, the minimum of `repeat` interleaved runs of each: this machine's timings drift by
    # tens of percent between seconds, and interleaving makes the drift hit both sides alike.
    base = ours = 0.0
    for p in pages:
        b_runs, o_runs = [], []
        for _ in range(repeat):
            b_runs.append(best_of(lambda p=p: bare_pillow(p.lines, layout), 1))
            o_runs.append(best_of(lambda p=p: draw_page(p.lines, layout), 1))
        base, ours = base + min(b_runs), ours + min(o_runs)
    n, tok = len(pages), get_tokenizer()
    b, o = base / n * 1000, ours / n * 1000
    mean_tokens = statistics.mean(tok.count(p.text) for p in pages)
    print(f"| {name} | {n} | {mean_tokens:.0f} | {b:.2f} | {o:.2f} | {o / b:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    layout = Layout(RenderConfig())
    prose = [Turn(role="user", content=c, id=i) for i, c in enumerate(prose_corpus())]
    agent = [to_turn(m).model_copy(update={"id": i}) for i, m in enumerate(sample_conversation())]
    print(f"font {layout.config.font_size}px, 1280x1280 greyscale; target: optictx <= 1.5x bare Pillow")
    print("| corpus | pages | tokens/page | bare Pillow ms/page | optictx ms/page | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    compare("prose", pages_of(prose, layout, args.pages), layout, args.repeat)
    compare("agent", pages_of(agent, layout, args.pages), layout, args.repeat)


if __name__ == "__main__":
    main()
