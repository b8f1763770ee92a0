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

from optictx.eval.fidelity import agent_turns, font_for_density, full_pages
from optictx.eval.fidelity import corpora as corpora_of
from optictx.images import PageImages
from optictx.readers import TesseractReader, char_accuracy
from optictx.renderers import RenderConfig
from optictx.tiers import Tier
from optictx.tokens import get_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=5)
    ap.add_argument("--densities", type=int, nargs="+", default=[800, 1000, 1200, 1400, 1600])
    args = ap.parse_args()
    reader, tok = TesseractReader(), get_tokenizer()
    corpora = {"prose": corpora_of()["prose"], "agent": agent_turns()}
    print("| tokens/page | font px | corpus | tokens/page seen | SMALL acc (min) | TINY acc (min) |")
    print("|---:|---:|---|---:|---|---|")
    for tpp in args.densities:
        size = font_for_density(tpp)
        for name, turns in corpora.items():
            layout, pages = full_pages(RenderConfig(font_size=size), turns, args.pages, tpp)
            images = PageImages(layout)
            acc = {}
            for tier in (Tier.SMALL, Tier.TINY):
                got = images.read(reader, pages, tier)
                acc[tier] = [char_accuracy(p.text, g) for p, g in zip(pages, got)]
            seen = statistics.mean(tok.count(p.text) for p in pages)
            cells = " | ".join(f"{statistics.mean(a):.2%} ({min(a):.2%})" for a in acc.values())
            print(f"| {tpp} | {size} | {name} | {seen:.0f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
