"""Plain tables beside the memories, in either database: one way to create them and run
statements on them, for records that are not turns (the proxy's ledger, `serve/ledger.py`).

A statement is written once, with `?` for parameters and `{p}`, `{real}`, `{blob}`, `{serial}`
for what the two databases spell differently: `{p}` prefixes the tables (in PostgreSQL they
share a database with the memories). SQLite opens its file as the memories' store does
(`sqlite.connect`, `sqlite.durable`); PostgreSQL runs on the memories' connection pool with their retries
(`pgdb.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .sqlite import connect, durable

_SQLITE = {"p": "", "real": "REAL", "blob": "BLOB", "serial": "INTEGER"}
# How long a statement waits for another process's write: records are written on a request's
# way (the proxy's ledger, after the answer), so a few seconds, never the memories' minute.
_WAIT_S = 5.0
_POSTGRES = {"p": "optictx_serve_", "real": "DOUBLE PRECISION", "blob": "BYTEA", "serial": "BIGSERIAL"}


class SQLiteTables:
    """Tables in a SQLite file (or `:memory:`)."""

    def __init__(self, path: str, schema: str, added: Mapping[str, Sequence[str]]) -> None:
        self.where = path
        self._db = connect(path, _WAIT_S)
        durable(self._db)
        self._lock = threading.Lock()
        self._db.executescript(schema.format(**_SQLITE))
        for table, columns in added.items():  # columns added since the first schema: an older file gains them
            have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for column in columns:
                if column.split()[0] not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column.format(**_SQLITE)}")

    def run(self, sql: str, args: Sequence[Any], idempotent: bool) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql.format(**_SQLITE), tuple(args)).fetchall()

    def many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """All rows in one transaction."""
        with self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.executemany(sql.format(**_SQLITE), rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class PostgresTables:
    """Tables in the memories' PostgreSQL database, on their shared connection pool. `lock`: an
    advisory lock under which replicas starting at once create the tables once."""

    def __init__(self, url: str, schema: str, added: Mapping[str, Sequence[str]], lock: int) -> None:
        from . import pgdb  # psycopg is an extra: optictx[postgres]

        self._pg, self._url, self.where = pgdb, url, pgdb.where(url)
        self._pool = pgdb.pool(url)
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
            for statement in schema.format(**_POSTGRES).split(";"):
                conn.execute(statement)
            for table, columns in added.items():
                for column in columns:
                    conn.execute(f"ALTER TABLE {_POSTGRES['p']}{table} ADD COLUMN IF NOT EXISTS "
                                 + column.format(**_POSTGRES))

    def _retried(self, work: Callable[[Any], Any], idempotent: bool) -> Any:
        # A dropped connection is tried again, unless that could count a row twice.
        return self._pg.retrying(self._pool, work, attempts=3 if idempotent else 1)

    def run(self, sql: str, args: Sequence[Any], idempotent: bool) -> list[tuple[Any, ...]]:
        def work(conn: Any) -> list[tuple[Any, ...]]:
            cur = conn.execute(sql.format(**_POSTGRES).replace("?", "%s"), tuple(args))
            return cur.fetchall() if cur.description else []

        return self._retried(work, idempotent)  # type: ignore[no-any-return]

    def many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """All rows in one transaction."""

        def work(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(sql.format(**_POSTGRES).replace("?", "%s"), rows)

        self._retried(work, True)

    def close(self) -> None:
        self._pg.release(self._url)
