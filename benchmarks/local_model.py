"""The local optical model on the tiny random Unlimited OCR (CPU): encode time per tier, prefill
and decode tokens/s, and what the two caches save over a long simulated agent session.

    python benchmarks/local_model.py [--turns 200] [--out out/local_model.json]

Session: the shipped sample conversation's turns are added one by one to a Memory counted in the
model's own tokenizer (the tiny model's 4,096-token BPE, which counts this text about as cl100k
does: a byte-level vocabulary would make every turn 3.8x as long beside the same page images).
Before every assistant turn the agent calls the model, as an agent loop does (the assistant turns
stand for what it would have generated; 4 new tokens each); every 8th call runs again without
prefix reuse, and the two answers are compared. Setups: a budget of 8,192 positions
(DeepSeek-OCR's context; nothing is dropped in 200 turns) with the default ladder (hold=2),
hold=1 and hold=4; a ladder that never fades (every page LARGE for good: what seals cost by
themselves); a budget of 2,000 (old pages are dropped from mid-session on), as is and with
Memory(sticky_tiers=True); and the tiny DeepSeek-OCR 2 at 8,192 (its pages cost 257 or 833).
The tiny model's timings say nothing about a real checkpoint's; the token counts carry over.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from optictx import AgeLadder, Budget, Memory, Tier
from optictx.models import OpticalModel, encode, tiny_deepseek_ocr2, tiny_unlimited_ocr, views
from optictx.sample import sample_conversation
from optictx.turnindex import text_tokens


def encode_times(model, seg, repeat: int = 3) -> dict[str, float]:
    out = {}
    for tier in (Tier.TINY, Tier.SMALL, Tier.BASE, Tier.LARGE, Tier.GUNDAM):
        v = views(seg, tier)
        best = min(_timed(lambda v=v: encode(model, [v])) for _ in range(repeat))
        out[tier.value] = round(best * 1000, 1)
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


VOCAB = 4096
QUESTION = "What next?"
CHECK_EVERY = 8  # calls between runs without reuse, whose answers are compared with the reused ones


@dataclass(frozen=True)
class Setup:
    name: str
    budget: int
    ladder: AgeLadder | None = None  # the default ladder
    sticky: bool = False
    vision: str = "unlimited-ocr"  # or "deepseek-ocr-2": its tiny model, full attention
    verbatim: bool = True  # the default: the session goes as text while it fits
    cache: bool = True  # the default: append-only plans between compactions (False: plan afresh)


SETUPS = [
    Setup("default", 8192),
    Setup("stateless planner (cache=False)", 8192, cache=False),
    Setup("hold=1 (the default before)", 8192, AgeLadder(hold=1)),
    Setup("hold=4", 8192, AgeLadder(hold=4)),
    # What a seal costs by itself: no page ever changes tier, so every break is a new page.
    # (Pages even while the session fits as text: what the pages cost is the point.)
    Setup("no fading (floor)", 65536, AgeLadder(steps=(), rest=Tier.LARGE), verbatim=False),
    Setup("default", 2000),
    Setup("stateless planner (cache=False)", 2000, cache=False),
    Setup("sticky_tiers", 2000, sticky=True),
    Setup("DeepSeek-OCR 2, default", 8192, vision="deepseek-ocr-2"),
]


def session(turns: int, setup: Setup) -> dict:
    tiny = tiny_deepseek_ocr2 if setup.vision == "deepseek-ocr-2" else tiny_unlimited_ocr
    model, tok = tiny(vocab_size=VOCAB)
    reuse = OpticalModel(model, tok, window=16)
    fresh = OpticalModel(model, tok, window=16, reuse_prefix=False)
    mem = Memory(vision=setup.vision, budget=Budget(tokens=setup.budget), keep_recent=2, tokenizer=tok,
                 ladder=setup.ladder or AgeLadder(), sticky_tiers=setup.sticky, verbatim=setup.verbatim,
                 cache=setup.cache)
    msgs = sample_conversation(tasks=12)[:turns]
    question = len(tok(f"USER: {QUESTION}\nASSISTANT:", add_special_tokens=False).input_ids)  # as build_inputs ends
    rows, checks = [], []
    for m in msgs:
        if m["role"] != "assistant":
            mem.add(m)
            continue
        ctx = mem.context()
        answer = reuse.answer(ctx, QUESTION, max_new_tokens=4)
        if len(rows) % CHECK_EVERY == 1:  # a call that reuses a prefix
            checks.append(fresh.answer(ctx, QUESTION, max_new_tokens=4) == answer)
        imaged = [s.tokens for s in ctx.pages if s.tier.is_image]
        sealed = [s.tokens for s in ctx.pages if s.tier.is_image and s.page.sealed]
        total, done = reuse.prefills[-1]
        turn = mem.add(m)
        rows.append({"turn": turn.id - 1, "prompt": total, "prefilled": done,
                     "page_tokens": statistics.mean(imaged) if imaged else 0,
                     "newest_page_tokens": sealed[-1] if sealed else 0, "gone_pages": len(ctx.gone),
                     "imaged_pages": len(imaged), "verbatim": ctx.verbatim})
    new_text = [text_tokens(t, mem.tokenizer) for t in mem.transcript()]  # text and tool calls
    # "New tokens" of a call: every turn added since the previous call (the agent's turns between questions).
    calls = [r["turn"] for r in rows]
    new_per_call = [sum(new_text[a + 1 : b + 1]) for a, b in zip([-1, *calls], calls)]
    later = rows[1:]  # the first call has nothing to reuse
    mean = lambda k: statistics.mean(r[k] for r in later)  # noqa: E731
    mean_new = statistics.mean(new_per_call[1:])
    # Per new turn: the same work spread over the turns it took in (the first call's excluded).
    turns_in = calls[-1] - calls[0]
    return {
        "setup": setup.name, "budget": setup.budget, "turns": len(msgs), "calls": len(rows),
        "prompt_mean": round(mean("prompt")), "prefilled_mean": round(mean("prefilled")),
        "new_tokens_mean": round(mean_new), "page_tokens_mean": round(mean("page_tokens")),
        "target_new_plus_page": round(mean_new + mean("page_tokens")),
        # The other reading of "one page": the page a seal adds, the newest (LARGE unless shrunk).
        "newest_page_tokens_mean": round(mean("newest_page_tokens")),
        "target_new_plus_newest_page": round(mean_new + mean("newest_page_tokens")),
        "per_turn": {"prefilled": round(sum(r["prefilled"] for r in later) / turns_in),
                     "new": round(sum(new_per_call[1:]) / turns_in)},
        "calls_with_dropped_pages": sum(r["gone_pages"] > 0 for r in later),
        "verbatim_calls": sum(r["verbatim"] for r in rows),
        "reused_share": round(1 - mean("prefilled") / mean("prompt"), 3),
        # A hit: the call reused the previous call's KV for more than the first piece (the BOS).
        "prefix_hit_rate": round(sum(r["prefilled"] < r["prompt"] - 1 for r in later) / len(later), 3),
        # Calls whose prompt only grew at its end: all of the previous prompt but its question reused.
        "append_only_calls": sum(r["prompt"] - r["prefilled"] == p["prompt"] - question
                                 for p, r in zip(rows, later)),
        "same_answer_without_reuse": f"{sum(checks)}/{len(checks)}",
        "encodes": {"pages_x_tiers": len(reuse.visual.encodes),
                    "max_per_page_tier": max(reuse.visual.encodes.values(), default=0),
                    "total": sum(reuse.visual.encodes.values()),
                    "without_caches": sum(r["imaged_pages"] for r in rows)},  # every imaged page, every call
        "tiers_seen": sorted({t.value for _, t in reuse.visual.encodes}),
        "rows": rows,
    }


def decode_speed(model, tok) -> dict[str, float]:
    om = OpticalModel(model, tok, window=16, reuse_prefix=False)
    mem = Memory(vision="unlimited-ocr", budget=Budget(tokens=8192), keep_recent=2, tokenizer=tok)
    for m in sample_conversation()[:120]:
        mem.add(m)
    ctx = mem.context()
    om.answer(ctx, "warm", max_new_tokens=2)
    inputs = om.inputs(ctx, "q")
    t_prefill = min(_timed(lambda: om._prefill(inputs)) for _ in range(3))
    n = 64
    t_all = _timed(lambda: om.answer(ctx, "q", max_new_tokens=n))
    return {"prompt": inputs.length, "prefill_tok_s": round(inputs.length / t_prefill),
            "decode_tok_s": round(n / max(1e-9, t_all - t_prefill))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--out", default="out/local_model.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = tiny_unlimited_ocr(vocab_size=VOCAB)
    mem = Memory(vision="unlimited-ocr", keep_recent=0, verbatim=False)  # a page to encode
    for m in sample_conversation()[:20]:
        mem.add(m)
    result = {"encode_ms": encode_times(model, mem.context().pages[0]), **decode_speed(model, tok),
              "sessions": [session(args.turns, setup) for setup in SETUPS]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"encode ms per page (tiny model, 1 thread): {result['encode_ms']}")
    print(f"prefill {result['prefill_tok_s']} tok/s, decode {result['decode_tok_s']} tok/s "
          f"(prompt {result['prompt']} positions)")
    for s in result["sessions"]:
        print(f"{s['setup']}, budget {s['budget']}: {s['turns']} turns, {s['calls']} calls, "
              f"prompt {s['prompt_mean']} tokens on average (all prefilled without reuse)")
        print(f"  prefilled per call: {s['prefilled_mean']} (prefix hit rate {s['prefix_hit_rate']:.0%}, "
              f"{s['append_only_calls']} of {s['calls'] - 1} calls only appended, "
              f"{s['reused_share']:.0%} of the prompt reused; target <= "
              f"new {s['new_tokens_mean']} + one page: the mean imaged page {s['page_tokens_mean']} = "
              f"{s['target_new_plus_page']}, the newest {s['newest_page_tokens_mean']} = "
              f"{s['target_new_plus_newest_page']}); per new turn {s['per_turn']['prefilled']} "
              f"(new {s['per_turn']['new']}); pages dropped in {s['calls_with_dropped_pages']} calls; "
              f"same answer without reuse {s['same_answer_without_reuse']}; {s['verbatim_calls']} calls verbatim")
        e = s["encodes"]
        print(f"  page encodes: {e['total']} with the caches ({e['pages_x_tiers']} (page, tier) pairs, at most "
              f"{e['max_per_page_tier']} each), {e['without_caches']} without; tiers {s['tiers_seen']}")

if __name__ == "__main__":
    main()
