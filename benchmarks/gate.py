"""What the legibility gate costs and what it changes, on the shipped sample conversation.

The same memory is built twice, without and with `LegibilityGate(reader, max_cer)` (Tesseract,
or with --reader reflex the shipped reflex reader); for each: the first context() (the gate reads
every sealed page then), a second one (floors cached), the page tiers sent, the context tokens,
and how many sent pages read worse than the threshold at their tier, by the gate's reader (the
gate's job is to make that zero) and, for the reflex gate, by Tesseract too (an independent view).

    python benchmarks/gate.py [--max-cer 0.03] [--budget 8192] [--reader tesseract|reflex]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from optictx import Budget, LegibilityGate, Memory
from optictx.readers import TesseractReader, char_accuracy
from optictx.sample import sample_conversation


def run(gate: LegibilityGate | None, budget: int) -> tuple[Memory, dict]:
    mem = Memory(budget=Budget(tokens=budget), gate=gate)
    for m in sample_conversation():
        mem.add(m)
    t0 = time.perf_counter()  # wall time: the reads run on threads, outside the GIL
    ctx = mem.context()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    mem.context()
    second = time.perf_counter() - t0
    return mem, {"ctx": ctx, "first": first, "second": second}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-cer", type=float, default=0.03)
    ap.add_argument("--budget", type=int, default=8192)
    ap.add_argument("--reader", choices=["tesseract", "reflex"], default="tesseract")
    args = ap.parse_args()
    judges = {"Tesseract": TesseractReader()}
    if args.reader == "reflex":
        from optictx.models import ReflexReader

        judges = {"reflex": ReflexReader(), **judges}
    reader = next(iter(judges.values()))
    for label, gate in (("no gate", None), (f"gate, max CER {args.max_cer:.0%}", LegibilityGate(reader, args.max_cer))):
        mem, r = run(gate, args.budget)
        ctx = r["ctx"]
        sent = [s for s in ctx.pages if s.tier.is_image and s.page.sealed]
        bad = []
        for name, judge in judges.items():
            reads = judge.read_batch([s.image for s in sent], [s.boxes for s in sent])
            over = sum(1 for s, text in zip(sent, reads) if 1 - char_accuracy(s.text, text) > args.max_cer)
            bad.append(f"{over}/{len(sent)} by {name}")
        tiers = Counter(s.tier.value for s in ctx.pages)
        sealed = [p for p in mem.pages if p.sealed]
        extra = f", {gate.reads} page reads" if gate else ""
        print(f"{label}: first context {r['first']:.2f} s{extra}, second {r['second'] * 1000:.1f} ms; "
              f"{len(sealed)} sealed pages; sent {dict(tiers)}, {ctx.tokens} tokens; "
              f"sealed image pages over the threshold: {', '.join(bad)}")
        if gate:
            floors = Counter(f.value for f in gate.floors(sealed, mem.images))
            print(f"  floors: {dict(floors)}")


if __name__ == "__main__":
    main()
