"""The proxy's work for one request, away from the event loop: find the conversation, add what
is new, fit the context, write the body that goes upstream."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..context import Context
from ..cost import get_cost_model, vision_of_model
from ..errors import BudgetError, TurnTooLargeError
from ..limits import Limits
from ..memory import Memory
from ..money import TTL
from ..recall import spans_of
from ..tools import ABOUT
from ..turns import Turn
from ..windows import DEFAULT_CAP, cap_for
from ..words import first_said, keep
from .answers import FALLBACKS
from .anthropic_api import ttl
from .config import ServeConfig
from .conversations import Conversation, Conversations, tenant_of
from .dialect import MENTION, ApiError, Dialect, Front, Parsed
from .drawahead import DrawAhead
from .instructions import MAX_PAGES, Instructions
from .ledger import Ledger, Sent
from .meter import Charge, Meter, rules
from .refusals import Refusals
from .shelf import shelf_for

log = logging.getLogger("optictx.serve")

MAX_BUDGET = 10**8
MAX_NAME = 200


@dataclass(frozen=True)
class Fitted:
    body: bytes
    sent: Sent
    context: Context | None  # None: the request went as it came although it does not fit
    fallback: str | None = None  # why it went so
    charge: Charge | None = None  # its modeled bill, both ways (None: not a conversation's request)
    meter: Meter | None = None  # the conversation's model of the cache that `charge` came from


def fit(memory: Memory, dialect: Dialect, parsed: Parsed, budget: int, vision: str, *,
        commit: bool = True, at: float | None = None, front: Front | None = None,
        tools: tuple[str, ...] | None = None) -> tuple[bytes, Context]:
    """The upstream body for `parsed` from a memory holding exactly its turns, and its context.

    What goes upstream follows from the conversation's own history of calls (the memory's plan
    state, `prefix.py`): the last body with the new turns appended, until a compaction. Any
    memory holding those turns after the same calls sends the same bytes: the proxy's, a reopen
    of its store, another replica (tests/test_serve.py holds the proxy to that). `commit=False`
    (token counting) leaves the plan state as it was; `at`: the request's time (default now);
    `front`: the instructions drawn on pages (`--image-instructions`); `tools`: the names its
    request gives the MCP tools (default: `recall_tools` of it)."""
    if tools is None:
        tools = recall_tools(parsed.body.get("tools"), lambda: parsed.mentions)
    ctx = memory.context(budget=budget - overhead(memory, parsed), vision=vision, commit=commit, at=at, tools=tools,
                         pricing=rules(vision, parsed.model, ttl_of(dialect, parsed)))
    return dialect.upstream_body(parsed, ctx, front), ctx


def _ours(spec: Any) -> bool:
    """A tool this proxy's MCP server gave: its description, and a name a `Policy` takes (a name
    with a newline is no tool of ours, and must not refuse the request)."""
    return isinstance(spec, dict) and isinstance(spec.get("name"), str) and 0 < len(spec["name"]) <= 64 and \
        spec["name"].isprintable() and str(spec.get("description", "")).startswith(ABOUT) and \
        spec["name"].endswith(("search", "recall"))


def recall_tools(tools: Any, mentions: Callable[[], Iterable[bytes]] = tuple) -> tuple[str, ...]:
    """The names the request gives this proxy's MCP tools: in its tool list, known by their
    description (Claude Code lists `mcp__optictx__recall` once loaded; Codex a namespace
    `mcp__optictx` holding `recall`), or, before that, named
    as a pair `mcp__NAME__search` and `mcp__NAME__recall` anywhere in it (Claude Code defers an
    MCP server's tools, naming them in a system message until its ToolSearch loads them;
    `mentions`: those names, found only when the tool list has none of ours)."""
    names = []
    for t in tools if isinstance(tools, list) else ():
        spec = t.get("function", t) if isinstance(t, dict) else None  # Chat nests it; Messages, Responses do not
        inner = spec.get("tools") if isinstance(spec, dict) and spec.get("type") == "namespace" else None
        for one, space in ([(i, spec["name"]) for i in inner] if isinstance(inner, list) else [(spec, None)]):
            if not _ours(one):
                continue
            name = one["name"] if space is None else f"{str(space)[:40]}.{one['name']}"  # Codex's NAMESPACE.NAME
            if name.isprintable():
                names.append(name)
    if not names:
        found = {(m.group(1), m.group(2)) for m in map(MENTION.fullmatch, mentions()) if m is not None}
        server = min((s for s, tool in found if tool == b"recall" and (s, b"search") in found), default=None)
        names = [] if server is None else [f"mcp__{server.decode()}__{tool}" for tool in ("search", "recall")]
    return tuple(sorted(names)[:4])  # one order, whichever way found: it keys the plan state


# A name no rule knows is priced as the API it came through: the provider's own family.
UNKNOWN = {"openai": "openai:gpt-4o", "anthropic": "anthropic"}


def vision_for(model: str, api: str, setting: str) -> str:
    """The cost model a request is priced by: `setting` (`--vision`) unless it is "auto", else
    by its model name (`cost.vision_of_model`), else by the API it came through."""
    if setting != "auto":
        return setting
    return vision_of_model(model) or UNKNOWN[api]


def overhead(memory: Memory, parsed: Parsed) -> int:
    """Tokens of what a request carries beside its messages (tool definitions): they go with
    every request as they came, and take their room from the budget first."""
    tools = parsed.body.get("tools")
    return memory.tokenizer.count(json.dumps(tools, ensure_ascii=False)) if isinstance(tools, list) and tools else 0


def ttl_of(dialect: Dialect, parsed: Parsed) -> TTL:
    """The cache lifetime a request's breakpoints ask for (only Anthropic's may ask an hour)."""
    return ttl(parsed.body) if dialect.name == "anthropic" else "5m"


def front_of(parsed: Parsed) -> str:
    """A digest of what a request carries before its messages that a client may change between
    requests of one conversation (its tools; Anthropic's system prompt): the provider's cache
    prefix breaks there (`Meter.charge`)."""
    front = {k: parsed.body.get(k) for k in ("tools", "system", "instructions")}
    return hashlib.sha256(json.dumps(front, sort_keys=True, default=str).encode()).hexdigest()[:16]


def kept_turns(parsed: Parsed, held: int = 0, *, pin: bool = True, words: bool = True) -> tuple[Turn, ...]:
    """The request's turns after its first `held` (a memory holds those already) as the proxy
    keeps them.

    - `pin`: the person's first words pinned (`words.first_said`: not a message an agent wrote
      for itself, such as Codex's environment context): the task stays text in every context.
    - `words`: the person's words, and the instruction files a client forwards, marked to stay
      text in place (`words.keep`), in a request that gives its model tools: such a client sends
      tool output as tool results, so what is left in its user messages is the person's. A
      client with no tools may send anything as a user message (SWE-agent sends every command's
      output so: kept as text, those would never page, BENCHMARKS.md), and its user turns page
      as any turn."""
    turns = parsed.turns[held:]
    first = first_said(parsed.turns) if pin else None
    if first is not None and first >= held and not turns[first - held].pinned:
        i = first - held  # a user turn: pinning is valid
        turns = (*turns[:i], turns[i].model_copy(update={"pinned": True}), *turns[i + 1 :])
    tools = parsed.body.get("tools")
    return tuple(keep(t) for t in turns) if words and isinstance(tools, list) and tools else tuple(turns)


def _room(memory: Memory, vision: str) -> bool:
    """Whether `memory`'s contexts leave room for MAX_PAGES of instructions under the consumer's
    image cap (one the proxy made with `--image-instructions`, `Proxy.memory`), or it has none."""
    cap = get_cost_model(vision).max_images
    return cap is None or memory.policy.limits.image_cap(cap) <= cap - MAX_PAGES  # type: ignore[operator]


def tiers_of(ctx: Context) -> dict[str, int]:
    """Pages per tier in `ctx`, dropped ones as "gone" (the dashboard's column)."""
    tiers = Counter(p.tier.value for p in ctx.pages)
    if ctx.gone:
        tiers["gone"] = len(ctx.gone)
    return dict(sorted(tiers.items()))


class Proxy:
    """The proxy's state: its settings, the conversations and the ledger."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.ledger = Ledger(config.store)
        self.conversations = Conversations(self.memory, self.reopen, shelf_for(config.store), self.ledger,
                                           config.max_open, config.lock_wait)
        self.drawahead = DrawAhead()
        self.refusals = Refusals()  # models whose upstream refused their pages lately

    def memory(self, store: str | Path | None, vision: str = "deepseek-ocr", budget: int | None = None,
               key: str | None = None) -> Memory:
        """A new conversation's memory, its pages drawn for `vision` and `budget` (its first
        request's: a consumer that prices pixels takes larger pages where the budget holds them)
        and its page handles keyed by `key` (`handles.key_for` its id), room left under its
        consumer's images-per-request cap for instruction pages (`--image-instructions`); contexts
        are built per request (budget, vision)."""
        cap = get_cost_model(vision).max_images
        room = {"limits": Limits(max_images=max(0, cap - MAX_PAGES))} if self.config.image_instructions and cap else {}
        return Memory(keep_recent=self.config.keep_recent, budget=budget or self.config.budget or DEFAULT_CAP,
                      store=store,
                      vision=vision, image_cache_bytes=self.config.image_cache_bytes, risk=self.config.risk,
                      key=key, **room)

    def reopen(self, store: str | Path) -> Memory:
        """A stored conversation's memory, with the settings it was made with."""
        return Memory.open(store, image_cache_bytes=self.config.image_cache_bytes)

    def tenant(self, headers: Mapping[str, str]) -> str:
        """Whose conversations a request sees: its credential's, or on a personal proxy the one
        person's (`ServeConfig.tenancy`)."""
        return tenant_of(headers, personal=self.config.personal)

    def settings(self, headers: Mapping[str, str], model: str | None = None) -> tuple[str | None, int]:
        """X-Optictx-Conversation and X-Optictx-Budget, checked (ApiError naming the header); the
        budget without the header is `--budget`, else `model`'s cap (`windows.cap_for`)."""
        name = headers.get("x-optictx-conversation")
        if name is not None and not (0 < len(name) <= MAX_NAME and name.isprintable()):
            raise ApiError(f"X-Optictx-Conversation: 1 to {MAX_NAME} printable characters",
                           param="X-Optictx-Conversation")
        raw = headers.get("x-optictx-budget")
        if raw is None:
            return name, self.config.budget or cap_for(model)
        digits = raw.strip()
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 9 and 1 <= int(digits) <= MAX_BUDGET):
            raise ApiError(f"X-Optictx-Budget: a whole number of tokens from 1 to {MAX_BUDGET}, got {raw[:40]!r}",
                           param="X-Optictx-Budget")
        return name, int(digits)

    def fit(self, dialect: Dialect, parsed: Parsed, headers: Mapping[str, str], *, keep: bool = True,
            at: float | None = None) -> Fitted:
        """Fit `parsed` through its conversation. `keep=False` (token counting): a conversation
        that holds exactly these turns is used, else a memory that is thrown away afterwards.
        `at`: the request's time (default now; a replay gives its own clock). A request that
        goes as it came, or whose turns are partly kept as they came, says why
        (`Fitted.fallback`), counted by kind (`FALLBACKS`)."""
        return self._said(parsed, self._fit(dialect, parsed, headers, keep, at))

    def grow(self, conversation: str, dialect: Dialect, parsed: Parsed, held: int, headers: Mapping[str, str], *,
             at: float | None = None) -> Fitted:
        """Fit `parsed`, a request that continues `conversation`, whose memory holds its first
        `held` turns: for a caller that builds an append-only client's requests itself
        (`optictx bill`, `Parsed.grown`), so that only the turns it adds are read, where `fit`
        reads the whole request to find its conversation. What follows is `fit`'s own path."""
        budget = self.settings(headers, parsed.model)[1]
        tenant = self.tenant(headers)
        new = kept_turns(parsed, held, pin=self.config.pin_task, words=self.config.words)
        vision = vision_for(parsed.model, dialect.provider, self.config.vision)
        try:
            conv = self.conversations.continued(tenant, conversation, new, held)
        except TurnTooLargeError as exc:
            return self._said(parsed, self._as_it_came(dialect, parsed, tenant, f"too-large: {str(exc)[:160]}"))
        return self._said(parsed, self._serve(conv, tenant, dialect, parsed, budget, vision, at))

    @staticmethod
    def _said(parsed: Parsed, fitted: Fitted) -> Fitted:
        """`fitted`, saying why it went as it came, or why some turns went so (`Fitted.fallback`),
        counted by kind (`FALLBACKS`)."""
        if fitted.fallback is None and fitted.context is not None and not fitted.context.verbatim and parsed.kept:
            fitted = replace(fitted, fallback=f"kept-as-sent: {parsed.kept}")
        if fitted.fallback is not None:
            FALLBACKS[fitted.fallback.split(":", 1)[0]] += 1
        return fitted

    def _shown(self, conv: Conversation, ctx: Context | None) -> None:
        """Put the conversation's pages in the ledger, by handle, for the MCP tools (those shown,
        and those gone from the context, which a search still names); each page once, and again
        when its span grew."""
        if ctx is None:
            return
        pages = conv.memory.pages[conv.sealed_shown :]  # a sealed page never changes: once is enough
        spans = [(s.handle, s.first, s.last) for s in spans_of(pages)]
        new = [s for s in spans if conv.shown.get(s[0]) != s[1:]]
        if new:
            self.ledger.pages(conv.tenant, conv.id, new)
            conv.shown.update((h, (a, b)) for h, a, b in new)
        conv.sealed_shown += next((i for i, p in enumerate(pages) if not p.sealed), len(pages))

    def _as_it_came(self, dialect: Dialect, parsed: Parsed, tenant: str, why: str) -> Fitted:
        log.info("a %s request sent as it came: %s", dialect.name, why)
        record = Sent("-", tenant, dialect.name, parsed.model, vision_for(parsed.model, dialect.provider,
                      self.config.vision), 0, 0, 0, True, {})
        return Fitted(parsed.raw, record, None, why)

    def _fit(self, dialect: Dialect, parsed: Parsed, headers: Mapping[str, str], keep: bool,
             at: float | None) -> Fitted:
        name, budget = self.settings(headers, parsed.model)
        tenant = self.tenant(headers)
        if parsed.passthrough is not None:  # not a whole conversation: nothing to keep or fit
            return self._as_it_came(dialect, parsed, tenant, parsed.passthrough)
        paused = self.refusals.paused(parsed.model)
        if paused is not None and keep:  # its upstream refuses pages lately: none for a while
            return self._as_it_came(dialect, parsed, tenant, paused)
        parsed = replace(parsed, turns=kept_turns(parsed, pin=self.config.pin_task, words=self.config.words))
        vision = vision_for(parsed.model, dialect.provider, self.config.vision)
        try:
            if not keep:
                return self._counted(dialect, parsed, tenant, name, budget, vision)
            conv = self.conversations.holding(tenant, name, parsed.turns, vision, budget)
        except TurnTooLargeError as exc:  # it cannot be kept; the upstream may still take it
            return self._as_it_came(dialect, parsed, tenant, f"too-large: {str(exc)[:160]}")
        return self._serve(conv, tenant, dialect, parsed, budget, vision, at)

    def _serve(self, conv: Conversation, tenant: str, dialect: Dialect, parsed: Parsed, budget: int, vision: str,
               at: float | None) -> Fitted:
        """`parsed` fitted through `conv`, which holds its turns and is locked (released here)."""
        at = time.time() if at is None else at
        try:
            fitted = self._fitted(conv.memory, conv.id, tenant, dialect, parsed, budget, vision, at=at)
            conv.last = fitted.context
            self._shown(conv, fitted.context)
            sent = fitted.sent
            charge = conv.meter.charge(fitted.context, sent.original, sent.sent, vision, parsed.model, at,
                                       front_of(parsed), ttl_of(dialect, parsed))
            return replace(fitted, charge=charge, meter=conv.meter, sent=replace(
                sent, cost=charge.optictx, passthrough=charge.passthrough, cost_usd=charge.optictx_usd,
                passthrough_usd=charge.passthrough_usd, why=charge.why, prices=charge.prices))
        finally:
            conv.lock.release()
            self.drawahead.after(conv)

    def _counted(self, dialect: Dialect, parsed: Parsed, tenant: str, name: str | None, budget: int,
                 vision: str) -> Fitted:
        """Token counting: through the conversation that holds exactly these turns, else a
        memory thrown away afterwards; nothing is kept."""
        held = self.conversations.exactly(tenant, name, parsed.turns)
        if held is not None:
            try:
                return self._fitted(held.memory, held.id, tenant, dialect, parsed, budget, vision, commit=False)
            finally:
                held.lock.release()
        memory = self.memory(None, vision, budget)
        with memory.batch():
            for t in parsed.turns:
                memory.add(t)
        return self._fitted(memory, "-", tenant, dialect, parsed, budget, vision)

    def _fitted(self, memory: Memory, conversation: str, tenant: str, dialect: Dialect, parsed: Parsed,
                budget: int, vision: str, *, commit: bool = True, at: float | None = None) -> Fitted:
        extra = overhead(memory, parsed)
        original = memory.original_tokens(vision) + extra
        front = Instructions(dialect.name, vision, room=_room(memory, vision)) if self.config.image_instructions \
            else None
        try:
            if budget - extra < 1:
                raise BudgetError(f"the tool definitions alone take {extra} of the {budget} tokens")
            tools = recall_tools(parsed.body.get("tools"), lambda: parsed.mentions)
            body, ctx = fit(memory, dialect, parsed, budget, vision, commit=commit, at=at, front=front, tools=tools)
        except BudgetError as exc:  # never worse than no proxy: it goes as it came
            log.warning("conversation %s does not fit %d tokens (%s): sent as it came", conversation, budget, exc)
            record = Sent(conversation, tenant, dialect.name, parsed.model, vision, len(parsed.turns), original,
                          original, True, {})
            # Said in the answer, not in the log alone: what does not fit, and by how much.
            return Fitted(parsed.raw, record, None, f"budget: {str(exc)[:200]}")
        moved = front.moved if front is not None else 0  # the instructions drawn count less than as text
        record = Sent(conversation, tenant, dialect.name, parsed.model, vision, len(parsed.turns), original,
                      ctx.tokens + extra - moved, ctx.verbatim, tiers_of(ctx), event=ctx.event, budget=ctx.budget.limit,
                      at=at, tools=tools)
        return Fitted(body, record, ctx)

    def close(self) -> None:
        self.drawahead.close()
        self.conversations.close()
