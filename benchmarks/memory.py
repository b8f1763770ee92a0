"""Memory costs: building a 100k-token memory vs the rendering floor, context() latency on
1,000 sealed pages, and the cost of one more add as history grows.

    python benchmarks/memory.py [--tokens 100000] [--corpus SESSIONS/swe-agent-ctf] [--quick]

1. Floor: every page of the conversation drawn once by a bare Pillow loop (benchmarks/render.py's
   baseline). Ours: Memory.add turn by turn, context() under a budget that keeps every page as an
   image, and every page image materialised at its tier. Same pages, same run. With --corpus,
   also on real sessions (a JSONL file or folder), one after another.
2. context() on a memory with 1,000 sealed pages (images not touched: they are lazy and cached).
3. Mean time of 200 adds after the memory already holds N turns, for N = 100, 1k, 10k.
4. An agent loop's turn: add() + context() + to_openai() (every page PNG-encoded, as sent), with
   the open page sent as text (the default) vs as an image (`AgeLadder(unsealed=None)`, the
   baseline): an open page that changes every turn is drawn and encoded again every turn.
5. The same turn with the legibility gate on (`LegibilityGate(ReflexReader())`) against off,
   over a whole session from its first turn (every page read is in the timed turns; reads are
   paid when a page first appears sealed in a context). With --gate-only, only this part.
"""

from __future__ import annotations

import argparse
from collections import Counter

from _common import best_of, clock, conversation_of
from render import bare_pillow

from optictx import AgeLadder, Budget, Memory
from optictx.eval.fidelity import jsonl_corpus


def build(msgs, budget: int) -> tuple[Memory, float]:
    t0 = clock()
    mem = Memory(budget=Budget(tokens=budget), keep_recent=4, verbatim=False)  # pages, not the text as it came
    for m in msgs:
        mem.add(m)
    ctx = mem.context()
    for seg in ctx.pages:
        _ = seg.image
    return mem, clock() - t0


def floor_and_build(msgs: list[dict], repeat: int) -> None:
    probe = Memory(budget=Budget(tokens=10**7))
    for m in msgs:
        probe.add(m)
    pages = probe.pages
    text_tokens = probe.stats()["text_tokens"]
    budget = 10**7  # room for every page as an image at its age's tier, so every page is drawn
    floors, runs = [], []
    for _ in range(repeat):  # interleaved: this machine drifts by tens of percent between runs
        floors.append(best_of(lambda: [bare_pillow(p.lines, probe.layout) for p in pages], 1))
        runs.append(build(msgs, budget))
    floor = min(floors)
    mem, ours = min(runs, key=lambda r: r[1])
    ctx = mem.context()
    imaged = sum(1 for s in ctx.pages if s.tier.is_image)
    assert not ctx.gone and mem.images.renders == imaged, "every imaged page drawn exactly once"
    chars = sum(len(t.text) for t in probe.transcript())
    print(f"1. {len(msgs)} turns, {chars:,} characters, {text_tokens} text tokens, {len(pages)} pages "
          f"({mem.images.renders} renders, tiers {ctx.report()['pages']})")
    print(f"   floor (bare Pillow, every page once): {floor:6.2f} s")
    print(f"   optictx add + context + page images : {ours:6.2f} s  -> {ours / floor:.2f}x (target <= 1.0x)")


def context_latency(pages_wanted: int) -> None:
    mem = Memory(budget=Budget(tokens=8192), keep_recent=4, tokens_per_page=1000)
    tasks = 0
    while sum(p.sealed for p in mem.pages) < pages_wanted:
        for m in conversation_of(20_000)[1:]:
            mem.add(m)
        tasks += 1
    n = sum(p.sealed for p in mem.pages)
    mem.context()  # warm
    t = best_of(mem.context, 20)
    print(f"2. context() with {n} sealed pages ({len(mem)} turns): {t * 1000:.2f} ms (target < 20 ms)")


def add_curve(sizes: list[int]) -> None:
    msgs = conversation_of(2_000_000)
    mem = Memory(budget=Budget(tokens=8192), keep_recent=4)
    done = 0
    print("3. mean add() after N turns:")
    for n in sizes:
        while done < n:
            mem.add(msgs[done % len(msgs)])
            done += 1
        t0 = clock()
        for k in range(200):
            mem.add(msgs[(done + k) % len(msgs)])
        done += 200
        print(f"   N={n:>6}: {(clock() - t0) / 200 * 1e6:8.1f} us/add")


def agent_loop(turns: int) -> None:
    msgs = conversation_of(200_000)
    warm, loop = msgs[:300], msgs[300 : 300 + turns]
    mems = {name: Memory(budget=Budget(tokens=8192), keep_recent=4, ladder=ladder)
            for name, ladder in (("open page as text", AgeLadder()), ("as an image", AgeLadder(unsealed=None)))}
    times: dict[str, float] = dict.fromkeys(mems, 0.0)
    for mem in mems.values():
        for m in warm:
            mem.add(m)
        mem.context().to_openai()
    for m in loop:  # interleaved: both see the same machine at the same moment
        for name, mem in mems.items():
            t0 = clock()
            mem.add(m)
            mem.context().to_openai()
            times[name] += clock() - t0
    text, image = (times[n] / len(loop) * 1000 for n in mems)
    print(f"4. agent loop turn (add + context + to_openai), {len(loop)} turns after {len(warm)}: "
          f"open page as text {text:.1f} ms, as an image {image:.1f} ms -> {image / text:.2f}x")


def gate_loop(turns: int, max_cer: float = 0.02) -> None:
    import torch

    from optictx import LegibilityGate
    from optictx.models import ReflexReader

    torch.set_num_threads(1)  # the reader on one core: CPU time is then the work, not threads waiting
    msgs = conversation_of(200_000)[:turns]
    gate = LegibilityGate(ReflexReader(), max_cer=max_cer)
    mems = {"gate off": Memory(budget=Budget(tokens=8192), keep_recent=4),
            "gate on": Memory(budget=Budget(tokens=8192), keep_recent=4, gate=gate)}
    times: dict[str, float] = dict.fromkeys(mems, 0.0)
    for m in msgs:
        for name, mem in mems.items():
            t0 = clock()
            mem.add(m)
            mem.context().to_openai()
            times[name] += clock() - t0
    off, on = (times[n] / len(msgs) * 1000 for n in mems)
    sealed = sum(p.sealed for p in mems["gate on"].pages)
    floors = Counter(f["floor"] for p in mems["gate on"].pages if p.sealed
                     for f in [gate.measured(p.digest)] if f)
    print(f"5. agent loop turn, gate at {max_cer:.0%} CER, {len(msgs)} turns from the first ({sealed} pages sealed, "
          f"{gate.reads} page reads, floors {dict(floors)}): "
          f"gate off {off:.1f} ms, gate on {on:.1f} ms -> {on / off:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--corpus", help="real sessions too: an OpenAI-style JSONL file or a folder of them")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    ap.add_argument("--gate-only", action="store_true", help="only part 5, the gate's turn cost")
    ap.add_argument("--max-cer", type=float, default=0.02, help="part 5: the gate's threshold (default its own)")
    args = ap.parse_args()
    if args.gate_only:
        gate_loop(100 if args.quick else 800, args.max_cer)
        return
    repeat = 3 if args.quick else 5
    floor_and_build(conversation_of(args.tokens // 10 if args.quick else args.tokens), repeat)
    if args.corpus:
        turns = jsonl_corpus(args.corpus)
        floor_and_build([t.model_dump(exclude={"id"}, exclude_none=True) for t in turns], repeat)
    context_latency(100 if args.quick else 1000)
    add_curve([100, 1000] if args.quick else [100, 1000, 10_000])
    agent_loop(20 if args.quick else 100)
    gate_loop(100 if args.quick else 800, args.max_cer)


if __name__ == "__main__":
    main()
