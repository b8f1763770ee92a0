"""Readers on the same pages: Tesseract 5, RapidOCR (PP-OCRv6 small, neural) and the reflex
reader (optictx.models.ReflexReader, trained on optictx's own renderer), each given the
renderer's line boxes, on pages of prose, the shipped synthetic agent sample and, with --corpus,
real agent sessions (OpenAI-style JSONL files), and prose hiding a 7-digit number per turn
(benchmarks/needles.py). Per tier: character accuracy against the page's
own text, exact lines (the page's lines found verbatim among the lines read), 7-digit numbers
and hex ids (8+ hex digits) found, and wall ms per page (every reader on the same 2 cores, one
after the other; a reader's cache never answers, each page is read once); first, each reader's
peak memory, in a process of its own.

    python benchmarks/readers.py --corpus SESSIONS/swe-agent-ctf [--pages 4] [--readers tesseract reflex]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from needles import needle_turns

from optictx import Memory, Tier
from optictx.readers import RapidOcrReader, TesseractReader, char_accuracy
from optictx.sample import prose_corpus, sample_conversation

NUMBER = re.compile(r"(?<!\d)\d{7}(?!\d)")
HEX = re.compile(r"(?<![0-9a-f])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}(?![0-9a-f])")


def found(pattern: re.Pattern[str], truth: str, read: str) -> tuple[int, int]:
    """(how many of the page's matches the reader's text holds too, how many there are)."""
    want, got = Counter(pattern.findall(truth)), Counter(pattern.findall(read))
    return sum(min(n, got[k]) for k, n in want.items()), sum(want.values())


def exact_lines(truth: str, read: str) -> tuple[int, int]:
    want = Counter(ln.strip() for ln in truth.splitlines() if ln.strip())
    got = Counter(ln.strip() for ln in read.splitlines() if ln.strip())
    return sum(min(n, got[k]) for k, n in want.items()), sum(want.values())


def make_readers(names: list[str], weights: str | None = None) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in names:
        if name == "tesseract":
            out["Tesseract 5"] = TesseractReader(cache_size=1)
        elif name == "rapidocr":
            out["RapidOCR"] = RapidOcrReader(cache_size=1)
        else:
            from optictx.models import ReflexReader

            out["reflex"] = ReflexReader(weights)
    return out


def corpora(folder: str | None) -> dict[str, list[dict]]:
    out = {"prose": [{"role": "user", "content": c} for c in prose_corpus()],
           "agent sample (synthetic)": sample_conversation(),
           "7-digit needles in prose": [turn for turn, _ in needle_turns(60, seed=1)]}
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


def peak_memory(name: str, weights: str | None) -> None:
    """Run in a process of its own: the growth of peak RSS from loading reader `name` and
    reading four sample pages at TINY, over a process that built the same pages (MiB)."""
    mem, pages = pages_of(sample_conversation(), 4)
    images = [(mem.images.at(p, Tier.TINY), mem.images.boxes(p, Tier.TINY)) for p in pages]
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if name == "reflex":
        import torch  # noqa: F401  # counted apart: a process that has torch already pays nothing here
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reader = next(iter(make_readers([name], weights).values()))
    for image, boxes in images:
        reader.read(image, boxes)  # type: ignore[attr-defined]
    print((before - start) / 1024, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="a folder of OpenAI-style JSONL sessions")
    ap.add_argument("--pages", type=int, default=4)
    ap.add_argument("--tiers", nargs="+", default=["small", "tiny"])
    ap.add_argument("--readers", nargs="+", default=["tesseract", "rapidocr", "reflex"],
                    choices=["tesseract", "rapidocr", "reflex"])
    ap.add_argument("--weights", help="a reflex model file (default: the shipped one)")
    ap.add_argument("--torch-threads", type=int, help="threads for the reflex reader's torch (1: Tesseract's one core)")
    ap.add_argument("--peak", help=argparse.SUPPRESS)  # one reader's peak memory, in this process
    args = ap.parse_args()
    if args.peak:
        peak_memory(args.peak, args.weights)
        return
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    for name in args.readers:  # first, each in a process of its own: nothing loaded yet counts
        extra = ["--weights", args.weights] if args.weights else []
        torch_mib, own = map(float, subprocess.run([sys.executable, __file__, "--peak", name, *extra],
                                                   capture_output=True, text=True, check=True).stdout.split()[-2:])
        beside = f" (and +{torch_mib:.0f} MiB to import torch)" if torch_mib else ""
        print(f"peak memory of {name}, loading it and reading 4 pages at TINY: +{own:.0f} MiB RSS{beside}")
    readers = make_readers(args.readers, args.weights)
    print("| corpus | tier | pages | reader | character accuracy (mean, min) | exact lines | 7-digit numbers | "
          "hex ids | ms per page, min (per line) |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|")
    for name, messages in corpora(args.corpus).items():
        mem, pages = pages_of(messages, args.pages)
        tokens = statistics.mean(mem.tokenizer.count(p.text) for p in pages)
        for tier in (Tier(t) for t in args.tiers):
            for reader_name, reader in readers.items():
                accs, times, lines, numbers, hexes = [], [], [0, 0], [0, 0], [0, 0]
                for p in pages:
                    image, boxes = mem.images.at(p, tier), mem.images.boxes(p, tier)
                    t0 = time.perf_counter()
                    read = reader.read(image, boxes)  # type: ignore[attr-defined]
                    times.append(time.perf_counter() - t0)
                    accs.append(char_accuracy(p.text, read))
                    for total, (k, n) in ((lines, exact_lines(p.text, read)), (numbers, found(NUMBER, p.text, read)),
                                          (hexes, found(HEX, p.text, read))):
                        total[0] += k
                        total[1] += n
                share = [f"{100 * k / n:.1f}% of {n}" if n else "-" for k, n in (lines, numbers, hexes)]
                per_line = 1000 * min(t / max(1, len(mem.images.boxes(p, tier))) for t, p in zip(times, pages))
                print(f"| {name} ({tokens:.0f} tokens/page) | {tier.value} | {len(pages)} | {reader_name} | "
                      f"{100 * statistics.mean(accs):.2f}%, {100 * min(accs):.2f}% | {' | '.join(share)} | "
                      f"{1000 * min(times):.0f} ({per_line:.2f} per line) |", flush=True)


if __name__ == "__main__":
    main()
