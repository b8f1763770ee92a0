"""The proxy's own records: which conversation each message chain leads to, and one row per
request for the dashboard. In one SQLite database (a file next to the memories, 0600, with
`--store FOLDER`; in memory without) or, with `--store postgresql://...`, in tables beside the
memories, shared by every replica. Keys are digests: no API key is kept, and the only message
text is a conversation's title (the start of its first user message; the memories beside it
hold the whole conversation anyway)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..store import is_postgres, private_file
from ..store.sql import PostgresTables, SQLiteTables
from .answers import store_trouble

# One schema for both databases, in the spelling of store/sql.py: {p} prefixes the tables, {real},
# {blob}, {serial} are each database's types, statements use `?`.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}conversations (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, name TEXT, created {real} NOT NULL);
CREATE TABLE IF NOT EXISTS {p}chain (
    digest {blob} PRIMARY KEY, conversation TEXT NOT NULL, turns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS {p}chain_by_conversation ON {p}chain (conversation);
CREATE TABLE IF NOT EXISTS {p}requests (
    id {serial} PRIMARY KEY, conversation TEXT NOT NULL, tenant TEXT NOT NULL, at {real} NOT NULL,
    api TEXT NOT NULL, model TEXT NOT NULL, vision TEXT NOT NULL, turns INTEGER NOT NULL,
    original INTEGER NOT NULL, sent INTEGER NOT NULL, verbatim INTEGER NOT NULL, tiers TEXT NOT NULL,
    status INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS {p}requests_by_tenant ON {p}requests (tenant, conversation);
CREATE TABLE IF NOT EXISTS {p}pages (
    tenant TEXT NOT NULL, handle TEXT NOT NULL, conversation TEXT NOT NULL, first_turn INTEGER NOT NULL,
    last_turn INTEGER NOT NULL, PRIMARY KEY (tenant, handle))
"""
# Columns added since the first schema: ledgers written by an older optictx gain them on open.
# The bill of each request in base-input tokens (a cache read at 0.1x counts a tenth) and in
# dollars: optictx's prompt and the conversation as it came, modeled under the provider's cache
# rules (serve/meter.py), and what the upstream said it billed (NULL: it said nothing).
# A conversation's title: the start of its first user message (`conversations.title_of`).
# The budget the memory planned the request's context to (the request's less its tools), which with
# its time and vision draws that context again after a restart (`Conversations.latest`).
# The probable misreadings of its pages in the request's answer, as JSON (`answer.misread_json`).
# What made a request cost more than an append, modeled: a cold cache, the client's own front changed.
# Whose prices stood in for its model's where genai-prices does not know it (NULL: the model's own).
# Why the upstream refused the pages, where it did and the request went again as it came.
# The names the request gave the MCP tools (JSON), which the caption says and the plan state is
# kept under: with the budget, what draws that context again after a restart.
_ADDED = {"requests": ("event TEXT", "cost {real}", "passthrough {real}", "billed {real}", "cost_usd {real}",
                       "passthrough_usd {real}", "billed_usd {real}", "usage TEXT", "budget INTEGER",
                       "misread TEXT", "why TEXT", "prices TEXT", "refused TEXT", "tools TEXT"),
          "conversations": ("title TEXT",)}
_MONEY = ("cost", "passthrough", "billed", "cost_usd", "passthrough_usd", "billed_usd")
_SCHEMA_LOCK = 0x6F707376  # advisory lock "opsv": replicas starting at once create the tables once


@dataclass(frozen=True)
class Sent:
    """What one request sent upstream, for the dashboard."""

    conversation: str
    tenant: str
    api: str
    model: str
    vision: str
    turns: int
    original: int  # the request's messages as they came, under the cost model
    sent: int  # what went upstream, under the same cost model
    verbatim: bool
    tiers: dict[str, int]
    status: int = 0
    event: str | None = None  # the plan's: append, verbatim, first, forced, paid (prefix.py)
    cost: float | None = None  # modeled, base-input tokens: what went upstream
    passthrough: float | None = None  # modeled: the request as it came
    billed: float | None = None  # what the upstream reported, priced the same way
    cost_usd: float | None = None
    passthrough_usd: float | None = None
    billed_usd: float | None = None
    usage: str | None = None  # the upstream's usage, as JSON (meter.Usage)
    budget: int | None = None  # the context's budget (None: no context was planned)
    at: float | None = None  # when it was planned (None: when it is recorded)
    misread: str | None = None  # probable misreadings of its pages in the answer, JSON (None: none)
    why: str | None = None  # `meter.Charge.why`
    prices: str | None = None  # `meter.Charge.prices`
    refused: str | None = None  # why the upstream refused its pages (`refusals.Refusal`): it went as it came
    tools: tuple[str, ...] = ()  # the names the request gave the MCP tools (`proxy.recall_tools`)


_SANE = 10**15  # tokens or dollars of one request above this are no fact (and JSON has no inf)


def _sane(value: Any) -> Any:
    """A stored amount as the dashboard can show it: an absurd or non-finite one as not known."""
    return None if isinstance(value, float) and not abs(value) < _SANE else value


_CHUNK = 500  # digests per lookup: under every SQLite build's limit of bound parameters


def _text(value: str, limit: int = 200) -> str:
    """A client's string as both databases store it: no lone surrogates, no NUL, not unbounded."""
    return value[:limit].encode("utf-8", "replace").decode("utf-8").replace("\0", "\ufffd")


class Ledger:
    """`store`: None (in memory), a folder, or a PostgreSQL URL."""

    def __init__(self, store: Path | str | None) -> None:
        try:
            if is_postgres(store):
                self._db: SQLiteTables | PostgresTables = PostgresTables(str(store), _SCHEMA, _ADDED, _SCHEMA_LOCK)
            else:
                path = ":memory:" if store is None else str(Path(store) / "optictx-serve.db")
                if store is not None:
                    Path(store).mkdir(parents=True, exist_ok=True, mode=0o700)
                    private_file(Path(path))
                self._db = SQLiteTables(path, _SCHEMA, _ADDED)
        except StoreError:
            raise
        except Exception as exc:  # OSError, sqlite3.Error, psycopg.Error
            raise StoreError(f"{'the database' if is_postgres(store) else store}: cannot open the proxy's records "
                             f"({str(exc).strip()[:300]})") from None
        self.path = self._db.where

    def _run(self, sql: str, args: Sequence[Any] = (), *, idempotent: bool = True) -> list[tuple[Any, ...]]:
        try:
            return self._db.run(sql, args, idempotent)
        except Exception as exc:
            if not store_trouble(exc):  # a bug: the caller's 500 logs it with its traceback and counts it
                raise
            raise StoreError(f"{self.path}: {str(exc).strip()[:300]}") from exc  # unreadable or gone: a 503

    def longest(self, digests: list[bytes]) -> tuple[str, int] | None:
        """(conversation, turns) of the longest prefix of the chain that leads somewhere."""
        # One query per 500 digests, newest first (a continued conversation is found in the
        # first), not one per message: a digest names its whole prefix, so the longest is the
        # matching row with the most turns.
        for end in range(len(digests), 0, -_CHUNK):
            part = digests[max(0, end - _CHUNK) : end]
            row = self._run("SELECT conversation, turns FROM {p}chain WHERE digest IN "
                            f"({', '.join('?' * len(part))}) ORDER BY turns DESC LIMIT 1", part)
            if row:
                return row[0][0], row[0][1]
        return None

    def new_conversation(self, conversation: str, tenant: str, name: str | None, title: str = "") -> None:
        self._run("INSERT INTO {p}conversations (id, tenant, name, created, title) VALUES (?, ?, ?, ?, ?) "
                  "ON CONFLICT (id) DO NOTHING", (conversation, tenant, name, time.time(), _text(title, 120)))

    def extend(self, conversation: str, digests: list[bytes], first: int) -> None:
        """Chain digests[first:] (of turns first+1, ...) lead to `conversation`."""
        rows = [(d, conversation, first + i + 1) for i, d in enumerate(digests[first:])]
        try:
            self._db.many("INSERT INTO {p}chain VALUES (?, ?, ?) ON CONFLICT (digest) DO UPDATE "
                          "SET conversation = excluded.conversation, turns = excluded.turns", rows)
        except Exception as exc:
            raise StoreError(f"{self.path}: {str(exc).strip()[:300]}") from exc

    def forget(self, conversation: str) -> None:
        """A conversation whose memory is gone (not stored, closed): no chain leads to it."""
        self._run("DELETE FROM {p}chain WHERE conversation = ?", (conversation,))

    def pages(self, tenant: str, conversation: str, spans: Sequence[tuple[str, int, int]]) -> None:
        """The pages a request showed, (handle, first turn, last turn): the tenant's MCP tools find
        a page by its handle here. A page's span only grows (the open page takes more turns); a
        handle stays its first conversation's."""
        try:
            self._db.many("INSERT INTO {p}pages VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, handle) DO UPDATE "
                          "SET last_turn = excluded.last_turn WHERE {p}pages.conversation = excluded.conversation",
                          [(tenant, h, conversation, first, last) for h, first, last in spans])
        except Exception as exc:
            raise StoreError(f"{self.path}: {str(exc).strip()[:300]}") from exc

    def page(self, tenant: str, handle: str) -> tuple[str, int, int] | None:
        """(conversation, first turn, last turn) of the tenant's page `handle`, or None."""
        rows = self._run("SELECT conversation, first_turn, last_turn FROM {p}pages WHERE tenant = ? AND handle = ?",
                         (tenant, handle))
        return (rows[0][0], int(rows[0][1]), int(rows[0][2])) if rows else None

    def spans(self, tenant: str, conversation: str) -> list[tuple[str, int, int]]:
        """(handle, first, last) of a conversation's pages shown so far, oldest first."""
        return [(h, int(a), int(b)) for h, a, b in self._run(
            "SELECT handle, first_turn, last_turn FROM {p}pages WHERE tenant = ? AND conversation = ? "
            "ORDER BY first_turn", (tenant, conversation))]

    def record(self, sent: Sent) -> None:
        self._run("INSERT INTO {p}requests (conversation, tenant, at, api, model, vision, turns, original, sent, "
                  "verbatim, tiers, status, event, cost, passthrough, billed, cost_usd, passthrough_usd, billed_usd, "
                  f"usage, budget, misread, why, prices, refused, tools) VALUES ({', '.join('?' * 26)})",
                  (sent.conversation, sent.tenant, sent.at or time.time(), sent.api, _text(sent.model), sent.vision,
                   sent.turns, sent.original, sent.sent, int(sent.verbatim), json.dumps(sent.tiers), sent.status,
                   sent.event, sent.cost, sent.passthrough, sent.billed, sent.cost_usd, sent.passthrough_usd,
                   sent.billed_usd, sent.usage, sent.budget, sent.misread, sent.why, sent.prices,
                   _text(sent.refused, 300) if sent.refused else None, json.dumps(sent.tools) if sent.tools else None),
                  idempotent=False)  # tried again, a dashboard row could count twice

    def conversations(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's conversations, newest request first, with totals: tokens, and the bill
        (modeled both ways, and as the upstream reported it) in base-input tokens and dollars;
        `came_billed_usd`, the requests as they came modeled over those the upstream billed (the
        figure its bill is weighed against); `estimated`, the requests priced at a family's
        multipliers because their model's prices are not known."""
        # Only sane amounts are summed: rows an older optictx wrote from an upstream's absurd usage
        # (1e308 tokens) would make the sum infinite, and the dashboard unreadable for good.
        money = ", ".join(f"SUM(CASE WHEN ABS(r.{c}) < {_SANE} THEN r.{c} END)" for c in _MONEY)
        rows = self._run(
            "SELECT c.id, c.name, c.created, COUNT(r.id), COALESCE(SUM(r.original), 0), COALESCE(SUM(r.sent), 0), "
            f"MAX(r.at), {money}, SUM(CASE WHEN ABS(r.billed_usd) < {_SANE} AND ABS(r.passthrough_usd) < {_SANE} "
            "THEN r.passthrough_usd END), COUNT(r.prices), c.title, (SELECT model FROM {p}requests m "
            "WHERE m.tenant = c.tenant AND m.conversation = c.id ORDER BY m.id DESC LIMIT 1) "  # its last model
            "FROM {p}conversations c LEFT JOIN {p}requests r ON r.conversation = c.id WHERE c.tenant = ? "
            "GROUP BY c.id ORDER BY MAX(r.at) DESC NULLS LAST, c.created DESC", (tenant,))
        keys = ("id", "name", "created", "requests", "original", "sent", "last", *_MONEY, "came_billed_usd",
                "estimated", "title", "model")
        return [dict(zip(keys, (*r[:3], *map(int, r[3:6]), *r[6:]))) for r in rows]

    def requests(self, tenant: str, conversation: str) -> list[dict[str, Any]]:
        keys = ("at", "api", "model", "vision", "turns", "original", "sent", "verbatim", "tiers", "status", "event",
                "why", "prices", "refused", *_MONEY, "usage", "misread")
        rows = self._run(f"SELECT {', '.join(keys)} FROM {{p}}requests WHERE tenant = ? AND conversation = ? "
                         "ORDER BY id", (tenant, conversation))
        return [{**{k: _sane(v) for k, v in zip(keys, r)}, "verbatim": bool(r[7]), "tiers": json.loads(r[8]),
                 "usage": json.loads(r[-2]) if r[-2] else None, "misread": json.loads(r[-1]) if r[-1] else []}
                for r in rows]

    def latest(self, tenant: str, conversation: str) -> dict[str, Any] | None:
        """The conversation's newest request that planned a context: its time, vision, budget and
        the names it gave the MCP tools."""
        row = self._run("SELECT at, vision, budget, tools FROM {p}requests WHERE tenant = ? AND conversation = ? "
                        "AND budget IS NOT NULL ORDER BY id DESC LIMIT 1", (tenant, conversation))
        if not row:
            return None
        at, vision, budget, tools = row[0]
        return {"at": at, "vision": vision, "budget": budget, "tools": _names(tools)}

    def owner(self, conversation: str) -> str | None:
        row = self._run("SELECT tenant FROM {p}conversations WHERE id = ?", (conversation,))
        return row[0][0] if row else None

    def close(self) -> None:
        self._db.close()


def _names(stored: str | None) -> tuple[str, ...]:
    """The tool names a row keeps (none where it keeps none, or what it keeps is not a list of
    names: a damaged row draws the context without them)."""
    try:
        names = json.loads(stored) if stored else []
    except ValueError:
        return ()
    return tuple(names) if isinstance(names, list) and all(isinstance(n, str) for n in names) else ()
