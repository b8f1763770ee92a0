"""The proxy's own records, in one SQLite database: which conversation each message chain leads
to, and one row per request for the dashboard. With `--store` it is a file next to the
memories (0600); without, it lives in memory. Keys are digests: no API key, no message text."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..store import private_file

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, name TEXT, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS chain (
    digest BLOB PRIMARY KEY, conversation TEXT NOT NULL, turns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS chain_by_conversation ON chain (conversation);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY, conversation TEXT NOT NULL, tenant TEXT NOT NULL, at REAL NOT NULL,
    api TEXT NOT NULL, model TEXT NOT NULL, vision TEXT NOT NULL, turns INTEGER NOT NULL,
    original INTEGER NOT NULL, sent INTEGER NOT NULL, verbatim INTEGER NOT NULL, tiers TEXT NOT NULL,
    status INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS requests_by_tenant ON requests (tenant, conversation);
"""


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


class Ledger:
    def __init__(self, folder: Path | None) -> None:
        self.path = ":memory:" if folder is None else str(folder / "optictx-serve.db")
        try:
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                private_file(Path(self.path))
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{self.path}: cannot open the proxy's records ({exc})") from exc
        self._lock = threading.Lock()

    def _run(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc

    def longest(self, digests: list[bytes]) -> tuple[str, int] | None:
        """(conversation, turns) of the longest prefix of the chain that leads somewhere."""
        for digest in reversed(digests):
            row = self._run("SELECT conversation, turns FROM chain WHERE digest = ?", (digest,))
            if row:
                return row[0][0], row[0][1]
        return None

    def new_conversation(self, conversation: str, tenant: str, name: str | None) -> None:
        self._run("INSERT INTO conversations VALUES (?, ?, ?, ?)", (conversation, tenant, name, time.time()))

    def extend(self, conversation: str, digests: list[bytes], first: int) -> None:
        """Chain digests[first:] (of turns first+1, ...) lead to `conversation`."""
        rows = [(d, conversation, first + i + 1) for i, d in enumerate(digests[first:])]
        with self._lock:
            try:
                with self._db:
                    self._db.execute("BEGIN")
                    self._db.executemany("INSERT OR REPLACE INTO chain VALUES (?, ?, ?)", rows)
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: {exc}") from exc

    def forget(self, conversation: str) -> None:
        """A conversation whose memory is gone (not stored, closed): no chain leads to it."""
        self._run("DELETE FROM chain WHERE conversation = ?", (conversation,))

    def record(self, sent: Sent) -> None:
        self._run("INSERT INTO requests (conversation, tenant, at, api, model, vision, turns, original, sent, "
                  "verbatim, tiers, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                  (sent.conversation, sent.tenant, time.time(), sent.api, sent.model, sent.vision, sent.turns,
                   sent.original, sent.sent, int(sent.verbatim), json.dumps(sent.tiers), sent.status))

    def conversations(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's conversations, newest request first, with totals."""
        rows = self._run(
            "SELECT c.id, c.name, c.created, COUNT(r.id), COALESCE(SUM(r.original), 0), COALESCE(SUM(r.sent), 0), "
            "MAX(r.at) FROM conversations c LEFT JOIN requests r ON r.conversation = c.id "
            "WHERE c.tenant = ? GROUP BY c.id ORDER BY MAX(r.at) DESC", (tenant,))
        keys = ("id", "name", "created", "requests", "original", "sent", "last")
        return [dict(zip(keys, r)) for r in rows]

    def requests(self, tenant: str, conversation: str) -> list[dict[str, Any]]:
        rows = self._run("SELECT at, api, model, vision, turns, original, sent, verbatim, tiers, status FROM requests "
                         "WHERE tenant = ? AND conversation = ? ORDER BY id", (tenant, conversation))
        keys = ("at", "api", "model", "vision", "turns", "original", "sent", "verbatim", "tiers", "status")
        return [{**dict(zip(keys, r)), "verbatim": bool(r[7]), "tiers": json.loads(r[8])} for r in rows]

    def owner(self, conversation: str) -> str | None:
        row = self._run("SELECT tenant FROM conversations WHERE id = ?", (conversation,))
        return row[0][0] if row else None

    def close(self) -> None:
        with self._lock:
            self._db.close()
