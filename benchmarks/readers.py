"""Two readers on the same pages: Tesseract 5 and RapidOCR (PP-OCRv6 small, neural), each given
the renderer's line boxes, on pages of prose, the shipped synthetic agent sample and, with
--corpus, real agent sessions (OpenAI-style JSONL files). Character accuracy against the page's
own text, and wall ms per page (both readers on the same 2 cores, one after the other).

    python benchmarks/readers.py --corpus SESSIONS/swe-agent-ctf [--pages 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from optictx import Memory, Tier
from optictx.readers import RapidOcrReader, TesseractReader, char_accuracy
from optictx.sample import prose_corpus, sample_conversation


def corpora(folder: str | None) -> dict[str, list[dict]]:
    out = {"prose": [{"role": "user", "content": c} for c in prose_corpus()],
           "agent sample (synthetic)": sample_conversation()}
    if folder:  # the real sessions one after another: one long stream of agent traffic
        out["real agent sessions"] = [json.loads(line) for path in sorted(Path(folder).glob("*.jsonl"))
                                      for line in path.read_text().splitlines() if line.strip()]
    return out


def pages_of(messages: list[dict], n: int) -> tuple[Memory, list]:
    mem = Memory(keep_recent=0, verbatim=False)
    for m in messages:
        mem.add(m)
    sealed = [p for p in mem.pages if p.sealed]
    step = max(1, len(sealed) // n)  # spread over the corpus, not its first pages only
    return mem, sealed[::step][:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="a folder of OpenAI-style JSONL sessions")
    ap.add_argument("--pages", type=int, default=4)
    ap.add_argument("--tiers", nargs="+", default=["small", "tiny"])
    args = ap.parse_args()
    readers = {"Tesseract 5": TesseractReader(), "RapidOCR": RapidOcrReader()}
    print("| corpus | tier | pages | reader | character accuracy (mean, min) | ms per page |")
    print("|---|---|---:|---|---:|---:|")
    for name, messages in corpora(args.corpus).items():
        mem, pages = pages_of(messages, args.pages)
        tokens = statistics.mean(mem.tokenizer.count(p.text) for p in pages)
        for tier in (Tier(t) for t in args.tiers):
            for reader_name, reader in readers.items():
                accs, times = [], []
                for p in pages:
                    image, boxes = mem.images.at(p, tier), mem.images.boxes(p, tier)
                    t0 = time.perf_counter()
                    accs.append(char_accuracy(p.text, reader.read(image, boxes)))
                    times.append(time.perf_counter() - t0)
                print(f"| {name} ({tokens:.0f} tokens/page) | {tier.value} | {len(pages)} | {reader_name} | "
                      f"{100 * statistics.mean(accs):.2f}%, {100 * min(accs):.2f}% | "
                      f"{1000 * statistics.median(times):.0f} |")


if __name__ == "__main__":
    main()
