"""Stores keep every turn verbatim, forever: in memory, or in a SQLite file (WAL, durable adds)."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Protocol

from .errors import StoreError
from .turns import Turn

SCHEMA_VERSION = 1
_APP_ID = 0x6F707478  # "optx": marks the file as an optictx memory


class Store(Protocol):
    """Append-only turn storage. `append` assigns the next id and returns the stored turn."""

    def append(self, turn: Turn) -> Turn: ...

    def turns(self) -> list[Turn]: ...

    def get_meta(self) -> dict[str, Any] | None: ...

    def set_meta(self, meta: dict[str, Any]) -> None: ...


class MemoryStore:
    """The default: a list in this process."""

    def __init__(self) -> None:
        self._turns: list[Turn] = []
        self._meta: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def append(self, turn: Turn) -> Turn:
        with self._lock:
            stored = turn.model_copy(update={"id": len(self._turns)})
            self._turns.append(stored)
            return stored

    def turns(self) -> list[Turn]:
        return list(self._turns)

    def get_meta(self) -> dict[str, Any] | None:
        return self._meta

    def set_meta(self, meta: dict[str, Any]) -> None:
        self._meta = dict(meta)


class SQLiteStore:
    """Turns as JSON rows in SQLite. A turn is durable (committed, fsynced) when `append` returns."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a readable optictx memory ({exc})") from exc

    def _init_schema(self) -> None:
        app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if app_id == 0 and not tables:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute(f"PRAGMA application_id={_APP_ID}")
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                self._db.execute("CREATE TABLE turns (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
                self._db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            return
        if app_id != _APP_ID:
            raise StoreError(f"{self.path}: this SQLite file is not an optictx memory")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: written by a newer optictx (schema {version}); upgrade optictx")

    def append(self, turn: Turn) -> Turn:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                (next_id,) = self._db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM turns").fetchone()
                stored = turn.model_copy(update={"id": next_id})
                self._db.execute("INSERT INTO turns (id, body) VALUES (?, ?)", (next_id, _dump(stored)))
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise StoreError(f"{self.path}: could not store a turn ({exc})") from exc
            return stored

    def turns(self) -> list[Turn]:
        try:
            rows = self._db.execute("SELECT body FROM turns ORDER BY id").fetchall()
            # json.loads, not pydantic's parser: only the stdlib one accepts lone-surrogate escapes.
            return [Turn.model_validate(json.loads(body)) for (body,) in rows]
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise StoreError(f"{self.path}: corrupt turn data ({exc})") from exc

    def get_meta(self) -> dict[str, Any] | None:
        row = self._db.execute("SELECT value FROM meta WHERE key='memory'").fetchone()
        return json.loads(row[0]) if row else None

    def set_meta(self, meta: dict[str, Any]) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('memory', ?)", (json.dumps(meta),))

    def close(self) -> None:
        self._db.close()


def _dump(turn: Turn) -> str:
    # ensure_ascii: lone surrogates survive as \ud800 escapes instead of failing to encode.
    return json.dumps(turn.model_dump(mode="python"), ensure_ascii=True, default=str)
