"""What a recorded session costs, request by request, sent as it came and through optictx.

A session (JSONL of OpenAI-style messages) is replayed as the client sent it: request k carries
every message before the k-th assistant message (the calls a `.usage.json` sidecar lists, where
there is one), with the client's own cache breakpoints (Claude Code marks its system prompt and
the last block). Each request goes through the proxy's own path (`Proxy.fit`, the code
`optictx serve` runs, in this process) into one memory, as `optictx serve` would; both the
client's body and optictx's are then priced by the provider's cache rules (`promptcache.py`),
requests `gap` seconds apart (or the gaps given, in turn: a pause every few requests). The
replay's clock is the proxy's too, so a planner that knows the cache went cold acts on it. Text
is counted with cl100k_base, images by the cost model.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..cost import CostModel, get_cost_model
from ..errors import ConfigError, ConversationFileError
from ..export import _anthropic_message, _merge_roles
from ..io import read_jsonl
from ..native import UNKNOWN_SIZE
from ..policy import Policy
from ..promptcache import Block, PromptCache, Request, dollars, get_cache_pricing
from ..sample import SYSTEM
from ..tiers import Tier
from ..tokens import get_tokenizer
from ..turns import to_turn

EPHEMERAL = {"type": "ephemeral"}
PROVIDERS = ("anthropic", "openai:gpt-4o", "openai:gpt-4.1", "openai:gpt-5")
MODELS = {"anthropic": "claude-opus-4-5", "openai:gpt-4o": "gpt-4o", "openai:gpt-4.1": "gpt-4.1",
          "openai:gpt-5": "gpt-5"}


@dataclass(frozen=True)
class Session:
    name: str
    messages: list[dict[str, Any]]
    calls: list[int]  # request k carries messages[:calls[k]]
    system_tokens: int  # the client's system prompt and tools, as billed (0: unknown)
    billed: list[dict[str, int]] = field(default_factory=list)  # the sidecar's usage per call


def load_session(path: str | Path) -> Session:
    """A JSONL session and, beside it, its `.usage.json` sidecar when there is one."""
    path = Path(path)
    messages = [t.to_openai() for t in read_jsonl(path)]
    sidecar = path.with_name(path.name.removesuffix(".jsonl") + ".usage.json")
    if sidecar.is_file():
        usage = json.loads(sidecar.read_text())
        calls = [int(c["message"]) for c in usage["calls"]]
        first = usage["calls"][0]
        system = int(first["cache_read_input_tokens"]) + int(first["cache_creation_input_tokens"])
        return Session(path.stem, messages, calls, system, usage["calls"])
    # A call before each assistant turn that follows the client's (two assistant messages in a
    # row are one answer streamed in parts: the API merges them into one message).
    calls = [i for i, m in enumerate(messages)
             if m.get("role") == "assistant" and (i == 0 or messages[i - 1].get("role") != "assistant")]
    return Session(path.stem, messages, calls, 0)


def sessions(paths: Iterable[str | Path]) -> Iterator[Session]:
    for p in paths:
        p = Path(p)
        files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
        if not files:
            raise ConversationFileError(f"{p}: no .jsonl sessions there")
        yield from (load_session(f) for f in files)


# -- the client's requests ----------------------------------------------------------------------

def _filler(tokens: int) -> str:
    """A stand-in for a system prompt and tool definitions that were not recorded, of about
    `tokens` cl100k tokens (only its size matters to the bill)."""
    if tokens <= 0:
        return ""
    tok = get_tokenizer()
    unit = SYSTEM + "\n"
    n = max(1, tokens // max(1, tok.count(unit)))
    return unit * n


def anthropic_body(session: Session, k: int, model: str) -> dict[str, Any]:
    """Request k as Claude Code sends it: the system prompt marked, the messages so far, the last
    block marked (the breakpoint moves to the newest block on every request)."""
    head = session.messages[: session.calls[k]]
    turns = [to_turn(m) for m in head if m.get("role") != "system"]
    messages = _merge_roles([_anthropic_message(t) for t in turns]) or [
        {"role": "user", "content": [{"type": "text", "text": "(the task, not recorded)"}]}]
    last = messages[-1]
    messages[-1] = {**last, "content": [*last["content"][:-1], {**last["content"][-1], "cache_control": EPHEMERAL}]}
    system_text = "\n\n".join(str(m.get("content")) for m in head if m.get("role") == "system")
    system_text = system_text or _filler(session.system_tokens)
    body: dict[str, Any] = {"model": model, "max_tokens": 32000, "messages": messages}
    if system_text:
        body["system"] = [{"type": "text", "text": system_text, "cache_control": EPHEMERAL}]
    return body


def openai_body(session: Session, k: int, model: str) -> dict[str, Any]:
    head = [m for m in session.messages[: session.calls[k]]]
    if not any(m.get("role") == "system" for m in head) and session.system_tokens:
        head = [{"role": "system", "content": _filler(session.system_tokens)}, *head]
    return {"model": model, "messages": head}


# -- what a body costs --------------------------------------------------------------------------

def _png_size(data: str) -> tuple[int, int]:
    try:
        raw = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4))
        if raw[:8] == b"\x89PNG\r\n\x1a\n":
            return struct.unpack(">II", raw[16:24])
    except (ValueError, struct.error):
        pass
    return UNKNOWN_SIZE


def _key(block: Any) -> str:
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return hashlib.sha256(json.dumps(block, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _tokens(block: Any, cost: CostModel) -> int:
    """A block's input tokens: text counted, images priced by the cost model."""
    count = get_tokenizer().count
    if isinstance(block, str):
        return count(block)
    if not isinstance(block, dict):
        return count(json.dumps(block))
    kind = block.get("type")
    if kind == "text":
        return count(str(block.get("text", "")))
    if kind == "image":
        source = block.get("source") or {}
        size = _png_size(source.get("data", "")) if source.get("type") == "base64" else UNKNOWN_SIZE
        return cost.image_tokens(Tier.GUNDAM, size)
    if kind == "image_url":
        url = (block.get("image_url") or {}).get("url", "")
        size = _png_size(url.split(",", 1)[1]) if url.startswith("data:") and "," in url else UNKNOWN_SIZE
        return cost.image_tokens(Tier.GUNDAM, size)
    if kind == "tool_result":
        content = block.get("content")
        parts = content if isinstance(content, list) else [content or ""]
        return sum(_tokens(p, cost) for p in parts) + 4
    if kind == "tool_use":
        return count(str(block.get("name", "")) + json.dumps(block.get("input"))) + 4
    return count(json.dumps({k: v for k, v in block.items() if k != "cache_control"}))


def _priced(blocks: Sequence[Any], cost: CostModel, counted: dict[str, int] | None, marked: bool) -> tuple[Block, ...]:
    """Blocks keyed by their content less any cache mark, their tokens counted once per key."""
    counted = {} if counted is None else counted
    out = []
    for b in blocks:
        key = _key(b)
        if key not in counted:
            counted[key] = _tokens(b, cost)
        out.append(Block(key, counted[key], marked and isinstance(b, dict) and "cache_control" in b))
    return tuple(out)


def anthropic_blocks(body: dict[str, Any], cost: CostModel, counted: dict[str, int] | None = None
                     ) -> tuple[Block, ...]:
    """The body's blocks in the provider's cache order: tools, system, messages."""
    system = body.get("system") or []
    system = [{"type": "text", "text": system}] if isinstance(system, str) else system
    out = [*(body.get("tools") or []), *system]
    for m in body["messages"]:
        content = m["content"]
        out.extend([{"type": "text", "text": content}] if isinstance(content, str) else content)
    return _priced(out, cost, counted, True)


def openai_blocks(body: dict[str, Any], cost: CostModel, counted: dict[str, int] | None = None
                  ) -> tuple[Block, ...]:
    out: list[Any] = [*(body.get("tools") or [])]
    for m in body["messages"]:
        content = m.get("content")
        out.extend(content if isinstance(content, list) else [content or ""])
        if m.get("tool_calls"):
            out.append({"tool_calls": m["tool_calls"]})
    return _priced(out, cost, counted, False)


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


@dataclass(frozen=True)
class SessionBill:
    session: str
    provider: str
    rows: list[Row]
    billed_cost: float | None  # what the provider billed the recorded session (sidecar), base-input tokens
    dollars: tuple[float | None, float | None] = (None, None)  # (pass-through, optictx)

    @property
    def passthrough(self) -> float:
        return sum(r.passthrough_cost for r in self.rows)

    @property
    def optictx(self) -> float:
        return sum(r.optictx_cost for r in self.rows)

    @property
    def ratio(self) -> float:
        return self.optictx / self.passthrough if self.passthrough else 1.0

    def summary(self) -> dict[str, Any]:
        events: dict[str, int] = {}
        for r in self.rows:
            events[r.event] = events.get(r.event, 0) + 1
        return {"session": self.session, "provider": self.provider, "requests": len(self.rows),
                "passthrough_tokens": sum(r.passthrough_tokens for r in self.rows),
                "optictx_tokens": sum(r.optictx_tokens for r in self.rows),
                "passthrough_cost": round(self.passthrough), "optictx_cost": round(self.optictx),
                "ratio": round(self.ratio, 3), "billed_cost": None if self.billed_cost is None else
                round(self.billed_cost), "dollars": self.dollars, "events": events}


def billed(session: Session) -> float | None:
    """What Anthropic billed the recorded session, in base-input tokens (5-minute cache)."""
    if not session.billed:
        return None
    return sum(c["input_tokens"] + 0.1 * c["cache_read_input_tokens"] + 1.25 * c["cache_creation_input_tokens"]
               for c in session.billed)


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
    """`--risk`: a share `Policy.risk` takes (its own check, as a usage error)."""
    try:
        return Policy(risk=float(text)).risk  # type: ignore[return-value]
    except (ValueError, ConfigError):
        raise argparse.ArgumentTypeError(f"a share in [0, 1000]: got {text[:40]!r}") from None


def replay(session: Session, provider: str = "anthropic", *, budget: int | None = None,
           gap: float | Sequence[float] = 60.0, vision: str = "auto", keep_recent: int = 4,
           risk: float | None = None) -> SessionBill:
    """The session's requests priced both ways under `provider`'s cache rules, `gap` seconds
    apart (a sequence: the gaps in turn, cycled); `risk`: the proxy's (`Policy.risk`)."""
    gaps = (float(gap),) if isinstance(gap, (int, float)) else tuple(gap)
    from ..serve.anthropic_api import ANTHROPIC
    from ..serve.config import ServeConfig
    from ..serve.openai_api import OPENAI
    from ..serve.proxy import Proxy, vision_for

    pricing = get_cache_pricing(provider)
    model = MODELS.get(provider, provider)
    anthropic = provider.startswith("anthropic")
    dialect = ANTHROPIC if anthropic else OPENAI
    cost = get_cost_model(vision_for(model, dialect.name, vision))
    settings: dict[str, Any] = {"keep_recent": keep_recent, "vision": vision, "risk": risk}
    config = ServeConfig.make(upstream="http://127.0.0.1:9/v1", anthropic_upstream="http://127.0.0.1:9",
                              **settings)
    headers = {"x-api-key": "optictx-bill"}
    if budget is not None:
        headers["x-optictx-budget"] = str(budget)
    proxy = Proxy(config)
    plain, ours = PromptCache(pricing), PromptCache(pricing)
    rows = []
    spend = [0.0, 0.0]
    counted: dict[str, int] = {}
    at = 0.0
    try:
        for k in range(len(session.calls)):
            body = anthropic_body(session, k, model) if anthropic else openai_body(session, k, model)
            raw = json.dumps(body).encode()
            at += gaps[k % len(gaps)]  # the replay's clock, for the proxy's planner and the cache alike
            fitted = proxy.fit(dialect, dialect.parse(body, raw), headers, at=at)
            sent = json.loads(fitted.body)
            blocks = anthropic_blocks if anthropic else openai_blocks
            a = plain.bill(Request(blocks(body, cost, counted), at))
            b = ours.bill(Request(blocks(sent, cost, counted), at, automatic="cache_control" in sent))
            event = fitted.fallback or (fitted.context.event if fitted.context is not None else None) or "-"
            rows.append(Row(k, a.tokens, b.tokens, a.cost, b.cost, event))
            for i, bill in enumerate((a, b)):
                d = dollars(bill, model, pricing)
                spend[i] += d or 0.0
    finally:
        proxy.close()
    money = (round(spend[0], 4), round(spend[1], 4)) if any(spend) else (None, None)
    return SessionBill(session.name, provider, rows, billed(session) if anthropic else None, money)


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
