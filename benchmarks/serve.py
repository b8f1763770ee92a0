"""`optictx serve` figures for BENCHMARKS.md, each against a baseline measured in the same run.

1. latency: added wall time per request on a 300-turn conversation vs calling the same loopback
   upstream directly, for a conversation's first request and for follow-ups (and how many page
   images a follow-up draws: at most the pages that sealed since the last request);
2. tokens: input tokens sent upstream vs the conversation as it came, replaying real agent
   sessions request by request (each request is the history up to an assistant turn), per cost
   model, with the share of each request's tokens inside the prefix it shares with the one
   before (what a provider's prompt cache can serve);
3. legibility: Tesseract's character accuracy on the image pages each session's last request sends;
4. rps: requests per second, 8 concurrent clients on follow-ups of their own conversations.

    python benchmarks/serve.py                       # all three (about 5 minutes on 2 cores)
    python benchmarks/serve.py --part tokens --corpus SESSIONS/swe-agent-ctf
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loopback upstream the tests use

from optictx import images  # noqa: E402
from optictx.cost import get_cost_model  # noqa: E402
from optictx.pieces import Piece  # noqa: E402
from optictx.sample import sample_conversation  # noqa: E402
from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.dialect import Parsed  # noqa: E402
from optictx.serve.openai_api import OPENAI  # noqa: E402
from optictx.serve.proxy import Proxy as Fitter  # noqa: E402
from optictx.tokens import get_tokenizer  # noqa: E402

from serve_peers import Proxy, start_upstream, stop_upstream  # noqa: E402


def _post(url: str, body: dict, key: str) -> float:
    t0 = time.perf_counter()
    r = httpx.post(url, json=body, headers={"authorization": f"Bearer {key}"}, timeout=120)
    r.raise_for_status()
    return time.perf_counter() - t0


def latency(turns: int = 300, budget: int = 8192, repeat: int = 5, follow_ups: int = 12) -> None:
    state, server = start_upstream()
    proxy = Proxy(ServeConfig(upstream=state.openai_url, budget=budget, keep_recent=4))
    draws = [0]
    real = images.draw_page

    def counted(*args, **kwargs):  # a page drawn (a cached one is not drawn again)
        draws[0] += 1
        return real(*args, **kwargs)

    images.draw_page = counted
    try:
        sample = sample_conversation()
        history = sample[:turns]
        body = {"model": "deepseek-ocr", "messages": history}
        direct = [_post(state.openai_url + "/chat/completions", body, "d") for _ in range(repeat)]
        first = [_post(proxy.url + "/v1/chat/completions", body, f"first-{i}") for i in range(repeat)]
        steps, drawn = [], []
        for i in range(follow_ups):
            history = [*history, {"role": "assistant", "content": f"step {i} done"}, sample[turns + i]]
            draws[0] = 0
            steps.append(_post(proxy.url + "/v1/chat/completions", {**body, "messages": history}, "first-0"))
            drawn.append(draws[0])
        base = min(direct)
        print(f"## latency: {turns}-turn conversation, budget {budget}, deepseek-ocr, loopback upstream")
        print("| request | min ms | median ms | added over direct (min) |")
        print("|---|---:|---:|---:|")
        for name, xs in (("direct to upstream", direct), ("first of a conversation", first),
                         ("follow-up (+2 turns)", steps)):
            print(f"| {name} | {1000 * min(xs):.1f} | {1000 * statistics.median(xs):.1f} | "
                  f"{1000 * (min(xs) - base):+.1f} |")
        print(f"pages drawn per follow-up: {drawn} (max {max(drawn)})")
    finally:
        images.draw_page = real
        proxy.stop()
        stop_upstream(server)


SAMPLE = "sample (synthetic, shipped)"


def _sessions(corpus: str | None) -> dict[str, list[dict]]:
    out = {SAMPLE: sample_conversation()}
    if corpus:
        for path in sorted(Path(corpus).glob("*.jsonl")):
            out[path.stem] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def _piece_tokens(piece: Piece, cost, count) -> int:
    if piece.image is not None:
        return cost.page_tokens(piece.image.tier)
    return count(piece.text)


def replay(messages: list[dict], vision: str, budget: int) -> dict[str, float]:
    """Every request of a session through the proxy's own fitting, in process."""
    fitter = Fitter(ServeConfig(upstream="http://127.0.0.1:9/v1", budget=budget, keep_recent=4, vision=vision))
    cost, count = get_cost_model(vision), get_tokenizer().count
    original = sent = shared = worse = 0
    previous: list[tuple[str, int]] = []
    requests = 0
    try:
        for k in range(1, len(messages)):
            if messages[k]["role"] != "assistant":
                continue
            history = messages[:k]
            raw = json.dumps({"model": "m", "messages": history}).encode()
            parsed: Parsed = OPENAI.parse(json.loads(raw), raw)
            fitted = fitter.fit(OPENAI, parsed, {"authorization": "Bearer bench"})
            original += fitted.sent.original
            sent += fitted.sent.sent
            worse += fitted.sent.sent > fitted.sent.original
            ctx = fitted.context
            pieces = [(p.key, _piece_tokens(p, cost, count)) for p in ctx.pieces] if ctx else []
            run = next((i for i, (a, b) in enumerate(zip(pieces, previous)) if a[0] != b[0]),
                       min(len(pieces), len(previous)))
            shared += sum(t for _, t in pieces[:run])
            previous = pieces
            requests += 1
    finally:
        fitter.close()
    return {"requests": requests, "original": original, "sent": sent, "worse": worse,
            "saved": 1 - sent / original if original else 0.0, "cache": shared / sent if sent else 0.0}


def tokens(corpus: str | None, budgets: list[int]) -> None:
    sessions = _sessions(corpus)
    print("## tokens sent upstream vs the conversation as it came, every request of each session")
    print("| session | turns | cost model | budget | requests | input tokens as they came | sent | saved "
          "| in the prefix shared with the request before |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    totals: dict[tuple[str, str, int], list[float]] = {}
    requests = worse = 0
    for name, messages in sessions.items():
        group = "the shipped sample" if name == SAMPLE else f"{len(sessions) - 1} sessions of --corpus"
        for vision in ("openai:gpt-4o", "anthropic", "deepseek-ocr"):
            for budget in budgets:
                r = replay(messages, vision, budget)
                requests, worse = requests + r["requests"], worse + r["worse"]
                t = totals.setdefault((group, vision, budget), [0, 0, 0.0])
                t[0] += r["original"]
                t[1] += r["sent"]
                t[2] += r["cache"] * r["sent"]
                print(f"| {name} | {len(messages)} | {vision} | {budget} | {r['requests']} | {r['original']:,} | "
                      f"{r['sent']:,} | {100 * r['saved']:.1f}% | {100 * r['cache']:.1f}% |")
    print(f"\nrequests that cost more than their messages as they came: {worse} of {requests}")
    print("\n| sessions | cost model | budget | as they came | sent | saved | in a shared prefix |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (group, vision, budget), (o, s, c) in sorted(totals.items()):
        print(f"| {group} | {vision} | {budget} | {o:,} | {s:,} | {100 * (1 - s / o):.1f}% | {100 * c / s:.1f}% |")


def legibility(corpus: str | None, budget: int = 4096, vision: str = "anthropic") -> None:
    """Tesseract on the image pages each session's last request sends (the pages a reader gets)."""
    from optictx import Memory
    from optictx.readers import TesseractReader, char_accuracy

    reader = TesseractReader()
    by_tier: dict[str, list[float]] = {}
    print(f"## what the pages say: Tesseract on the image pages of each session's last request ({vision}, "
          f"budget {budget})")
    print("| session | image pages (tier: n) | character accuracy |")
    print("|---|---|---:|")
    for name, messages in _sessions(corpus).items():
        last = max(k for k, m in enumerate(messages) if m["role"] == "assistant")
        mem = Memory(keep_recent=4, budget=budget)
        for m in messages[:last]:
            mem.add(m)
        pages = [p for p in mem.context(vision=vision).pages if p.tier.is_image]
        accs = [char_accuracy(p.text, reader.read(p.image, p.boxes)) for p in pages]
        for p, a in zip(pages, accs):
            by_tier.setdefault(p.tier.value, []).append(a)
        tiers = ", ".join(f"{t}: {n}" for t, n in sorted(Counter(p.tier.value for p in pages).items()))
        print(f"| {name} | {tiers or 'none'} | {100 * statistics.mean(accs):.1f}% |" if accs else
              f"| {name} | none | - |")
    print("\n| tier | pages | mean character accuracy |\n|---|---:|---:|")
    for tier, accs in sorted(by_tier.items()):
        print(f"| {tier} | {len(accs)} | {100 * statistics.mean(accs):.1f}% |")


def rps(clients: int = 8, seconds: float = 20.0, budget: int = 8192) -> None:
    state, server = start_upstream()
    proxy = Proxy(ServeConfig(upstream=state.openai_url, budget=budget, keep_recent=4))
    sample = sample_conversation()
    try:
        def load(url: str, distinct: bool) -> tuple[int, float]:
            done = [0] * clients
            stop = time.perf_counter() + seconds

            def client(n: int) -> None:
                history = list(sample[: 100 + n])
                with httpx.Client(timeout=120) as http:
                    while time.perf_counter() < stop:
                        if distinct:
                            history = [*history, {"role": "assistant", "content": f"{n} ok {done[n]}"},
                                       {"role": "user", "content": f"client {n} step {done[n]}"}]
                        http.post(url, json={"model": "deepseek-ocr", "messages": history},
                                  headers={"authorization": f"Bearer c{n}"}).raise_for_status()
                        done[n] += 1
            t0 = time.perf_counter()
            threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sum(done), time.perf_counter() - t0

        n0, t0 = load(state.openai_url + "/chat/completions", distinct=True)
        n1, t1 = load(proxy.url + "/v1/chat/completions", distinct=True)
        print(f"## {clients} concurrent clients, each on follow-ups of its own conversation (100+ turns), "
              f"budget {budget}")
        print("| path | requests | seconds | requests/s | ms per request per client |")
        print("|---|---:|---:|---:|---:|")
        for name, n, t in (("direct to upstream", n0, t0), ("through optictx serve", n1, t1)):
            print(f"| {name} | {n} | {t:.1f} | {n / t:.1f} | {1000 * t * clients / n:.0f} |")
    finally:
        proxy.stop()
        stop_upstream(server)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["latency", "tokens", "legibility", "rps", "all"], default="all")
    ap.add_argument("--corpus", help="a folder of OpenAI-style JSONL sessions to replay beside the sample")
    ap.add_argument("--budgets", type=int, nargs="+", default=[4096, 16384])
    args = ap.parse_args()
    if args.part in ("latency", "all"):
        latency()
    if args.part in ("tokens", "all"):
        tokens(args.corpus, args.budgets)
    if args.part in ("legibility", "all"):
        legibility(args.corpus)
    if args.part in ("rps", "all"):
        rps()


if __name__ == "__main__":
    main()
