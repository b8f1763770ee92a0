"""The floor under the bill: what the cheapest possible append-only plan of this design would
cost, against sending each recorded session as it came, under Anthropic's cache rules.

The floor keeps what optictx keeps as text (the system prompt and tools, read from the cache on
every call; every new turn's first write at 1.25x) and pretends the rest is free of planning
overheads: every turn goes onto pages at TINY the call after it is written (no recent turns as
text, no tail written again at a compaction, no calls as they came before the first one), each
page written once at 1.25x and then read at 0.1x. Its one measured input is the page density:
the text tokens a sealed page of that session holds against the 350 image tokens a TINY page
costs on Claude. So no plan with these pages and these invariants can cost less; what separates
optictx's bill from the floor is the price of appending (recent turns, compactions, the first
calls as they came).

    python benchmarks/bill_floor.py CORPUS_DIR [--density-scale 1.3]

`--density-scale`: the floor if pages held that many times the text they hold now.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from optictx import Memory
from optictx.cost import get_cost_model
from optictx.eval.bodies import blocks_of
from optictx.eval.requests import client_body
from optictx.eval.sessions import load_session
from optictx.promptcache import CACHE_PRICING, PromptCache, Request
from optictx.tiers import Tier


def floor(path: Path, scale: float) -> tuple[str, float, float, float]:
    """(session, pass-through cost, floor cost, text tokens per image token of its pages)."""
    session = load_session(path)
    cost = get_cost_model("anthropic")
    pricing = CACHE_PRICING["anthropic"]
    memory = Memory(vision=cost)
    for m in session.messages:
        if m.get("role") != "system":
            memory.add(m)
    sealed = [p for p in memory.pages if p.sealed]  # the open page is not full
    page = cost.page_tokens(Tier.TINY)
    density = scale * (sum(p.tokens or 0 for p in sealed) / (page * len(sealed)) if sealed else 1.0)
    plain, counted = PromptCache(pricing), {}
    passthrough = cheapest = 0.0
    fixed = None
    for k in range(len(session.calls)):
        blocks = blocks_of("anthropic", client_body(session, k, "anthropic", "claude-opus-4-5"), cost, counted)
        fixed = blocks[0].tokens if fixed is None else fixed  # the system prompt (and tools)
        bill = plain.bill(Request(blocks, k * 60.0))
        passthrough += bill.cost
        history = max(0, bill.read - fixed)
        cheapest += (pricing.read * (fixed + history / density)
                     + pricing.write * bill.written * (1 + 1 / density))  # as text, then as a page
    return session.name, passthrough, cheapest, density


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("--density-scale", type=float, default=1.0)
    args = ap.parse_args()
    total = [0.0, 0.0]
    for path in sorted(Path(args.corpus).glob("*.jsonl")):
        name, passthrough, cheapest, density = floor(path, args.density_scale)
        total[0] += passthrough
        total[1] += cheapest
        print(f"{name:45} floor {cheapest / passthrough:.3f}x  ({density:.2f} text tokens per image token)", flush=True)
    print(f"\n{args.corpus}: floor {total[1] / total[0]:.3f}x pass-through "
          f"(Anthropic's rules, density x{args.density_scale})")


if __name__ == "__main__":
    main()
