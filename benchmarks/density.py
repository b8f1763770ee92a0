"""Text density vs legibility: how many tokens a page may hold and still be read at SMALL.

For each density (cl100k tokens per page) the font is the largest whose page holds that many
tokens of prose, so a page is always full. Tesseract then reads pages at SMALL (640 px, the
DeepSeek-OCR 100-token mode) and TINY (512 px), on two corpora: prose (the docstrings of the
Python standard library, offline everywhere) and the shipped agent conversation (code, JSON,
logs). Reports character accuracy (whitespace and typographic quotes folded).

    python benchmarks/density.py [--pages 5] [--densities 800 1000 1200 1400 1600]
"""

from __future__ import annotations

import argparse
import statistics

from optictx.renderers import Block, Layout, RenderConfig

from optictx.images import PageImages
from optictx.packer import Packer
from optictx.readers import TesseractReader, char_accuracy
from optictx.sample import prose_corpus, sample_conversation
from optictx.tiers import Tier
from optictx.tokens import get_tokenizer
from optictx.turns import Turn, to_turn


def prose_turns() -> list[Turn]:
    return [Turn(role="user", content=c, id=i) for i, c in enumerate(prose_corpus())]


def agent_turns() -> list[Turn]:
    return [to_turn(m).model_copy(update={"id": i}) for i, m in enumerate(sample_conversation())]


def full_pages(config: RenderConfig, turns: list[Turn], n: int, tpp: int):
    layout = Layout(config)
    packer = Packer(layout, get_tokenizer(), tokens_per_page=tpp)
    for t in turns:
        packer.add(t)
        if len(packer.sealed) > n:
            break
    return layout, packer.sealed[1 : n + 1]  # page 0 starts the corpus mid-way: skip it


def font_for_density(tpp: int) -> int:
    """The largest font at which `tpp` prose tokens fit on one page."""
    tok, text = get_tokenizer(), "\n\n".join(t.text for t in prose_turns()[:8])
    best = 8
    for size in range(8, 48):
        cfg = RenderConfig(font_size=size)
        lines = Layout(cfg).lines(Block(text))[: cfg.text_height // cfg.line_height]
        if tok.count("\n".join(ln.text for ln in lines)) >= tpp:
            best = size
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=5)
    ap.add_argument("--densities", type=int, nargs="+", default=[800, 1000, 1200, 1400, 1600])
    args = ap.parse_args()
    reader, tok = TesseractReader(), get_tokenizer()
    corpora = {"prose": prose_turns(), "agent": agent_turns()}
    print("| tokens/page | font px | corpus | tokens/page seen | SMALL acc (min) | TINY acc (min) |")
    print("|---:|---:|---|---:|---|---|")
    for tpp in args.densities:
        size = font_for_density(tpp)
        for name, turns in corpora.items():
            layout, pages = full_pages(RenderConfig(font_size=size), turns, args.pages, tpp)
            images = PageImages(layout)
            acc = {tier: [char_accuracy(p.text, got) for p, got in
                          zip(pages, reader.read_batch([images.at(p, tier) for p in pages]))]
                   for tier in (Tier.SMALL, Tier.TINY)}
            seen = statistics.mean(tok.count(p.text) for p in pages)
            cells = " | ".join(f"{statistics.mean(a):.2%} ({min(a):.2%})" for a in acc.values())
            print(f"| {tpp} | {size} | {name} | {seen:.0f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
