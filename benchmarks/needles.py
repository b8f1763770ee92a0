"""7-digit number needles: do they survive the page images, and does the factsheet keep them?

Builds a memory of `--turns` prose turns, each hiding one random 7-digit number ("The code for
vault 12 is 4830172."), then
1. optical only: every page read back by Tesseract at SMALL and TINY; a needle counts if its
   exact digits appear in the reading of a page that holds its turn;
2. with the factsheet: the default context under a budget that leaves those pages at TINY; a
   needle counts if its digits reach the context as text (factsheet or native turns).

    python benchmarks/needles.py [--turns 40] [--seed 1]
"""

from __future__ import annotations

import argparse
import random

from optictx import Budget, Memory, Tier
from optictx.readers import TesseractReader
from optictx.sample import prose_corpus


def needle_turns(n: int, seed: int) -> list[tuple[dict, str]]:
    """`n` prose turns, each with the 7-digit number it hides."""
    rng, prose = random.Random(seed), prose_corpus(chunk=2200)
    out = []
    for i in range(n):
        number = str(rng.randint(1_000_000, 9_999_999))
        text = prose[i % len(prose)]
        cut = rng.randint(0, len(text))
        out.append(({"role": "user", "content": f"{text[:cut]} The code for vault {i} is {number}. {text[cut:]}"},
                    number))
    return out


def build(n: int, seed: int) -> tuple[Memory, dict[int, str]]:
    mem = Memory(budget=Budget(tokens=100_000), keep_recent=2, verbatim=False)  # what pages keep
    return mem, {mem.add(turn).id: number for turn, number in needle_turns(n, seed)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    mem, needles = build(args.turns, args.seed)
    pages = [p for p in mem.pages if p.sealed]
    on_pages = {tid: num for tid, num in needles.items() if any(tid in p.turn_ids for p in pages)}
    reader = TesseractReader()
    print(f"{len(on_pages)} needles on {len(pages)} sealed pages (1000 tokens/page, 21 px)")
    for tier in (Tier.SMALL, Tier.TINY):
        reads = mem.images.read(reader, pages, tier)
        found = sum(1 for tid, num in on_pages.items()
                    if any(num in r for p, r in zip(pages, reads) if tid in p.turn_ids))
        print(f"optical only, {tier.value:5}: {found}/{len(on_pages)} exact ({found / len(on_pages):.0%})")
    ctx = mem.context(budget=Budget(tokens=8 * len(pages) * 73 + 2000))
    tiers = ctx.report()["pages"]
    text = ctx.factsheet + "".join(s.text for s in ctx.text_segments if s.kind == "recent")
    kept = sum(1 for num in on_pages.values() if num in text)
    print(f"with the factsheet (pages {tiers}, {ctx.report()['factsheet_tokens']} factsheet tokens, "
          f"context {ctx.tokens} tokens): {kept}/{len(on_pages)} as text ({kept / len(on_pages):.0%})")


if __name__ == "__main__":
    main()
