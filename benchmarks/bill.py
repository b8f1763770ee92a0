"""The bill, side by side: every request of every recorded session, sent as it came, through
optictx at its defaults (the proxy's own path, `optictx bill`), and through pxpipe where it is
set up, each priced by the provider's prompt-cache rules (requests 60 s apart; `--gap-seconds
60,60,60,900`: those gaps in turn, a pause every fourth request; pxpipe's rows stay 60 s apart).

    python benchmarks/bill.py CORPUS_DIR [CORPUS_DIR ...] [--providers anthropic openai:gpt-4o ...]
        [--pxpipe DIR] [--jobs 2] [--budget N] [--gap-seconds 60] [--risk R] [--no-words]
        [--image-instructions] [--client-front BODY.json] [--model claude-opus-5-5]

Each request is priced at its model's own cache prices (genai-prices' data: Claude Opus 5.5
reads its cache at 0.05x, older Claude models at 0.1x), and the planner decides at those prices.
`--model NAME`: every session sent as that model (default: the model each was recorded with).
`--decide-at family`: the planner decides at the family's usual multipliers (as before), the bill
still at the model's prices: what deciding at the model's own prices changes.

`--pages before`: optictx with the pages as they were before "Pages that keep a program's shape"
(1280-px pages of 22-character columns cut at a column's last character, 8-bit PNG), for a
side-by-side run; `after` (the default): as they are. `--render FILE`: every memory's pages at
that RenderConfig (a geometry to try).

`--rule lindy`: the paid-compaction rule replaced by one expected value (issue "The bill,
promised"): the calls still to come from a Pareto (Lindy) prior on session lengths, its one
parameter fitted by maximum likelihood on the lengths of the even-numbered sessions (by name),
counted up to the budget as `horizon` and `first_horizon` are, no `margin`, `risk` the one hedge.
`--halves`: the totals over the even- and odd-numbered sessions too (fit on one, judge on the other).

`--no-words`: the person's words drawn on pages like any other turn (as before "Pages the model
can open"; the proxy's `--no-words`), to price keeping them as text.

`--image-instructions`: the proxy's option, the system prompt's prose and the tools'
descriptions drawn on pages. `--client-front BODY.json`: a request body a real client sent (its
`system` and `tools`, captured from `claude -p` against a local upstream: they cannot be
committed) in place of the recorded sessions' stand-in (the corpus' system prompt is a text of
the size the first call's usage left for it, one paragraph repeated).

`--pxpipe DIR`: a pxpipe laid out by its `setup.sh DIR` (a benchmark peer, never a dependency):
each Anthropic request goes through its transform (node) and is priced the same way. Prints one
markdown table per corpus and provider, and the sessions above 1.0x.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

from optictx.cost import get_cost_model
from optictx.eval.bill import gaps_arg, replay, risk_arg
from optictx.eval.bodies import blocks_of
from optictx.eval.requests import client_body
from optictx.eval.sessions import Session, load_session
from optictx.promptcache import PromptCache, Request


def _pages(render: Any = None) -> None:
    """Every memory of this process and the workers it forks draws its pages at `render`; with
    none, as they were before "Pages that keep a program's shape" (the old geometry and layout,
    8-bit PNG)."""
    import optictx.export
    import optictx.memory
    from optictx import images
    from optictx.renderers import RenderConfig

    if render is None:
        render = RenderConfig(code_layout="chars", compact_indent=False, greys=256, repeats=False)
        images.ENCODING.clear()
        images.ENCODING.update({"format": "PNG", "compress_level": 1})
        optictx.export.MEDIA_TYPE = "image/png"  # type: ignore[misc]
    optictx.memory.as_render = lambda given, vision=None, budget=None: given or render  # type: ignore[assignment]


def _family_decides() -> None:
    """The proxy's planner at each family's usual multipliers, in this process and its workers."""
    import optictx.serve.proxy as proxy
    from optictx.money import for_model
    from optictx.promptcache import pricing_for

    proxy.rules = lambda vision, model, ttl="5m": for_model(pricing_for(vision), None, ttl)  # type: ignore[assignment]


def _lindy(files: list[str]) -> float:
    """The Pareto tail index of the even-numbered sessions' lengths in calls (maximum likelihood),
    and `prefix._gain` replaced by the expected value it gives, in this process and its workers."""
    import math

    import optictx.prefix as prefix

    lengths = [len(load_session(f).calls) for f in sorted(files)[::2]]
    alpha = len(lengths) / sum(math.log(n / min(lengths)) for n in lengths)

    def expected_calls(n: float, cap: float) -> float:  # the integral of (n / (n + r)) ** alpha over [0, cap]
        if math.isinf(cap):
            return math.inf if alpha <= 1 else n / (alpha - 1)
        if abs(alpha - 1) < 1e-9:
            return n * math.log1p(cap / n)
        return n / (1 - alpha) * ((1 + cap / n) ** (1 - alpha) - 1)

    def gain(pricing: Any, policy: Any, state: Any, append: Any, cand: Any, cost_append: float, cost_cand: float,
             limit: int) -> float:
        growth = (append.tokens - state.base) / max(1, state.since)
        ahead = expected_calls(max(1, state.calls), (limit - append.tokens) / growth if growth > 0 else math.inf)
        saved = pricing.steady(append.tokens) - pricing.steady(cand.tokens)
        return 0.0 if saved <= 0 else 1e18 if math.isinf(ahead) else ahead * saved - (cost_cand - cost_append)

    prefix._gain = gain  # type: ignore[assignment]
    return alpha


def _ours(job: tuple[str, str, int | None, tuple[float, ...], float | None, bool, bool, str | None, str | None]
          ) -> dict[str, Any]:
    path, provider, budget, gaps, risk, words, imaged, front, model = job
    t0 = time.perf_counter()
    session = load_session(path)
    if front is not None:
        session = _fronted(session, json.loads(Path(front).read_text()))
    bill = replay(session, provider, budget=budget, gap=gaps, risk=risk, words=words, image_instructions=imaged,
                  model=model)
    s = bill.summary()
    return {**s, "seconds": round(time.perf_counter() - t0, 1), "ms_per_request": round(
        1000 * (time.perf_counter() - t0) / max(1, s["requests"]), 1), "passthrough": bill.passthrough,
        "optictx": bill.optictx}


def _fronted(session: Session, body: dict[str, Any]) -> Session:
    """`session` as sent with a real client's system prompt and tools (`--client-front`)."""
    front = {k: body[k] for k in ("system", "tools") if k in body}
    system = front.get("system")
    if isinstance(system, str):
        front["system"] = [{"type": "text", "text": system}]
    return dataclasses.replace(session, front=front, system_tokens=0)


def _pxpipe(job: tuple[str, str, str | None]) -> dict[str, Any]:
    """pxpipe's bill for one session under Anthropic's rules: each client body through its
    transform, then priced like ours (the bodies with `--client-front`'s, where given)."""
    path, peer, front = job
    session = load_session(path)
    if front is not None:
        session = _fronted(session, json.loads(Path(front).read_text()))
    cost = get_cost_model("anthropic")
    cache, plain, counted = PromptCache("anthropic"), PromptCache("anthropic"), {}
    theirs = ours_plain = 0.0
    tokens = [0, 0]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.json"
        for k in range(len(session.calls)):
            body = client_body(session, k, "anthropic", "claude-fable-5")
            src.write_text(json.dumps(body))
            out = subprocess.run(["node", str(Path(peer) / "transform.mjs"), str(src), "claude-fable-5"],
                                 capture_output=True, check=True).stdout
            sent = json.loads(out)
            a = plain.bill(Request(blocks_of("anthropic", body, cost, counted), k * 60.0))
            b = cache.bill(Request(blocks_of("anthropic", sent, cost, counted), k * 60.0,
                                   automatic="cache_control" in sent))
            ours_plain += a.cost
            theirs += b.cost
            tokens[0] += a.tokens
            tokens[1] += b.tokens
    return {"session": session.name, "passthrough": ours_plain, "pxpipe": theirs,
            "ratio": round(theirs / ours_plain, 3) if ours_plain else 1.0, "tokens": tokens}


def _balanced(pool: Any, work: Any, files: list[str], rest: tuple[Any, ...]) -> list[dict[str, Any]]:
    """`work((file, *rest))` for every file, in the files' order, the longest sessions handed out
    first and one at a time: `pool.map`'s chunks once left one process replaying a chunk of long
    sessions for half an hour while the other sat idle."""
    longest = sorted(files, key=lambda f: -Path(f).stat().st_size)
    done = dict(zip(longest, pool.imap(work, [(f, *rest) for f in longest], chunksize=1)))
    return [done[f] for f in files]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpora", nargs="+")
    ap.add_argument("--providers", nargs="+", default=["anthropic", "openai:gpt-4o", "openai:gpt-4.1", "openai:gpt-5"])
    ap.add_argument("--pxpipe", help="a pxpipe laid out by its setup.sh (Anthropic rules only)")
    ap.add_argument("--budget", type=int)
    ap.add_argument("--gap-seconds", type=gaps_arg, default=(60.0,),
                    help="seconds between requests; a list (60,60,900) in turn")
    ap.add_argument("--risk", type=risk_arg, default=0.1,
                    help="the proxy's --risk (Policy.risk; default 0.1, as the proxy's; none: no bound)")
    ap.add_argument("--no-words", dest="words", action="store_false",
                    help="the person's words on pages like any turn (default: they stay text, as the proxy keeps them)")
    ap.add_argument("--image-instructions", action="store_true",
                    help="the proxy's --image-instructions: instructions drawn on pages")
    ap.add_argument("--client-front", help="a real client's request body: its system prompt and tools replace "
                    "the sessions' stand-in")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write every session's figures here")
    ap.add_argument("--pages", choices=["before", "after"], default="after",
                    help="optictx's pages as they are (after), or as they were (before)")
    ap.add_argument("--render", help="a RenderConfig JSON file every memory draws its pages at (a geometry to try)")
    ap.add_argument("--rule", choices=["today", "lindy"], default="today", help="the paid-compaction rule")
    ap.add_argument("--halves", action="store_true", help="totals over even- and odd-numbered sessions too")
    ap.add_argument("--model", help="every session sent as this model, at its prices (default: each one's own)")
    ap.add_argument("--decide-at", choices=["model", "family"], default="model",
                    help="the prices the planner decides at: the model's own (default, as the proxy does) or its "
                    "family's usual multipliers (as before per-model prices; the bill is at the model's either way)")
    args = ap.parse_args()
    if args.decide_at == "family":
        _family_decides()
    if args.rule == "lindy":
        files = [str(p) for corpus in args.corpora for p in Path(corpus).glob("*.jsonl")]
        print(f"Lindy prior: alpha {_lindy(files):.3f}, fitted on the even-numbered sessions' lengths")
    if args.pages == "before":
        _pages()
    elif args.render:
        from optictx.renderers import RenderConfig

        _pages(RenderConfig.load(args.render))
    results: dict[str, Any] = {}
    with Pool(args.jobs) as pool:
        for corpus in args.corpora:
            files = sorted(str(p) for p in Path(corpus).glob("*.jsonl"))
            for provider in args.providers:
                rows = _balanced(pool, _ours, files, (provider, args.budget, args.gap_seconds, args.risk,
                                                      args.words, args.image_instructions, args.client_front,
                                                      args.model))
                results[f"{Path(corpus).name}:{provider}"] = rows
                _table(Path(corpus).name, provider, rows, args.model)
                if args.halves:
                    for name, half in (("even", rows[::2]), ("odd", rows[1::2])):
                        p, o = sum(r["passthrough"] for r in half), sum(r["optictx"] for r in half)
                        print(f"- {name}-numbered sessions: {o / p:.3f}x, worst {max(r['ratio'] for r in half)}")
            if args.pxpipe:
                rows = _balanced(pool, _pxpipe, files, (args.pxpipe, args.client_front))
                results[f"{Path(corpus).name}:pxpipe"] = rows
                p, x = sum(r["passthrough"] for r in rows), sum(r["pxpipe"] for r in rows)
                tokens = [sum(r["tokens"][i] for r in rows) for i in (0, 1)]
                print(f"\n{Path(corpus).name}, pxpipe (anthropic rules, model claude-fable-5): cost {x / p:.3f}x "
                      f"pass-through, tokens {tokens[1] / tokens[0]:.3f}x; sessions above 1.0x: "
                      f"{sum(r['ratio'] > 1 for r in rows)} of {len(rows)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def _table(corpus: str, provider: str, rows: list[dict[str, Any]], model: str | None = None) -> None:
    p, o = sum(r["passthrough"] for r in rows), sum(r["optictx"] for r in rows)
    tp, to = sum(r["passthrough_tokens"] for r in rows), sum(r["optictx_tokens"] for r in rows)
    above = [r for r in rows if r["ratio"] > 1.0]
    events: dict[str, int] = {}
    for r in rows:
        for k, v in r["events"].items():
            events[k] = events.get(k, 0) + v
    ms = sum(r["seconds"] for r in rows) * 1000 / max(1, sum(r["requests"] for r in rows))
    print(f"\n{corpus}, {provider} ({model or 'each session own model'}'s prices): {len(rows)} sessions, "
          f"{sum(r['requests'] for r in rows)} requests")
    print(f"- cost: optictx {o / p:.3f}x pass-through (base-input tokens {p:,.0f} -> {o:,.0f}); "
          f"tokens sent {to / tp:.3f}x")
    print(f"- sessions above 1.0x: {len(above)} " + ", ".join(f"{r['session']} {r['ratio']}" for r in above))
    print(f"- best {min(r['ratio'] for r in rows)}, worst {max(r['ratio'] for r in rows)}; events {events}; "
          f"{ms:.0f} ms per request (proxy path and pricing)")
    n = max(1, sum(r["requests"] for r in rows))
    print(f"- page images per request at most {max(r['max_images'] for r in rows)}; pages dropped at most "
          f"{max(r['gone'] for r in rows)} in one request; bytes per request {sum(r['bytes'] for r in rows) / n:,.0f} "
          f"(as it came {sum(r['client_bytes'] for r in rows) / n:,.0f}), at most "
          f"{max(r.get('max_bytes', 0) for r in rows):,} in one")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
