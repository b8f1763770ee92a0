"""The proxy's work for one request, away from the event loop: find the conversation, add what
is new, fit the context, write the body that goes upstream."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..context import Context
from ..errors import BudgetError
from ..memory import Memory
from .config import ServeConfig
from .conversations import Conversations, tenant_of
from .dialect import ApiError, Dialect, Parsed
from .ledger import Ledger, Sent
from .shelf import shelf_for
from .vision import vision_for

log = logging.getLogger("optictx.serve")

MAX_BUDGET = 10**8
MAX_NAME = 200


@dataclass(frozen=True)
class Fitted:
    body: bytes
    sent: Sent
    context: Context | None  # None: the request went as it came although it does not fit
    fallback: str | None = None  # why it went so


def fit(memory: Memory, dialect: Dialect, parsed: Parsed, budget: int, vision: str) -> tuple[bytes, Context]:
    """The upstream body for `parsed` from a memory holding exactly its turns, and its context.
    The same for any memory holding those turns with the same settings: the proxy's, or a fresh
    one (tests/test_serve.py holds the proxy to that)."""
    ctx = memory.context(budget=budget, vision=vision)
    return dialect.fitted(parsed, ctx), ctx


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
                                           config.max_open)

    def memory(self, store: str | Path | None) -> Memory:
        """A new conversation's memory; contexts are built per request (budget, vision)."""
        return Memory(keep_recent=self.config.keep_recent, budget=self.config.budget, store=store,
                      image_cache_bytes=self.config.image_cache_bytes)

    def reopen(self, store: str | Path) -> Memory:
        """A stored conversation's memory, with the settings it was made with."""
        return Memory.open(store, image_cache_bytes=self.config.image_cache_bytes)

    def settings(self, headers: Mapping[str, str]) -> tuple[str | None, int]:
        """X-Optictx-Conversation and X-Optictx-Budget, checked (ApiError naming the header)."""
        name = headers.get("x-optictx-conversation")
        if name is not None and not (0 < len(name) <= MAX_NAME and name.isprintable()):
            raise ApiError(f"X-Optictx-Conversation: 1 to {MAX_NAME} printable characters",
                           param="X-Optictx-Conversation")
        raw = headers.get("x-optictx-budget")
        if raw is None:
            return name, self.config.budget
        if not (raw.isascii() and raw.strip().isdigit() and 1 <= int(raw) <= MAX_BUDGET):
            raise ApiError(f"X-Optictx-Budget: a whole number of tokens from 1 to {MAX_BUDGET}, got {raw[:40]!r}",
                           param="X-Optictx-Budget")
        return name, int(raw)

    def fit(self, dialect: Dialect, parsed: Parsed, headers: Mapping[str, str], *, keep: bool = True) -> Fitted:
        """Fit `parsed` through its conversation. `keep=False` (token counting): a conversation
        that holds exactly these turns is used, else a memory that is thrown away afterwards."""
        name, budget = self.settings(headers)
        tenant = tenant_of(headers)
        vision = vision_for(parsed.model, dialect.name, self.config.vision)
        if not keep:
            held = self.conversations.exactly(tenant, name, parsed.turns)
            if held is not None:
                try:
                    return self._fitted(held.memory, held.id, tenant, dialect, parsed, budget, vision)
                finally:
                    held.lock.release()
            memory = self.memory(None)
            with memory.batch():
                for t in parsed.turns:
                    memory.add(t)
            return self._fitted(memory, "-", tenant, dialect, parsed, budget, vision)
        conv = self.conversations.holding(tenant, name, parsed.turns)
        try:
            fitted = self._fitted(conv.memory, conv.id, tenant, dialect, parsed, budget, vision)
            conv.last = fitted.context
            return fitted
        finally:
            conv.lock.release()

    def _fitted(self, memory: Memory, conversation: str, tenant: str, dialect: Dialect, parsed: Parsed,
                budget: int, vision: str) -> Fitted:
        original = memory.original_tokens(vision)
        try:
            body, ctx = fit(memory, dialect, parsed, budget, vision)
        except BudgetError as exc:  # never worse than no proxy: it goes as it came
            log.warning("conversation %s does not fit %d tokens (%s): sent as it came", conversation, budget, exc)
            record = Sent(conversation, tenant, dialect.name, parsed.model, vision, len(parsed.turns), original,
                          original, True, {})
            return Fitted(parsed.raw, record, None, "budget")
        record = Sent(conversation, tenant, dialect.name, parsed.model, vision, len(parsed.turns), original,
                      ctx.tokens, ctx.verbatim, tiers_of(ctx))
        return Fitted(body, record, ctx)

    def close(self) -> None:
        self.conversations.close()
