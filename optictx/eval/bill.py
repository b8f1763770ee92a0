"""What a recorded session costs, request by request, sent as it came and through optictx.

A session (JSONL of OpenAI-style messages, or a client's own session file: Claude Code's
transcript, Codex's rollout, `transcripts.py`) is replayed as the client sent it: request k
carries every message before the k-th assistant message (the calls a `.usage.json` sidecar or the
client's file lists, where there is one), with the client's own cache breakpoints (Claude Code
marks its system prompt and the last block). Each request goes through the proxy's own path (`Proxy.fit`, the code
`optictx serve` runs, in this process) into one memory, as `optictx serve` would; both the
client's body and optictx's are then priced by the provider's cache rules (`promptcache.py`),
requests `gap` seconds apart (or the gaps given, in turn: a pause every few requests). The
replay's clock is the proxy's too, so a planner that knows the cache went cold acts on it. Text
is counted with cl100k_base, images by the cost model.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ..cost import CostModel, get_cost_model
from ..errors import ConfigError
from ..money import dollars, for_model
from ..policy import Policy
from ..promptcache import Bill, CachePricing, Prefixes, PromptCache, Request, get_cache_pricing
from ..serve.dialect import MENTION, Dialect
from ..serve.instructions import Instructions
from .bodies import Client, blocks_of
from .grown import Grower
from .requests import Requests
from .sessions import Session, Usage, load_session, sessions

if TYPE_CHECKING:
    from ..serve.proxy import Fitted, Proxy

__all__ = ["MODELS", "PROVIDERS", "Row", "Session", "SessionBill", "load_session", "replay", "report", "sessions"]

PROVIDERS = ("anthropic", "openai:gpt-4o", "openai:gpt-4.1", "openai:gpt-5")
MODELS = {"anthropic": "claude-opus-4-5", "openai:gpt-4o": "gpt-4o", "openai:gpt-4.1": "gpt-4.1",
          "openai:gpt-5": "gpt-5"}


# -- the replay ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One request: tokens and cost (base-input tokens) sent as it came and through optictx."""

    request: int
    passthrough_tokens: int
    optictx_tokens: int
    passthrough_cost: float
    optictx_cost: float
    event: str
    images: int = 0  # page images optictx's body carries
    gone: int = 0  # pages its context dropped (the budget or the images-per-request cap)
    bytes: int = 0  # optictx's body, and the client's beside it
    client_bytes: int = 0


@dataclass(frozen=True)
class SessionBill:
    session: str
    provider: str
    rows: list[Row]
    billed_cost: float | None  # what the provider billed the recorded session, base-input tokens
    dollars: tuple[float | None, float | None] = (None, None)  # (pass-through, optictx)
    billed_tokens: int | None = None  # the prompt tokens the provider reported over the session's calls
    proxied: bool = False  # the session went through optictx: what the provider billed is optictx's requests

    @property
    def passthrough(self) -> float:
        return sum(r.passthrough_cost for r in self.rows)

    @property
    def optictx(self) -> float:
        return sum(r.optictx_cost for r in self.rows)

    @property
    def ratio(self) -> float:
        return self.optictx / self.passthrough if self.passthrough else 1.0

    def gap(self) -> dict[str, int] | None:
        """Where the replay's "as it came" and the bill the provider reported part (base-input
        tokens): `counting`, the prompts counted differently (the replay counts with cl100k_base
        and prices images by the cost model; the provider with its own tokenizer), and `cache`,
        the rest: what the provider read from its cache and wrote to it where the replay's model
        of its rules says otherwise (a pause, an eviction, a breakpoint placed another way)."""
        tokens = sum(r.passthrough_tokens for r in self.rows)
        if self.billed_cost is None or not self.billed_tokens or not tokens or self.proxied:
            return None
        scaled = self.passthrough * self.billed_tokens / tokens
        return {"counting": round(self.passthrough - scaled), "cache": round(scaled - self.billed_cost)}

    def summary(self) -> dict[str, Any]:
        events: dict[str, int] = {}
        for r in self.rows:
            events[r.event] = events.get(r.event, 0) + 1
        return {"session": self.session, "provider": self.provider, "requests": len(self.rows),
                "max_images": max((r.images for r in self.rows), default=0),
                "gone": max((r.gone for r in self.rows), default=0),
                "bytes": sum(r.bytes for r in self.rows), "client_bytes": sum(r.client_bytes for r in self.rows),
                "max_bytes": max((r.bytes for r in self.rows), default=0),
                "passthrough_tokens": sum(r.passthrough_tokens for r in self.rows),
                "optictx_tokens": sum(r.optictx_tokens for r in self.rows),
                "passthrough_cost": round(self.passthrough), "optictx_cost": round(self.optictx),
                "ratio": round(self.ratio, 3), "billed_cost": None if self.billed_cost is None else
                round(self.billed_cost), "billed_tokens": self.billed_tokens, "proxied": self.proxied,
                "gap": self.gap(),
                "dollars": self.dollars, "events": events}


    def as_json(self, rows: bool = False) -> str:
        """Its summary as one JSON object (with every request's row: `rows`)."""
        return json.dumps({**self.summary(), **({"rows": rows_as_dicts(self)} if rows else {})})

    def text(self, rows: bool = False) -> str:
        """Its bill on one line (after every request's: `rows`): as it came and through optictx,
        then what the provider reported beside the replay's "as it came", with where the two part."""
        s = self.summary()
        money = s["dollars"]
        dollars = f"  ${money[0]:.2f} -> ${money[1]:.2f}" if money[0] is not None else ""
        out = [f"  {r.request:4d} {r.event:8s} tokens {r.passthrough_tokens:7d} -> {r.optictx_tokens:7d}"
               f"  cost {r.passthrough_cost:9.0f} -> {r.optictx_cost:9.0f}" for r in (self.rows if rows else ())]
        line = (f"{self.provider} {s['session']}: {s['requests']} requests, cost {s['passthrough_cost']} -> "
                f"{s['optictx_cost']} ({s['ratio']:.2f}x){dollars}, tokens {s['passthrough_tokens']} -> "
                f"{s['optictx_tokens']}, events {s['events']}")
        if s["billed_cost"] is not None and self.proxied:  # the provider billed optictx's requests
            line += (f"\n  billed through optictx {s['billed_cost']} ({s['billed_tokens']} prompt tokens reported); "
                     f"the replay's through optictx is {s['optictx_cost'] - s['billed_cost']:+d}")
        elif s["billed_cost"] is not None:
            line += f"\n  billed as it came {s['billed_cost']} ({s['billed_tokens']} prompt tokens reported)"
            if s["gap"] is not None:
                line += (f"; the replay's as it came is {s['passthrough_cost'] - s['billed_cost']:+d}: "
                         f"{s['gap']['counting']:+d} from counting tokens with cl100k_base, "
                         f"{s['gap']['cache']:+d} from the cache read and written otherwise")
        return "\n".join([*out, line])


def billed(calls: Sequence[Usage], pricing: CachePricing) -> float | None:
    """What the provider billed the recorded calls (their reported usage), in base-input tokens
    under `pricing` (None: nothing recorded)."""
    if not calls:
        return None
    return sum(pricing.priced(c["fresh"], c["read"], c["written"], c.get("written_1h", 0)).cost for c in calls)


def since_arg(text: str) -> float:
    """`--since`: a date (2026-12-01, midnight UTC) or days back (7d), as seconds since the epoch."""
    import datetime as dt
    import time

    try:
        if text.endswith("d"):
            return time.time() - 86400 * float(text[:-1])
        day = dt.date.fromisoformat(text)
        return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"a date (2026-12-01) or days back (7d): got {text[:40]!r}") from None


def gaps_arg(text: str) -> tuple[float, ...]:
    """`--gap-seconds`: seconds, or seconds,seconds,... taken in turn."""
    try:
        gaps = tuple(float(g) for g in text.split(","))
    except ValueError:
        gaps = ()
    if not gaps or not all(0 <= g < 1e9 for g in gaps):  # NaN fails too
        raise argparse.ArgumentTypeError(f"seconds, or seconds,seconds,...: got {text[:40]!r}")
    return gaps


def risk_arg(text: str) -> float:
    """`--risk`: a share `Policy.risk` takes (its own check, as a usage error), or `none`."""
    if text.strip().lower() == "none":
        return None  # type: ignore[return-value]
    try:
        return Policy(risk=float(text)).risk  # type: ignore[return-value]
    except (ValueError, ConfigError):
        raise argparse.ArgumentTypeError(f"a share in [0, 1000]: got {text[:40]!r}") from None


def replay(session: Session, provider: str = "anthropic", *, budget: int | None = None,
           gap: float | Sequence[float] = 60.0, vision: str = "auto", keep_recent: int = 4,
           risk: float | None = 0.1, words: bool = True, image_instructions: bool = False, wire: bool = False,
           model: str | None = None, done: Callable[[], object] | None = None) -> SessionBill:
    """The session's requests priced both ways under `provider`'s cache rules at the model's own
    prices (`money.for_model`), `gap` seconds apart (a sequence: the gaps in turn, cycled);
    `risk`, `words`, `image_instructions`: the proxy's settings; `model`: the model the requests
    are sent as (default: the session's own, else the provider's in `MODELS`). Each
    request is built from the one before and handed to the proxy as the turns it adds
    (`grown.py`), unless it is not the one before grown, or `wire`: then it goes whole, as bytes,
    the way `optictx serve` reads it (the same bill, in time that grows with the square of the
    session's length). `done`: called after each request (a progress bar's)."""
    gaps = (float(gap),) if isinstance(gap, (int, float)) else tuple(gap)
    from ..serve.anthropic_api import ANTHROPIC
    from ..serve.config import ServeConfig
    from ..serve.openai_api import OPENAI
    from ..serve.proxy import Proxy, vision_for
    from ..serve.responses_api import RESPONSES

    native = session.native
    model = model or (native.model if native is not None and native.model else MODELS.get(provider, provider))
    pricing = for_model(get_cache_pricing(provider), model)
    api = native.api if native is not None else ("anthropic" if provider.startswith("anthropic") else "openai")
    dialect = {"anthropic": ANTHROPIC, "openai": OPENAI, "responses": RESPONSES}[api]
    cost = get_cost_model(vision_for(model, dialect.provider, vision))
    settings: dict[str, Any] = {"keep_recent": keep_recent, "vision": vision, "risk": risk, "words": words,
                                "image_instructions": image_instructions}
    config = ServeConfig.make(upstream="http://127.0.0.1:9/v1", anthropic_upstream="http://127.0.0.1:9",
                              **settings)
    headers = {"x-api-key": "optictx-bill"}
    if budget is not None:
        headers["x-optictx-budget"] = str(budget)
    proxy = Proxy(config)
    named = (f"bill{n:04d}" for n in itertools.count())
    proxy.conversations.new_id = lambda: next(named)
    steps = _Steps(proxy, dialect, api, Requests(session, api, model), cost, PromptCache(pricing),
                   PromptCache(pricing), headers, wire)
    rows, spend, at = [], [0.0, 0.0], 0.0
    try:
        for k in range(len(session.calls)):
            at += gaps[k % len(gaps)]  # the replay's clock, for the proxy's planner and the cache alike
            a, b, fitted, size, client_size = steps.step(k, at)
            ctx = fitted.context
            images = sum(1 for p in ctx.pages if p.tier.is_image) if ctx is not None else 0
            event = (fitted.fallback or "").split(":", 1)[0] or (ctx.event if ctx is not None else None) or "-"
            rows.append(Row(k, a.tokens, b.tokens, a.cost, b.cost, event, images, len(ctx.gone) if ctx else 0,
                            size, client_size))
            for i, bill in enumerate((a, b)):
                spend[i] += dollars(bill, model, pricing) or 0.0
            if done is not None:
                done()
    finally:
        proxy.close()
    money = (round(spend[0], 4), round(spend[1], 4)) if any(spend) else (None, None)
    recorded = session.billed if session.provider.split(":")[0] == provider.split(":")[0] else []
    return SessionBill(session.name, provider, rows, billed(recorded, pricing), money,
                       sum(c["prompt"] for c in recorded) if recorded else None,
                       proxied=native is not None and native.via.lower() == "optictx")


class _Steps:
    """One request after another through the proxy, priced both ways: each built from the one
    before and handed to the proxy as the turns it adds (`grown.py`, `Proxy.grow`; its blocks
    priced from the last request's, `bodies.Client`), or, on the `wire`, each written whole as
    bytes, read as `optictx serve` reads them and priced whole: the oracle the other is held to."""

    def __init__(self, proxy: Proxy, dialect: Dialect, api: str, requests: Requests, cost: CostModel,
                 plain: PromptCache, ours: PromptCache, headers: dict[str, str], wire: bool) -> None:
        from ..serve.guards import read  # the serve extra's

        self.proxy, self.dialect, self.api, self.requests, self.cost = proxy, dialect, api, requests, cost
        self.plain, self.ours, self.headers, self.wire, self.read = plain, ours, headers, wire, read
        self.counted: dict[str, int] = {}
        self.grower = Grower(dialect)
        self.client = Client(self.api, cost, self.counted, MENTION)  # the client's requests
        self.mine = Client(self.api, cost, self.counted)  # optictx's
        self.conversation = "-"  # the one the proxy keeps them in

    def step(self, k: int, at: float) -> tuple[Bill, Bill, Fitted, int, int]:
        """Request k: its bill as it came and through optictx, what the proxy did, the bytes of
        optictx's body and of the client's."""
        if self.wire:
            return self._whole(k, at)
        requests, grower = self.requests, self.grower
        first = requests.to(k)
        theirs = self.client.update(requests.head, requests.items, first, at)
        held = len(grower.last.turns) if grower.last is not None else 0
        parsed = None if self.conversation == "-" else grower.next(
            requests.head, requests.key, requests.items, first, frozenset(self.client.named))
        if parsed is not None:
            fitted = self.proxy.grow(self.conversation, self.dialect, parsed, held, self.headers, at=at)
        else:
            whole = self.read(self.dialect, json.dumps(requests.body()).encode())
            fitted = self.proxy.fit(self.dialect, whole, self.headers, at=at)
            grower.whole(whole, requests.head, requests.key, requests.items)
        self._held(fitted)
        a = self.plain.bill(theirs)
        if fitted.context is None or (fitted.context.verbatim and not self.proxy.config.image_instructions):
            return a, self.ours.bill(_automatic(theirs, requests.head)), fitted, self.client.bytes, self.client.bytes
        if fitted.context.verbatim:  # the client's request with its instructions drawn, as the proxy writes it
            body = requests.body()
            sent = Instructions(self.dialect.name, fitted.sent.vision, room=True)(body)  # its memories have room
            return a, self.ours.bill(_automatic(self.mine.sent(sent, at), sent)), fitted, \
                self.client.bytes + _grew(body, sent, requests.key), self.client.bytes
        sent = json.loads(fitted.body)
        return a, self.ours.bill(_automatic(self.mine.sent(sent, at), sent)), fitted, len(fitted.body), \
            self.client.bytes

    def _whole(self, k: int, at: float) -> tuple[Bill, Bill, Fitted, int, int]:
        self.requests.to(k)
        body = self.requests.body()
        raw = json.dumps(body).encode()
        fitted = self.proxy.fit(self.dialect, self.read(self.dialect, raw), self.headers, at=at)
        sent = json.loads(fitted.body)
        a = self.plain.bill(Request(blocks_of(self.api, body, self.cost, self.counted), at))
        b = self.ours.bill(Request(blocks_of(self.api, sent, self.cost, self.counted), at,
                                   automatic="cache_control" in sent))
        return a, b, fitted, len(fitted.body), len(raw)

    def _held(self, fitted: Fitted) -> None:
        """The conversation the next request continues: the one this one went into, unless it
        went as it came outside any (a turn too large to keep, a shape not understood)."""
        kept = fitted.context is not None or (fitted.fallback or "").startswith("budget")
        self.conversation = fitted.sent.conversation if kept else "-"


def _grew(body: dict[str, Any], sent: dict[str, Any], key: str) -> int:
    """How many bytes more `sent` is as JSON than `body`, which it shares all but its head and
    first items with (the same objects from there on): only those are written."""
    theirs, ours = body[key], sent[key]
    n = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a is b), len(ours))

    def front(of: dict[str, Any], items: list[Any]) -> int:
        return len(json.dumps({**{k: v for k, v in of.items() if k != key}, key: items[:n]}))

    return front(sent, ours) - front(body, theirs)


def _automatic(prefixes: Prefixes, head: dict[str, Any]) -> Prefixes:
    """The request with Anthropic's top-level cache_control, where its head has one: a breakpoint
    on its last block."""
    last = prefixes.n - 1
    if "cache_control" not in head or last < 0 or last in prefixes.marks:
        return prefixes
    return replace(prefixes, marks=(*prefixes.marks, last))


def report(bills: Sequence[SessionBill]) -> dict[str, Any]:
    """Totals over sessions: cost both ways, the ratio, the sessions above 1.0x."""
    passthrough = sum(b.passthrough for b in bills)
    ours = sum(b.optictx for b in bills)
    worst = max(bills, key=lambda b: b.ratio) if bills else None
    return {"sessions": len(bills), "requests": sum(len(b.rows) for b in bills),
            "passthrough_cost": round(passthrough), "optictx_cost": round(ours),
            "ratio": round(ours / passthrough, 3) if passthrough else None,
            "sessions_above_1": sum(1 for b in bills if b.ratio > 1.0),
            "worst": None if worst is None else {"session": worst.session, "ratio": round(worst.ratio, 3)},
            "events": _events(bills)}


def _events(bills: Sequence[SessionBill]) -> dict[str, int]:
    out: dict[str, int] = {}
    for b in bills:
        for r in b.rows:
            out[r.event] = out.get(r.event, 0) + 1
    return out


def rows_as_dicts(bill: SessionBill) -> list[dict[str, Any]]:
    return [asdict(r) for r in bill.rows]
